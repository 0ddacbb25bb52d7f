// stagecraft-cli run: train a configuration with Stagecraft's engine on this machine, on the
// hosts of a hostfile or on a Slurm cluster (--slurm: a batch job, --dry-run prints its script), one worker process per rank, or run another program in its place
// (--worker PROGRAM [-- ARGS], launch.program), with a live progress line (or the events as JSON
// lines).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/preflight.h"
#include "stagecraft/launch/program.h"
#include "stagecraft/launch/run_session.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::cli {

namespace {

// The run's cancel flag (RunSession::cancel_flag), set by SIGINT / SIGTERM: a lock-free atomic
// store is async-signal-safe, and the flag outlives the supervisor, so a signal at any moment of
// the run, before the supervisor exists or as it ends, is safe.
std::atomic<bool>* g_cancel = nullptr;
std::atomic<bool> g_cancel_early{false};  // a signal before the run's flag exists
static_assert(std::atomic<bool>::is_always_lock_free);

void on_signal(int) {
  if (std::atomic<bool>* flag = g_cancel) {
    flag->store(true);
  } else {
    g_cancel_early.store(true);
  }
}

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv_in) {
  // Everything after `--` goes to another program as it is.
  std::vector<std::string> argv = argv_in, program_args;
  bool has_program_args = false;
  if (auto dash = std::find(argv.begin(), argv.end(), "--"); dash != argv.end()) {
    program_args.assign(dash + 1, argv.end());
    argv.erase(dash, argv.end());
    has_program_args = true;
  }
  ArgSpec spec;
  spec.flags = {"--json", "--detach", "--slurm", "--dry-run"};
  spec.options = {"--db", "--master-addr", "--framework"};
  spec.options.insert(host_options().begin(), host_options().end());
  spec.options.insert(slurm_option_names().begin(), slurm_option_names().end());
  spec.repeatable = {"--sbatch-arg"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "run");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("run: expected one CONFIG file (usage: stagecraft-cli run CONFIG [key=value ...] [--hosts FILE ...] [--worker PROGRAM [--framework megatron|deepspeed|torchtitan] [-- ARGS ...]] [--slurm [--partition P] [--account A] [--time T] [--qos Q] [--constraint C] [--sbatch-arg ARG ...] [--dry-run]] [--json] [--detach] [--db FILE])"));
  }
  const auto db_option = args->option("--db");
  auto cfg = load_run_config(args->positionals[0], args->overrides, db_option ? &*db_option : nullptr);
  if (!cfg.ok()) return report(cfg.status());
  // --worker: Stagecraft's own worker at another path, or any other program (launch.program).
  std::string own_worker;
  if (auto worker = args->option("--worker")) {
    if (worker->empty()) return report(Status::invalid_input("run: --worker: give a program"));
    if (is_own_worker(*worker)) {
      own_worker = *worker;
    } else {
      cfg->launch.program = *worker;
    }
  }
  if (auto framework = args->option("--framework")) {
    const auto f = enum_parse(config::kLaunchFrameworkNames, *framework);
    if (!f || *f == config::LaunchFramework::kNone) {
      return report(Status::invalid_input("run: --framework=" + *framework +
                                          ": megatron, deepspeed or torchtitan (the others take their plan as a config file: export --to)"));
    }
    cfg->launch.framework = *f;
  }
  const bool foreign = cfg->launch.foreign();
  if (has_program_args && !foreign) {
    return report(Status::invalid_input("run: the arguments after -- go to another program; give --worker PROGRAM (or launch.program)"));
  }
  // --slurm: Slurm allocates the nodes and starts the ranks (launch/slurm.h).
  const bool slurm = args->has("--slurm");
  std::optional<launch::SlurmOptions> slurm_opts;
  if (!slurm) {
    if (auto o = first_slurm_option(args.value())) return report(Status::invalid_input("run: " + *o + " is a Slurm option; give --slurm too"));
    if (args->has("--dry-run")) return report(Status::invalid_input("run: --dry-run prints the batch script of a Slurm run; give --slurm too"));
  } else {
    for (const char* o : {"--hosts", "--include", "--exclude", "--ssh-config", "--known-hosts", "--master-addr"}) {
      if (args->option(o)) return report(Status::invalid_input(std::string("run --slurm: ") + o + " is for SSH runs; Slurm picks the nodes"));
    }
    auto so = slurm_options(args.value());
    if (!so.ok()) return report(so.status());
    slurm_opts = std::move(so).value();
    const auto& c = cfg.value();
    auto plan = plan::make_plan(c);
    if (!plan.ok()) return report(plan.status());
    if (Status s = launch::check_runnable(c, plan.value(), {}, true); !s) return report(s);
    if (args->has("--dry-run")) {
      // What would be submitted, but for the run's directory: the history numbers the run when
      // it is recorded, so the script shows the one `export --to slurm` uses.
      launch::SlurmOptions shown = *slurm_opts;
      std::error_code ec;
      shown.cwd = std::filesystem::current_path(ec).string();
      if (foreign) {
        auto cmd = launch::program_command(c, program_args);
        if (!cmd.ok()) return report(cmd.status());
        shown.command = cmd->argv;
        if (!cmd->files.empty()) {
          std::fprintf(stderr, "note: a run writes %s into its run directory and passes that path instead\n", cmd->files.front().path.c_str());
        }
      }
      auto script = launch::slurm_batch_script(c, plan.value(), shown);
      if (!script.ok()) return report(script.status());
      std::fwrite(script->data(), 1, script->size(), stdout);
      return std::fflush(stdout) == 0 ? 0 : 1;
    }
  }
  // Hosts (--hosts FILE or cluster.hosts) make the run remote; they define the cluster.
  auto remote = slurm ? Result<RemoteHosts>(RemoteHosts{}) : remote_hosts(args.value(), cfg.value());
  if (!remote.ok()) return report(remote.status());
  const bool is_remote = !remote->hosts.empty();
  if (is_remote) {
    auto with = launch::with_hosts(cfg.value(), remote->hosts);
    if (!with.ok()) return report(with.status());
    cfg = std::move(with).value();
  } else if (args->option("--master-addr")) {
    return report(Status::invalid_input("--master-addr: only for remote runs; give --hosts FILE"));
  }
  const auto& c = cfg.value();
  auto plan = plan::make_plan(c);
  if (!plan.ok()) return report(plan.status());
  launch::RunRequest request;
  request.config = c;
  request.plan = std::move(plan).value();
  if (is_remote) request.hosts = remote->hosts;
  request.program_args = program_args;
  request.slurm = slurm_opts;
  if (Status s = launch::check_runnable(request.config, request.plan, request.hosts, slurm); !s) return report(s);
  const bool json = args->has("--json");
  if (foreign) {
    auto cmd = launch::program_command(request.config, program_args);
    if (!cmd.ok()) return report(cmd.status());
    if (!json) {
      for (const auto& n : cmd->notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    }
    // On the nodes of a remote or Slurm run it is preflight's to check (preflight --slurm runs
    // the check on a node of the partition).
    if (!is_remote && !slurm) {
      if (Status s = launch::check_program_here(request.config); !s) return report(s);
    }
  } else if (!own_worker.empty() && !is_remote && !slurm) {
    request.local.worker = {own_worker};
  }
  if (is_remote) {
    launch::PreflightOptions base;
    base.ssh = remote->ssh;
    base.worker_path = own_worker;
    std::error_code ec;
    const auto po = launch::preflight_options(c, base, std::filesystem::current_path(ec).string());
    const auto checks = launch::preflight(remote->hosts, po);
    bool passed = true;
    for (const auto& ch : checks) {
      passed = passed && ch.ok();
      if (json) {
        for (const auto& e : ch.errors) std::fprintf(stderr, "stagecraft-cli: error: %s\n", e.c_str());
      }
    }
    if (!json) passed = print_preflight(checks, false);
    if (!passed) return 1;
    request.remote.ssh = remote->ssh;
    if (!own_worker.empty()) request.remote.command = {own_worker};
    request.remote.master_addr = args->option("--master-addr").value_or("");
  }
  // Every run is recorded in the history before it starts; its id is the first line printed.
  const std::string db = history_path(db_option ? &*db_option : nullptr);
  auto session = launch::RunSession::record(db, std::move(request));
  if (!session.ok()) return report(session.status());
  const int64_t run_id = session.value()->id();
  if (json) {
    std::printf("{\"run_id\":%lld,\"db\":%s}\n", static_cast<long long>(run_id), json_quote(db).c_str());
  } else {
    std::printf("run %lld (history: %s)\n", static_cast<long long>(run_id), db.c_str());
  }
  std::fflush(stdout);
  if (args->has("--detach")) {
    if (const int rc = detach_supervisor(db, run_id); rc >= 0) return rc;  // the parent; the child goes on
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (Status s = session.value()->open(); !s) return report(s);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  double last_loss = NAN;
  int64_t last_step = -1;
  // Whose steps the progress line follows: rank 0's for Stagecraft's workers; for another
  // program the first rank that reports one (Megatron-LM prints them on the last rank).
  int progress_rank = foreign ? -1 : 0;
  launch::RunCallbacks cb;
  cb.on_event = [&](int rank, const launch::WorkerEvent& e) {
    if (json) {
      const std::string line = launch::encode_event(e);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
      return;
    }
    if (const auto* st = std::get_if<launch::StepEvent>(&e); st && progress_rank < 0) progress_rank = rank;
    if (const auto* st = std::get_if<launch::StepEvent>(&e); st && foreign && rank == progress_rank) {
      if (!std::isnan(st->loss)) last_loss = st->loss;
      last_step = st->step;
      std::printf("%sstep %lld  loss %.4f", tty ? "\r" : "", static_cast<long long>(st->step), st->loss);
      if (!std::isnan(st->tokens_per_s)) std::printf("  %.0f tokens/s", st->tokens_per_s);
      if (!std::isnan(st->step_ms)) std::printf("  %.1f ms/step", st->step_ms);
      std::printf("%s", tty ? "   " : "\n");
      std::fflush(stdout);
    } else if (const auto* st = std::get_if<launch::StepEvent>(&e); st && rank == progress_rank) {
      last_loss = st->loss;
      const double tps = std::isnan(st->tokens_per_s) ? 0 : st->tokens_per_s;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta =
          st->step > 0 ? elapsed / static_cast<double>(st->step) * static_cast<double>(c.train.steps - st->step) : 0;
      std::printf("%sstep %lld/%d  loss %.4f  %.0f tokens/s  ETA %s%s", tty ? "\r" : "", static_cast<long long>(st->step),
                  c.train.steps, st->loss, tps, clock_text(eta).c_str(), tty ? "   " : "\n");
      std::fflush(stdout);
    } else if (const auto* ck = std::get_if<launch::CheckpointEvent>(&e); ck && rank == 0) {
      std::printf("%scheckpoint %s\n", tty ? "\n" : "", ck->path.c_str());
    } else if (const auto* error = std::get_if<launch::ErrorEvent>(&e)) {
      std::fprintf(stderr, "stagecraft-cli: rank %d: %s\n", rank, error->message.c_str());
    }
  };
  cb.on_job = [&](const std::string& job_id, const std::string& state, const std::string& reason) {
    if (json) return;
    if (reason == "submitted") {
      std::printf("slurm job %s submitted (%s/job.sbatch)\n", job_id.c_str(), session.value()->slurm_run_dir().c_str());
    } else {
      std::printf("slurm job %s: %s%s\n", job_id.c_str(), state.c_str(),
                  reason.empty() || reason == "None" ? "" : (" (" + reason + ")").c_str());
    }
    std::fflush(stdout);
  };
  cb.on_log = [&](int rank, bool is_stderr, const std::string& line) {
    if (json || line.empty()) return;
    std::fprintf(stderr, "[rank %d%s] %s\n", rank, is_stderr ? " stderr" : "", line.c_str());
  };
  launch::RunSession& run = *session.value();
  g_cancel = run.cancel_flag();  // also set by `runs cancel` through the history
  if (g_cancel_early.load()) g_cancel->store(true);
  auto outcome = run.run(std::move(cb));
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  g_cancel = nullptr;
  if (!run.history_status().ok()) {
    std::fprintf(stderr, "stagecraft-cli: warning: run history %s: %s\n", db.c_str(), run.history_status().message().c_str());
  }
  if (!outcome.ok()) return report(outcome.status());
  if (!json && tty) std::printf("\n");
  if (!outcome->ok()) {
    std::fprintf(stderr, "stagecraft-cli: error: run %s: %s\n", std::string(launch::to_string(outcome->state)).c_str(),
                 outcome->reason.c_str());
    return 1;
  }
  if (!json) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (foreign && last_step < 0) {
      std::printf("done: %s exited 0 on every rank in %s (no metric lines)\n", c.launch.program.c_str(), clock_text(elapsed).c_str());
    } else if (foreign) {
      std::printf("done: %s exited 0 on every rank in %s, last step %lld, loss %.4f\n", c.launch.program.c_str(),
                  clock_text(elapsed).c_str(), static_cast<long long>(last_step), last_loss);
    } else {
      std::printf("done: %d steps in %s, final loss %.4f\n", c.train.steps, clock_text(elapsed).c_str(), last_loss);
    }
  }
  return 0;
}

}  // namespace stagecraft::cli
