// The store and supervision every launch shares. See run_common.h.
#include "run_common.h"

#include <chrono>

#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/worker_env.h"

namespace stagecraft::launch {

Result<Rendezvous> serve_rendezvous(const std::string& host, int port, const config::RunConfig& config, const std::string& what) {
  comm::RendezvousServerOptions so;
  so.host = host;
  so.port = port;
  so.token = random_token(16);
  auto server = comm::RendezvousServer::start(so);
  if (!server.ok()) return server.status().with_context(what + ": starting the rendezvous store on " + host);
  comm::RendezvousClientOptions co;
  co.host = host;
  co.port = server.value()->port();
  co.token = so.token;
  co.connect_timeout = std::chrono::milliseconds(5000);  // our own store, just started
  auto client = comm::RendezvousClient::connect(co);
  if (!client.ok()) return client.status().with_context(what + ": connecting to its own store");
  if (Status s = client.value()->set("config", config::to_yaml(config)); !s) return s;
  return Rendezvous{std::move(server).value(), so.token};
}

RunOutcome supervise_run(std::vector<std::unique_ptr<RankProcess>> ranks, const config::RunConfig& config, double grace_s,
                         const std::atomic<bool>* cancel, RunCallbacks callbacks,
                         const std::function<void(Supervisor&)>& supervisor_ready, Rendezvous& rendezvous) {
  SuperviseOptions sup;
  sup.hang_timeout_s = config.train.hang_timeout_s;
  sup.grace_s = grace_s;
  sup.cancel_flag = cancel;
  RunOutcome outcome = supervise(std::move(ranks), sup, std::move(callbacks), supervisor_ready);
  rendezvous.server->stop();
  return outcome;
}

}  // namespace stagecraft::launch
