// Local runs. See local_run.h.
#include "stagecraft/launch/local_run.h"

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "stagecraft/comm/store.h"
#include "stagecraft/config/config_io.h"
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
  comm::StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.token = random_token(16);
  auto server = comm::StoreServer::start(so);
  if (!server.ok()) return server.status().with_context("run: starting the rendezvous store");
  comm::StoreClientOptions co;
  co.host = "127.0.0.1";
  co.port = server.value()->port();
  co.token = so.token;
  auto client = comm::StoreClient::connect(co);
  if (!client.ok()) return client.status().with_context("run: connecting to its own store");
  if (Status s = client.value()->set("config", config::to_yaml(config)); !s) return s;

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
    e.master_port = server.value()->port();
    e.run_id = run_id;
    e.token = so.token;
    e.threads = threads_per_rank(world);
    ProcessSpec spec;
    spec.rank = r;
    spec.argv = argv;
    spec.env = to_environment(e);
    auto p = LocalProcess::start(spec);
    if (!p.ok()) return p.status();  // the started ones are killed by their destructors
    ranks.push_back(std::move(p).value());
  }
  SuperviseOptions sup;
  sup.hang_timeout_s = config.train.hang_timeout_s;
  sup.grace_s = options.grace_s;
  sup.cancel_flag = options.cancel;
  RunOutcome outcome = supervise(std::move(ranks), sup, std::move(callbacks), supervisor_ready);
  server.value()->stop();
  return outcome;
}

}  // namespace stagecraft::launch
