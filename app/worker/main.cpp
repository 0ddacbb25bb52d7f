// stagecraft-worker: one training rank. Started by `stagecraft-cli run` (or any torchrun-style
// launcher) with the environment of launch/worker_env.h; links the engine only, never Qt.
//
// It fetches the run configuration from the run's store (key "config"), plans it exactly as
// the launcher did, opens its device, joins its groups over the run's communicator (`comm`: NCCL
// on the GPU's memory, or Gloo through host memory), trains, and reports on stdout one JSON object
// per line (docs/ARCHITECTURE.md §8), written by launch::encode_event (launch/worker_events.h
// gives the format): start, step and timing (every step), checkpoint (rank 0), done, and error, after which
// it exits with status 1 (2: bad input). Its groups come from comm::build_process_groups.
//
// `stagecraft-worker --serve-store CONFIG` is the other role, in a Slurm job's batch step
// (launch/slurm.h): it serves the run's rendezvous store on every address of this node with the
// token in STAGECRAFT_RUN_TOKEN, publishes CONFIG's text under "config", prints the port on one
// line and serves until it is terminated.
#include <pthread.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/comm/gloo_communicator.h"
#include "stagecraft/comm/nccl_communicator.h"
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/step_events.h"
#include "stagecraft/launch/worker_env.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/trainer.h"

using namespace stagecraft;

