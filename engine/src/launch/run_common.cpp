// The store and supervision every launch shares. See run_common.h.
#include "run_common.h"

#include <chrono>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

const char* const kFreePortProbe = R"SH(i=0
while [ $i -lt 50 ]; do
  p=$(( $(od -An -N2 -tu2 /dev/urandom) % 40000 + 20000 ))
  h=$(printf ':%04X ' "$p")
  if ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q -- "$h"; then echo "port=$p"; exit 0; fi
  i=$((i + 1))
done
exit 1)SH";

SuperviseOptions supervise_options(const config::RunConfig& config, double grace_s, const std::atomic<bool>* cancel) {
  SuperviseOptions sup;
  sup.hang_timeout_s = config.train.hang_timeout_s;
  sup.grace_s = grace_s;
  sup.cancel_flag = cancel;
  sup.foreign = config.launch.foreign();
  sup.metrics = config.launch.metrics;
  sup.tokens_per_sample = config.model.seq_len;
  return sup;
}

RunOutcome supervise_run(std::vector<std::unique_ptr<RankProcess>> ranks, const config::RunConfig& config, double grace_s,
                         const std::atomic<bool>* cancel, RunCallbacks callbacks,
                         const std::function<void(Supervisor&)>& supervisor_ready, Rendezvous* rendezvous) {
  RunOutcome outcome = supervise(std::move(ranks), supervise_options(config, grace_s, cancel), std::move(callbacks), supervisor_ready);
  if (rendezvous) rendezvous->server->stop();
  return outcome;
}

int free_local_port(const std::string& host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace stagecraft::launch
