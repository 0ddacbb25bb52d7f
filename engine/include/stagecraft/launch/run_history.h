// RunHistory: how a launched run keeps its record in the run history (store/): the run is
// recorded as queued before anything starts, running once its supervisor exists, and ends in
// succeeded, failed or cancelled with the supervisor's reason; every event and log line of every
// rank is recorded on the way (store/run_recorder.h). RunSession (run_session.h) drives it for
// every launch: record_new_run(), then in the supervising process open(), wrap() the callbacks
// given to the launcher, running() when the supervisor is ready and finish() with the
// launcher's result. Programs start runs through RunSession, not through this directly.
//
// Not thread-safe, except that the wrapped callbacks may run on the supervisor's thread while
// the history is otherwise left alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/slurm.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/run_recorder.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::launch {

// Records a new queued run for `config` and `plan` in the history at `db` (created when
// missing), supervised by this process; returns its id. The history is closed again on return
// (safe to fork() afterwards).
Result<int64_t> record_new_run(const std::string& db, const config::RunConfig& config, const plan::Plan& plan,
                               const std::vector<std::string>& hosts);

class RunHistory {
 public:
  // Opens the history for run `id` (in the process that supervises it) and records this
  // process as its supervisor.
  static Result<std::unique_ptr<RunHistory>> open(const std::string& db, int64_t id);
  ~RunHistory();

  int64_t id() const { return id_; }
  // True once the run should stop: a cancel recorded in the history (RunStore::request_cancel,
  // from any process; polled every 200 ms) or set here by the supervising process itself (Ctrl-C,
  // a Cancel button). Pass it as the launcher's `cancel` option.
  std::atomic<bool>* cancel_flag() { return &cancel_; }
  // Callbacks that record each event and log line, then call `inner`'s.
  RunCallbacks wrap(RunCallbacks inner);
  // queued -> running. Safe to call more than once; finish() records the run's end even when
  // this transition could not be written.
  // `reason` is the transition's ("supervisor started"; a Slurm run: "Slurm job 12 RUNNING").
  void running(const std::string& reason = "supervisor started");
  // A run through a scheduler (slurm.h): records its job id, state and reason. The run stays
  // queued until running() is called (when the job's tasks are supervised), and finish() does not
  // mark it running for a job that never left the queue.
  void job(const SlurmJobState& job);
  // Writes every event and log line recorded so far; the first write error, if any (the run
  // itself goes on: finish() records its end either way).
  Status flush();
  // The final state from the launcher's result; flushes every recorded row first.
  Status finish(const Result<RunOutcome>& outcome);

 private:
  RunHistory() = default;
  void watch_for_cancel();

  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<store::RunRecorder> recorder_;
  int64_t id_ = 0;
  bool running_ = false;
  bool scheduled_ = false;  // job() was called: running only once the job runs
  std::atomic<bool> cancel_{false};
  std::mutex watch_mu_;
  std::condition_variable watch_wake_;
  bool watch_stop_ = false;
  std::thread watcher_;  // polls the history for a cancel request until finish()
};

}  // namespace stagecraft::launch
