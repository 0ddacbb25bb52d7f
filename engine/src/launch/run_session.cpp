// The one way a run starts: check, record, open, run. See run_session.h.
#include "stagecraft/launch/run_session.h"

#include <exception>
#include <filesystem>
#include <numeric>

#include <unistd.h>

#include "stagecraft/launch/program.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::launch {

namespace {

// A launch.* key set while Stagecraft's own worker runs: refused, naming the key.
Status check_no_launch_keys(const config::RunConfig& config) {
  const config::LaunchConfig defaults;
  const config::LaunchConfig& l = config.launch;
  if (l.framework != defaults.framework) {
    return Status::invalid_input("launch.framework=" + std::string(config::to_string(l.framework)) +
                                 ": passes the plan to another framework's program; set launch.program (--worker PROGRAM) too");
  }
  std::string key, value;
  if (!l.args.empty()) {
    key = "args", value = l.args;
  } else if (l.metrics != defaults.metrics) {
    key = "metrics", value = std::string(config::to_string(l.metrics));
  } else if (l.python != defaults.python) {
    key = "python", value = l.python;
  }
  if (key.empty()) return Status::OK();
  return Status::invalid_input("launch." + key + "=" + value +
                               ": applies to another program's run; set launch.program (--worker PROGRAM) too, or remove it");
}

Status check_foreign(const config::RunConfig& config) {
  if (!config.train.resume.empty()) {
    return Status::invalid_input("train.resume=" + config.train.resume +
                                 ": resumes Stagecraft's own engine; another program (launch.program) resumes through its own "
                                 "arguments (launch.args)");
  }
  if (config.train.checkpoint_every != 0) {
    return Status::invalid_input("train.checkpoint_every=" + std::to_string(config.train.checkpoint_every) +
                                 ": checkpoints of Stagecraft's own engine; another program (launch.program) takes its own through "
                                 "its arguments (launch.args); remove it");
  }
  auto cmd = program_command(config, {});
  return cmd.ok() ? Status::OK() : cmd.status();
}

}  // namespace

Status check_runnable(const config::RunConfig& config, const plan::Plan& plan, const std::vector<SelectedHost>& hosts, bool slurm) {
  const bool foreign = config.launch.foreign();
  if (slurm && (!hosts.empty() || !config.cluster.hosts.empty())) {
    return Status::invalid_input("--slurm: Slurm picks the nodes; remove --hosts and cluster.hosts (cluster.nodes says how many)");
  }
  if (!foreign) {
    if (Status s = check_no_launch_keys(config); !s) return s;
    if (config.backend == config::Backend::kCuda && !runtime::cuda_built()) {
      return Status::invalid_input("backend=cuda: this build trains on the CPU only (built without CUDA); set backend: cpu, or "
                                   "rebuild with -DSTAGECRAFT_WITH_CUDA=ON (docs/gpus.md: Building with CUDA)");
    }
  }
  if (slurm) {
    if (auto shape = slurm_shape(config, plan); !shape.ok()) return shape.status();
  } else if (hosts.empty()) {
    if (config.cluster.nodes != 1) {
      return Status::invalid_input("cluster.nodes=" + std::to_string(config.cluster.nodes) +
                                   ": a run without hosts starts every rank on this machine; use cluster.nodes: 1, "
                                   "or run on the hosts of a hostfile (--hosts FILE)");
    }
    if (!config.cluster.hosts.empty()) {
      return Status::invalid_input("cluster.hosts: a run without hosts starts every rank on this machine; remove "
                                   "cluster.hosts, or run on those hosts (--hosts FILE)");
    }
  } else {
    const size_t slots = std::accumulate(hosts.begin(), hosts.end(), size_t{0},
                                         [](size_t n, const SelectedHost& h) { return n + h.slot_ids.size(); });
    if (slots != static_cast<size_t>(plan.topology.world_size())) {
      return Status::invalid_input("hosts: " + std::to_string(hosts.size()) + " host(s) with " + std::to_string(slots) +
                                   " slots, but the plan has " + std::to_string(plan.topology.world_size()) +
                                   " ranks; plan the config for these hosts first");
    }
  }
  if (foreign) return check_foreign(config);
  // Local ranks pick GPU LOCAL_RANK mod the GPUs this machine shows (app/worker), so more ranks
  // than GPUs share them, which NCCL cannot do; none at all fails every rank. (Remote ranks get
  // their slot's GPU: preflight checks that it is there; under Slurm the job asks for the GPUs
  // and the ranks pick theirs on their nodes, launch::gpu_of_rank.)
  if (hosts.empty() && !slurm && config.backend == config::Backend::kCuda) {
    const int gpus = runtime::cuda_device_count();
    if (gpus == 0) {
      return Status::invalid_input("backend=cuda: this machine shows no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES); run on "
                                   "GPU hosts (--hosts FILE), or set backend: cpu");
    }
    if (config::comm_of(config) == config::Comm::kNccl && plan.topology.world_size() > gpus) {
      return Status::invalid_input("comm=nccl: " + std::to_string(plan.topology.world_size()) + " ranks on this machine share " +
                                   std::to_string(gpus) + " GPU(s), and NCCL needs a GPU per rank; set comm: gloo to share GPUs "
                                   "(for testing), or run fewer ranks");
    }
  }
  if (config.train.data.empty()) {
    return Status::invalid_input("train.data: no data file; give a .txt file (bytes) or a uint16 token .bin file");
  }
  if (::access(config.train.data.c_str(), R_OK) != 0) {
    return Status::invalid_input("train.data=" + config.train.data + ": cannot read the file");
  }
  auto data = runtime::TokenData::open(config.train.data, static_cast<size_t>(config.model.seq_len) + 1,
                                       runtime::token_bytes(config.train.data_dtype, config.model.vocab));
  if (!data.ok()) return data.status();
  return runtime::Trainer::check(config, &data.value());
}

