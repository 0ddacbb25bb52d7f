// RunSession: the one way a run is started, for the CLI (`stagecraft-cli run`, on this machine
// or on the hosts of a hostfile) and the desktop application (Run locally; Launch starts a
// detached `stagecraft-cli run`, which then uses a session too).
//
// A session goes through these steps, in order:
//   1. check_runnable(): can this config and plan run here (refused with a one-line message)?
//   2. RunSession::record(): the run is recorded as queued in the run history; its id is known.
//      Nothing is started and no file or thread is held, so the process may fork() now (the
//      CLI's --detach supervises from a child).
//   3. open(): in the process that supervises, the history is opened for the run (and polled
//      for a cancel request from any other process).
//   4. run(): starts every rank (local processes, or SSH channels on the hosts), supervises
//      them (supervisor.h), records each event and log line, and records the end (succeeded,
//      failed, cancelled) with the supervisor's reason. Blocks until the run ends.
// What is not here: preflight of the hosts (preflight.h; the CLI runs it before record()) and
// how progress is shown (the caller's RunCallbacks).
//
// Thread safety: record/open/run from one thread; cancel() and cancel_flag() from any thread
// (and the flag from a signal handler) once open() has returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/hostfile.h"
#include "stagecraft/launch/local_run.h"
#include "stagecraft/launch/remote_run.h"
#include "stagecraft/launch/run_history.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::launch {

// Whether `config`, planned as `plan`, can run with this build on `hosts` (empty: every rank on
// this machine). OK, or invalid_input with the first refusal, one line naming the key and the
// fix:
//   - no hosts, but cluster.nodes != 1 or cluster.hosts given ("starts every rank on this machine");
//   - hosts whose slots differ from the plan's world size (plan for the hosts: with_hosts());
// Through Slurm (`slurm` true: Slurm picks the nodes, cluster.nodes says how many):
//   - hosts, or cluster.hosts ("Slurm picks the nodes");
// With Stagecraft's own worker (launch.program empty):
//   - a launch.* key other than its default (they are about another program's run);
//   - backend cuda in a build without CUDA ("this build trains on the CPU only");
//   - backend cuda on this machine (no hosts, not Slurm) when it shows no GPU, or, with comm
//     nccl, fewer GPUs than ranks (NCCL needs a GPU per rank; comm gloo shares them);
//   - train.data missing or unreadable; a data file or model the trainer refuses
//     (runtime::Trainer::check's message: on cuda, flash attention beyond its head size too).
// With another program (launch.program, program.h), the engine's own rules do not apply (the
// program trains its own model on its own data and devices); instead:
//   - train.resume or train.checkpoint_every set (the engine's checkpoints: the program takes
//     its own through launch.args);
//   - a command line program_command() refuses (launch.args that do not split, a plan the
//     framework of launch.framework cannot run).
Status check_runnable(const config::RunConfig& config, const plan::Plan& plan, const std::vector<SelectedHost>& hosts,
                      bool slurm = false);

struct RunRequest {
  config::RunConfig config;
  plan::Plan plan;
  // Empty: every rank on this machine (local_run.h). Else the nodes in rank order (remote_run.h);
  // `remote` says how to reach them (its hosts and cancel are set by the session).
  std::vector<SelectedHost> hosts;
  RemoteRunOptions remote;
  LocalRunOptions local;  // its cancel is set by the session
  // With launch.program: the arguments after the framework's and launch.args (`run ... -- ARGS`).
  // The session prepares the program's command line and files (program.h) in the working
  // directory when the run starts, and sets local.worker / remote.command from them.
  std::vector<std::string> program_args;
  // Set: the run goes through Slurm (slurm.h) instead, with these options. Its run_dir, when
  // empty, becomes runs/NAME/slurm-run-ID under the working directory (which the nodes must
  // share); its cwd, when empty, the working directory.
  std::optional<SlurmOptions> slurm;
};

class RunSession {
 public:
  // Checks the request (check_runnable) and records it as a queued run in the history at `db`
  // (created when missing). Fails with the refusal or the history's error; nothing is recorded
  // when the check fails.
  static Result<std::unique_ptr<RunSession>> record(const std::string& db, RunRequest request);
  ~RunSession();
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  int64_t id() const { return id_; }
  const std::string& db() const { return db_; }
  const RunRequest& request() const { return request_; }
  // The names recorded as the run's hosts ("localhost" for a local run, "slurm:PARTITION"
  // through Slurm, the nodes being Slurm's choice: the history records them as the job's nodes
  // once Slurm has placed it).
  std::vector<std::string> host_names() const;

  // Opens the history for this run in the calling process, which becomes its supervisor.
  // Fails when the history cannot be opened; then run() must not be called.
  Status open();
  // Set once the run should stop: from cancel(), a cancel recorded in the history by another
  // process (`runs cancel`, the Runs view), or the caller (a signal handler may store true).
  // Valid from open() until the session is destroyed.
  std::atomic<bool>* cancel_flag();
  void cancel();

  // The directory of a Slurm run (its script, job output and rank files); empty for others.
  std::string slurm_run_dir() const;

  // Starts the ranks and supervises them until the run ends; the end is recorded before
  // returning. The callbacks (any may be empty) run on this thread, after the event or line is
  // recorded. Fails (no outcome) only when the run could not start; that too is recorded.
  // Requires open().
  Result<RunOutcome> run(RunCallbacks callbacks);
  // Records the run as failed without starting it, with `why` (not ok) as its reason, when the
  // caller cannot go on after open() (a thread refused by the system). Requires open(); run()
  // must not be called afterwards.
  Status abandon(const Status& why);
  // Whether everything reached the history (the first write error otherwise); after run().
  const Status& history_status() const { return history_status_; }

 private:
  RunSession() = default;

  std::string db_;
  RunRequest request_;
  int64_t id_ = 0;
  std::unique_ptr<RunHistory> history_;
  Status history_status_;
};

}  // namespace stagecraft::launch
