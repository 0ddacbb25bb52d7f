// RunHistory: how `stagecraft-cli run` keeps its run in the history (engine store/): the run is
// recorded as queued before anything starts, running once its supervisor exists, and ends in
// succeeded, failed or cancelled with the supervisor's reason; every event and log line of every
// rank is recorded on the way (store/run_recorder.h). Local and remote launches use it alike:
// wrap() the callbacks given to the launcher, call running() when the supervisor is ready and
// finish() with the launcher's outcome.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/launch/supervisor.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/run_recorder.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::cli {

// The history file for a command: --db's value when given, else RunStore::default_path().
std::string history_path(const std::string* db_option);

// Records a new queued run for `config` and `plan`, supervised by this process; returns its id.
// The history is closed again on return (safe to fork() afterwards).
Result<int64_t> record_new_run(const std::string& db, const config::RunConfig& config, const plan::Plan& plan,
                               const std::vector<std::string>& hosts);

// `run --detach`: forks; the child leaves the session (setsid), puts its stdin, stdout and
// stderr on /dev/null and returns -1 to go on supervising run `id`. The parent records the child
// as the run's supervisor and returns the exit status it should end with (0, or 1 when the fork
// failed, with the run recorded failed).
int detach_supervisor(const std::string& db, int64_t id);

class RunHistory {
 public:
  // Opens the history for run `id` (in the process that supervises it) and records this
  // process as its supervisor.
  static Result<std::unique_ptr<RunHistory>> open(const std::string& db, int64_t id);
  ~RunHistory();

  int64_t id() const { return id_; }
  // Callbacks that record each event and log line, then call `inner`'s.
  launch::RunCallbacks wrap(launch::RunCallbacks inner);
  // queued -> running. Safe to call more than once.
  void running();
  // The final state from the launcher's result; flushes every recorded row first.
  Status finish(const Result<launch::RunOutcome>& outcome);

 private:
  RunHistory() = default;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<store::RunRecorder> recorder_;
  int64_t id_ = 0;
  bool running_ = false;
};

}  // namespace stagecraft::cli
