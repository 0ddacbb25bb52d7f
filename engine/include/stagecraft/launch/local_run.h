// Local runs: every rank of a plan as a process on this machine (for backend cpu a "GPU" slot is
// a process), with the run's rendezvous store served here, supervised until the run ends.
//
// run_local() serves the store on 127.0.0.1 (port chosen by the system) with a fresh random
// token, publishes the configuration under "config", starts world_size workers with the
// torchrun-style environment (worker_env.h), and supervises them (supervisor.h): the first rank
// that fails ends the run and names itself and its reason. Remote nodes slot in as other
// RankProcess kinds under the same supervisor.
//
// With launch.program (another program, program.h) no store is served: `options.worker` holds
// the program's prepared command line (RunSession sets it), MASTER_PORT is a free port on
// 127.0.0.1 for the program's own rendezvous, PYTHONUNBUFFERED=1 is added, and the supervisor
// runs in foreign mode (supervisor.h): output is progress, metric lines are step events.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::launch {

struct LocalRunOptions {
  std::vector<std::string> worker;  // program and arguments; empty = stagecraft-worker beside this executable;
                                    // with launch.program, its command line (required)
  double grace_s = 5.0;             // SIGTERM to SIGKILL
  const std::atomic<bool>* cancel = nullptr;  // set to true (any thread, a signal handler): cancel
};

// The run's outcome. Fails only when the run could not start (store, processes); a run that
// started and failed is an outcome with state kFailed, kHung or kCancelled.
// `supervisor_ready` (optional) is called with the supervisor once it exists; the reference dies
// before run_local returns: to cancel from another thread or a signal handler, use options.cancel.
Result<RunOutcome> run_local(const config::RunConfig& config, const plan::Plan& plan, const LocalRunOptions& options,
                             RunCallbacks callbacks, const std::function<void(Supervisor&)>& supervisor_ready = nullptr);

// stagecraft-worker beside the running executable (or $STAGECRAFT_WORKER when set).
std::string default_worker_path();

}  // namespace stagecraft::launch
