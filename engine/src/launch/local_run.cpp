// Local runs. See local_run.h.
#include "stagecraft/launch/local_run.h"

#include <cstdlib>
#include <filesystem>
#include <optional>

#include <unistd.h>

#include "run_common.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/worker_env.h"

namespace stagecraft::launch {

std::string default_worker_path() {
  if (const char* w = std::getenv("STAGECRAFT_WORKER"); w && *w) return w;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "stagecraft-worker";
  return (self.parent_path() / "stagecraft-worker").string();
}

Result<RunOutcome> run_local(const config::RunConfig& config, const plan::Plan& plan, const LocalRunOptions& options,
                             RunCallbacks callbacks, const std::function<void(Supervisor&)>& supervisor_ready) {
  const int world = plan.topology.world_size();
  const bool foreign = config.launch.foreign();
  // Stagecraft's workers meet at the run's store; another program meets at its own MASTER_PORT
  // (rank 0 serves it, as under torchrun).
  std::optional<Rendezvous> rendezvous;
  int master_port = 0;
  if (foreign) {
    if (options.worker.empty()) return Status::internal("run_local: launch.program is set but no command was prepared (program.h)");
    master_port = free_local_port("127.0.0.1");
    if (master_port == 0) return Status::unavailable("run: no free TCP port on 127.0.0.1 for the program's MASTER_PORT");
  } else {
    auto served = serve_rendezvous("127.0.0.1", 0, config, "run");
    if (!served.ok()) return served.status();
    rendezvous = std::move(served).value();
    master_port = rendezvous->port();
  }

  std::vector<std::string> argv = options.worker;
  if (argv.empty()) argv.push_back(default_worker_path());
  const std::string run_id = random_token(8);
  std::vector<std::unique_ptr<RankProcess>> ranks;
  for (int r = 0; r < world; ++r) {
    WorkerEnv e;
    e.rank = r;
    e.world_size = world;
    e.local_rank = r;
    e.local_world_size = world;
    e.group_rank = 0;
    e.master_addr = "127.0.0.1";
    e.master_port = master_port;
    e.run_id = run_id;
    if (rendezvous) e.token = rendezvous->token;
    e.threads = threads_per_rank(world);
    ProcessSpec spec;
    spec.rank = r;
    spec.argv = argv;
    spec.env = to_environment(e);
    if (foreign) spec.env["PYTHONUNBUFFERED"] = "1";  // lines as they are printed, for metrics and the hang timer
    auto p = LocalProcess::start(spec);
    if (!p.ok()) return p.status();  // the started ones are killed by their destructors
    ranks.push_back(std::move(p).value());
  }
  return supervise_run(std::move(ranks), config, options.grace_s, options.cancel, std::move(callbacks), supervisor_ready,
                       rendezvous ? &*rendezvous : nullptr);
}

}  // namespace stagecraft::launch