namespace {

int g_rank = -1;

// Writes `event` as one line on stdout, naming this rank once it is known.
void emit(launch::WorkerEvent event) {
  std::visit([](auto& e) { e.rank = g_rank >= 0 ? g_rank : launch::kUnknownRank; }, event);
  const std::string line = launch::encode_event(event);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

int fail(const Status& s) {
  emit(launch::ErrorEvent{.message = s.message()});
  return s.code() == Status::Code::kInvalidInput ? 2 : 1;
}

// An out-of-memory on a GPU, with what the plan expected of this rank, so the person can tell a
// wrong estimate from a plan that does not fit.
Status with_memory_estimate(const Status& s, const plan::Plan& plan, int pp_rank, int rank) {
  if (s.code() != Status::Code::kUnavailable || s.message().find("out of memory") == std::string::npos) return s;
  for (const auto& m : plan.estimate.memory) {
    if (m.pp_rank != pp_rank) continue;
    char est[160];
    std::snprintf(est, sizeof est, "; the plan estimates %.2f GiB for rank %d (pp rank %d) on %s: see stagecraft-cli plan", m.total() / 1073741824.0,
                  rank, pp_rank, plan.estimate.device.c_str());
    return Status::unavailable(s.message() + est);
  }
  return s;
}

int run() {
  auto env = launch::read_worker_env();
  if (!env.ok()) return fail(env.status());
  g_rank = env->rank;
  runtime::cpu::set_num_threads(env->threads);
  comm::RendezvousClientOptions so;
  so.host = env->master_addr;
  so.port = env->master_port;
  so.token = env->token;
  auto store = comm::RendezvousClient::connect(so);
  if (!store.ok()) return fail(store.status());
  auto yaml = store.value()->get("config");
  if (!yaml.ok()) return fail(yaml.status().with_context("fetching the run configuration"));
  auto cfg = config::parse_config(yaml.value(), "run configuration", {});
  if (!cfg.ok()) return fail(cfg.status());
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) return fail(plan.status());
  const auto& topo = plan->topology;
  if (topo.world_size() != env->world_size) {
    return fail(Status::invalid_input("WORLD_SIZE=" + std::to_string(env->world_size) + " but the plan has " +
                                      std::to_string(topo.world_size()) + " ranks"));
  }
  auto data = runtime::TokenData::open(cfg->train.data, static_cast<size_t>(cfg->model.seq_len) + 1,
                                       runtime::token_bytes(cfg->train.data_dtype, cfg->model.vocab));
  if (!data.ok()) return fail(data.status());

  const int r = env->rank;
  const config::Comm comm_kind = config::comm_of(cfg.value());
  if (comm_kind == config::Comm::kNccl && !comm::nccl_built()) {
    return fail(Status::invalid_input("comm=nccl: this worker was built without NCCL (no CUDA); set comm: gloo, or rebuild with "
                                      "-DSTAGECRAFT_WITH_CUDA=ON"));
  }

  // The device: the CPU, or the GPU of LOCAL_RANK among those CUDA_VISIBLE_DEVICES shows (ranks
  // beyond the GPUs share them round-robin, for testing with comm gloo: launch::gpu_of_rank).
  // Opened before the groups, which NCCL makes on its GPU; declared before them, so it outlives them.
  std::unique_ptr<runtime::Device> gpu;
  runtime::Device* dev = &runtime::host_device();
  if (cfg->backend == config::Backend::kCuda) {
    auto ordinal = launch::gpu_of_rank(env.value(), runtime::cuda_device_count(), comm_kind == config::Comm::kNccl);
    if (!ordinal.ok()) return fail(ordinal.status());
    auto made = runtime::make_device(config::Backend::kCuda, ordinal.value());
    if (!made.ok()) return fail(made.status());
    gpu = std::move(made).value();
    dev = gpu.get();
  }

  const auto timeout = std::chrono::milliseconds(static_cast<long long>(cfg->train.hang_timeout_s * 1000));
  comm::CommunicatorFactory factory;
  std::shared_ptr<comm::GlooDevice> gloo;
  if (comm_kind == config::Comm::kNccl) {
    comm::NcclOptions o;
    o.timeout = timeout;
    factory = comm::nccl_communicator_factory(*store.value(), *dev, r, o);
  } else {
    auto device = comm::GlooDevice::create(comm::gloo_device_options_from_env(*store.value()));
    if (!device.ok()) return fail(device.status());
    gloo = device.value();
    comm::GlooOptions o;
    o.timeout = timeout;
    factory = comm::gloo_communicator_factory(*store.value(), gloo, r, o);
  }
  auto groups = comm::build_process_groups(topo, r, cfg->model.tied_embeddings, factory);
  if (!groups.ok()) return fail(groups.status());
  auto layout = comm::rank_layout_of(plan.value(), r);
  if (!layout.ok()) return fail(layout.status());
  auto trainer = runtime::Trainer::create(cfg.value(), layout.value(), groups->trainer_groups(), &data.value(), dev);
  if (!trainer.ok()) return fail(with_memory_estimate(trainer.status(), plan.value(), layout->pp_rank, r));
  if (Status s = trainer.value()->start(); !s) return fail(s);
  // Which kernel each kind of work takes here, from the predicates the kernels ask (the GPU, the
  // shape, train.kernels), so the history says what this rank ran (docs/runs.md).
  auto kernels = launch::kernel_paths_of(*dev, cfg.value());
  emit(launch::StartEvent{.world_size = topo.world_size(),
                          .dp = plan->dp,
                          .tp = plan->tp,
                          .pp = plan->pp,
                          .cp = plan->cp,
                          .step = static_cast<int64_t>(trainer.value()->step()),
                          .steps = cfg->train.steps,
                          .kernels = std::move(kernels)});
  double last_loss = 0;
  const int every = cfg->train.checkpoint_every;
  while (trainer.value()->step() < cfg->train.steps) {
    auto st = trainer.value()->train_step();
    if (!st.ok()) return fail(with_memory_estimate(st.status(), plan.value(), layout->pp_rank, r));
    last_loss = st->loss;
    // The experts' load is the world's on every rank: rank 0 reports it (step_events.h).
    emit(launch::step_event(st.value(), r == 0));
    emit(launch::timing_event(st.value(), cfg->train.steps));
    const bool last = trainer.value()->step() == cfg->train.steps;
    if (last || (every > 0 && st->step % every == 0)) {
      auto path = trainer.value()->save_checkpoint();
      if (!path.ok()) return fail(path.status());
      if (r == 0) {
        emit(launch::CheckpointEvent{.step = static_cast<int64_t>(st->step), .path = path.value()});
      }
    }
  }
  emit(launch::DoneEvent{.step = static_cast<int64_t>(trainer.value()->step()), .loss = last_loss});
  return 0;
}

// The store of a Slurm run, served from its batch step until SIGTERM (or the job's end).
int serve_store(const std::string& path) {
  const auto refuse = [](const Status& s) {
    std::fprintf(stderr, "stagecraft-worker: error: %s\n", s.message().c_str());
    return s.code() == Status::Code::kInvalidInput ? 2 : 1;
  };
  std::ifstream in(path);
  if (!in) return refuse(Status::io_error("--serve-store " + path + ": cannot read the file"));
  std::stringstream text;
  text << in.rdbuf();
  // Refused here, in the job's output, rather than by every worker.
  if (auto cfg = config::parse_config(text.str(), path, {}); !cfg.ok()) return refuse(cfg.status());
  const char* token = std::getenv("STAGECRAFT_RUN_TOKEN");
  if (!token || !*token) return refuse(Status::invalid_input("--serve-store: STAGECRAFT_RUN_TOKEN is not set (the batch script draws it)"));
  // Blocked before the store's threads start, so that they inherit the mask and sigwait gets them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  comm::RendezvousServerOptions so;
  so.host = "0.0.0.0";
  so.token = token;
  auto server = comm::RendezvousServer::start(so);
  if (!server.ok()) return refuse(server.status().with_context("--serve-store"));
  comm::RendezvousClientOptions co;
  co.host = "127.0.0.1";
  co.port = server.value()->port();
  co.token = token;
  auto client = comm::RendezvousClient::connect(co);
  if (!client.ok()) return refuse(client.status().with_context("--serve-store: connecting to its own store"));
  if (Status s = client.value()->set("config", text.str()); !s) return refuse(s);
  std::printf("%d\n", server.value()->port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  server.value()->stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--serve-store") return serve_store(argv[2]);
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("stagecraft-worker %s\n", STAGECRAFT_VERSION);  // preflight compares it with the launcher's
    return 0;
  }
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return fail(Status::unavailable("out of memory"));
  } catch (const std::exception& e) {
    return fail(Status::internal(std::string("internal error: ") + e.what()));
  }
}