Result<std::unique_ptr<RunSession>> RunSession::record(const std::string& db, RunRequest request) {
  if (Status s = check_runnable(request.config, request.plan, request.hosts, request.slurm.has_value()); !s) return s;
  if (request.slurm) {
    if (Status s = check_slurm_options(*request.slurm); !s) return s;
  }
  std::unique_ptr<RunSession> session(new RunSession());
  session->db_ = db;
  session->request_ = std::move(request);
  auto id = record_new_run(db, session->request_.config, session->request_.plan, session->host_names());
  if (!id.ok()) return id.status();
  session->id_ = id.value();
  if (session->request_.slurm) {
    SlurmOptions& so = *session->request_.slurm;
    std::error_code ec;
    const std::filesystem::path cwd = std::filesystem::current_path(ec);
    if (ec) return Status::io_error("slurm run: cannot tell the working directory: " + ec.message());
    if (so.cwd.empty()) so.cwd = cwd.string();
    if (so.run_dir.empty()) {
      std::string name = session->request_.config.name.empty() ? std::string("run") : session->request_.config.name;
      for (char& c : name) {
        if (c == '/' || c == '\n') c = '_';
      }
      so.run_dir = (cwd / "runs" / name / ("slurm-run-" + std::to_string(session->id_))).string();
    }
  }
  return session;
}

RunSession::~RunSession() = default;

std::vector<std::string> RunSession::host_names() const {
  if (request_.slurm) return {"slurm:" + (request_.slurm->partition.empty() ? std::string("default") : request_.slurm->partition)};
  if (request_.hosts.empty()) return {"localhost"};
  std::vector<std::string> names;
  for (const auto& h : request_.hosts) names.push_back(h.host);
  return names;
}

Status RunSession::open() {
  if (history_) return Status::OK();
  auto history = RunHistory::open(db_, id_);
  if (!history.ok()) return history.status().with_context("run history " + db_);
  history_ = std::move(history).value();
  return Status::OK();
}

std::atomic<bool>* RunSession::cancel_flag() { return history_ ? history_->cancel_flag() : nullptr; }

std::string RunSession::slurm_run_dir() const { return request_.slurm ? request_.slurm->run_dir : std::string(); }

void RunSession::cancel() {
  if (history_) history_->cancel_flag()->store(true);
}

Result<RunOutcome> RunSession::run(RunCallbacks callbacks) {
  if (!history_) return Status::internal("RunSession::run: open() the session first");
  RunCallbacks recorded = history_->wrap(std::move(callbacks));
  RunHistory* history = history_.get();
  auto ready = [history](Supervisor&) { history->running(); };
  Result<RunOutcome> outcome = Status::internal("the run did not start");
  std::vector<std::string> program;  // another program's command line (program.h)
  if (request_.config.launch.foreign()) {
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    // A Slurm run's files go in its own run directory: a job that waits in the queue keeps them.
    const std::string files_dir = request_.slurm ? request_.slurm->run_dir : std::string(".stagecraft");
    auto cmd = ec ? Result<ProgramCommand>(Status::io_error("run: cannot tell the working directory: " + ec.message()))
                  : prepare_program(request_.config, request_.program_args, cwd, files_dir);
    if (!cmd.ok()) {
      history_status_ = history->finish(cmd.status());
      return cmd.status();
    }
    program = std::move(cmd->argv);
  }
  try {
    if (request_.slurm) {
      SlurmRunOptions options;
      options.slurm = *request_.slurm;
      options.slurm.command = program;
      options.cancel = history->cancel_flag();
      options.on_job = [history, shown = recorded.on_job](const SlurmJobState& job) {
        history->job(job);
        if (shown) shown(job.job_id, job.state, job.reason);
      };
      options.on_running = [history](const SlurmJobState& job) { history->running("Slurm job " + job.job_id + " " + job.describe()); };
      outcome = run_slurm(request_.config, request_.plan, options, std::move(recorded));
    } else if (request_.hosts.empty()) {
      LocalRunOptions options = request_.local;
      if (!program.empty()) options.worker = program;
      options.cancel = history->cancel_flag();
      outcome = run_local(request_.config, request_.plan, options, std::move(recorded), ready);
    } else {
      RemoteRunOptions options = request_.remote;
      if (!program.empty()) options.command = program;
      options.hosts = request_.hosts;
      options.cancel = history->cancel_flag();
      outcome = run_remote(request_.config, request_.plan, options, std::move(recorded), ready);
    }
  } catch (const std::exception& e) {  // threads or memory refused by the system
    outcome = Status::internal(std::string("the run stopped: ") + e.what());
  }
  history_status_ = history->finish(outcome);
  return outcome;
}

Status RunSession::abandon(const Status& why) {
  if (!history_) return Status::internal("RunSession::abandon: open() the session first");
  history_status_ = history_->finish(why);
  return history_status_;
}

}  // namespace stagecraft::launch
