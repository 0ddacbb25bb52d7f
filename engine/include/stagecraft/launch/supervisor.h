// Supervisor: watches every rank of a run until it ends, and ends it when one rank fails.
//
// Policy (docs/ARCHITECTURE.md §8): the first rank that exits non-zero (or is killed) fails the run
// (of exits seen in the same poll, the earliest by RankProcess::exit_time()); every
// other rank is asked to stop (SIGTERM) and, after a grace period, killed (SIGKILL) — no orphan,
// no hang. A run with no event from any rank for its hang timeout fails the same way, and so
// does cancel(). Output is split into lines: a stdout line that decodes as a worker event
// (worker_events.h) is an event, anything else (including a malformed or unknown event) a log
// line.
//
// Foreign mode (SuperviseOptions::foreign: another program's ranks, program.h): no line is read
// as a worker event; every line, on either stream, is a log line, and the lines `metrics` reads
// (metric_lines.h) are also step events of their rank; any output counts as progress for the
// hang timeout, as any event does.
//
// run() blocks the calling thread; cancel() may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/worker_events.h"

namespace stagecraft::launch {

struct SuperviseOptions {
  double hang_timeout_s = 300.0;  // no event from any rank for this long fails the run
  double grace_s = 5.0;           // between SIGTERM and SIGKILL
  double reap_wait_s = 10.0;      // after SIGKILL, how long a rank may take to be reaped
  size_t max_line_bytes = 1 << 20;  // longer lines are cut (and marked) rather than buffered
  // When set, the run is cancelled (as by cancel()) once *cancel_flag becomes true; read at
  // least every 50 ms. The flag outlives the run, so a signal handler or another thread may set
  // it at any time, before the supervisor exists or after it is gone.
  const std::atomic<bool>* cancel_flag = nullptr;
  // Another program's ranks (see above): how its lines become step events.
  bool foreign = false;
  config::MetricsFormat metrics = config::MetricsFormat::kAuto;
  double tokens_per_sample = 0;  // samples/s to tokens/s (model.seq_len); 0: not converted
};

struct RunCallbacks {
  std::function<void(int rank, const WorkerEvent& event)> on_event;
  std::function<void(int rank, bool is_stderr, const std::string& line)> on_log;
  std::function<void(int rank, const ExitInfo& exit)> on_exit;
  // A run through a scheduler (slurm.h): the job's id, state and reason when it is submitted and
  // at every change (the supervisor itself never calls it).
  std::function<void(const std::string& job_id, const std::string& state, const std::string& reason)> on_job;
};

struct RunOutcome {
  enum class State { kSucceeded, kFailed, kHung, kCancelled };
  State state = State::kSucceeded;
  int failed_rank = -1;        // the first rank that failed, when one did
  std::string reason;          // one line: "rank 3 exited with status 1: <its last error>"
  std::vector<ExitInfo> exits; // by position in the process list

  bool ok() const { return state == State::kSucceeded; }
};

std::string_view to_string(RunOutcome::State s);  // "succeeded" "failed" "hung" "cancelled"

class Supervisor {
 public:
  Supervisor(std::vector<std::unique_ptr<RankProcess>> ranks, SuperviseOptions options, RunCallbacks callbacks);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  RunOutcome run();
  void cancel();

 private:
  struct Rank;
  void handle_output(Rank& r, std::string& buffer, bool is_stderr, bool flush);
  void stop_all(double grace_s);

  std::vector<std::unique_ptr<Rank>> ranks_;
  SuperviseOptions options_;
  RunCallbacks callbacks_;
  std::atomic<bool> cancel_{false};
  int wake_[2] = {-1, -1};  // self-pipe: cancel() wakes the poll
  double last_event_ = 0;
};

// Supervises `ranks` until the run ends, handing the Supervisor to `ready` (optional) before it
// starts. The reference is valid only during that call and the run: the supervisor is destroyed
// before supervise() returns, so a caller that cancels from elsewhere uses options.cancel_flag.
// What local and remote runs share once their ranks are started.
RunOutcome supervise(std::vector<std::unique_ptr<RankProcess>> ranks, SuperviseOptions options, RunCallbacks callbacks,
                     const std::function<void(Supervisor&)>& ready);

}  // namespace stagecraft::launch
