// What local and remote launches share around their ranks: the run's rendezvous store, served
// with a fresh token and holding the run's config (every worker reads it under "config"), and
// supervising the started ranks until the run ends; a free port for another program's
// MASTER_PORT. Private to launch/.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/supervisor.h"

namespace stagecraft::launch {

struct Rendezvous {
  std::unique_ptr<comm::RendezvousServer> server;
  std::string token;  // the run's token: workers get it as STAGECRAFT_RUN_TOKEN
  int port() const { return server->port(); }
};

// Serves the store on host:port (0: any port) and publishes `config` through it. Errors say
// `what` ("run", "remote run") and where it failed.
Result<Rendezvous> serve_rendezvous(const std::string& host, int port, const config::RunConfig& config, const std::string& what);

// The supervision options of a run: the run's hang timeout, `grace_s` and `cancel`, and, when
// config.launch names another program, foreign mode with the run's metrics format (its output's
// lines become step events) and the tokens of a sample. Local, SSH and Slurm runs all use it.
SuperviseOptions supervise_options(const config::RunConfig& config, double grace_s, const std::atomic<bool>* cancel);

// A sh program that prints `port=N` for a TCP port in 20000-59999 no socket on its machine uses
// now (checked against /proc/net/tcp and tcp6), or exits 1; for another program's MASTER_PORT on
// a remote node or a Slurm job's first node.
extern const char* const kFreePortProbe;

// Supervises `ranks` with the run's hang timeout, `grace_s` and `cancel` (launch options), in
// foreign mode with the run's metrics format when config.launch names another program, then
// stops the store (none for another program's run).
RunOutcome supervise_run(std::vector<std::unique_ptr<RankProcess>> ranks, const config::RunConfig& config, double grace_s,
                         const std::atomic<bool>* cancel, RunCallbacks callbacks,
                         const std::function<void(Supervisor&)>& supervisor_ready, Rendezvous* rendezvous);

// A TCP port nobody listens on at `host` now (a local address), for another program's
// MASTER_PORT; 0 when none could be had.
int free_local_port(const std::string& host);

}  // namespace stagecraft::launch
