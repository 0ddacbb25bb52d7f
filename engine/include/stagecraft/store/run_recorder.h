// RunRecorder: writes a live run's events and log lines into the run history as they arrive.
//
// The supervisor's callbacks (launch/supervisor.h) call on_event() and on_log(); they only append
// to memory, so the supervisor does not wait on the disk — unless the disk falls so far behind that
// max_pending_rows wait, when they block until the writer has taken them: memory stays bounded
// and a crash can lose no more than that. A writer thread commits what has
// gathered in one transaction every `flush_interval_s`, or as soon as `flush_rows` rows wait,
// and finish() writes the rest. A crash therefore loses at most the batch not yet committed,
// never a row already written. A step event is kept twice: as a metrics row (step, loss, lr,
// grad_norm, tokens_per_s, step_ms, mem_bytes) and, like every event, as its JSON line
// (launch::encode_event, without the newline).
//
// A write that fails is kept as the recorder's status (first error wins; later batches are
// dropped, counted in stats()), reported by finish(): a full disk must not stop a training run.
//
// Thread safety: on_event(), on_log(), flush() and stats() may be called from any thread.
// The RunStore must outlive the recorder.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "stagecraft/core/status.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::store {

struct RecorderOptions {
  double flush_interval_s = 0.1;     // longest a row waits in memory
  size_t flush_rows = 4096;          // a batch this large is written at once
  size_t max_pending_rows = 1 << 18;  // while this many wait for a slow disk, producers wait too
};

struct RecorderStats {
  uint64_t events = 0, metrics = 0, logs = 0;  // rows committed
  uint64_t batches = 0;                        // transactions committed
  uint64_t max_batch_rows = 0;
  uint64_t dropped_rows = 0;                   // rows not written after a write error
};

// The metrics row of a step event; false (and `out` untouched) for any other kind.
bool metric_from_event(int rank, const launch::WorkerEvent& event, double time, MetricRow& out);

class RunRecorder {
 public:
  RunRecorder(RunStore& store, int64_t run_id, RecorderOptions options = {});
  ~RunRecorder();  // finish()es
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  void on_event(int rank, const launch::WorkerEvent& event);
  void on_log(int rank, bool is_stderr, const std::string& line);

  // Writes everything gathered so far before returning.
  Status flush();
  // Stops the writer thread after a last flush; returns the first write error, if any.
  // Calls after the first return the same status.
  Status finish();
  RecorderStats stats() const;

 private:
  void writer_loop();
  Status write_pending();
  void wait_for_room(std::unique_lock<std::mutex>& lock);  // mu_ held

  RunStore& store_;
  int64_t run_id_;
  RecorderOptions options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable drained_;  // the writer took the pending rows
  std::mutex write_mu_;  // one batch written at a time, in order
  Batch pending_;
  Status status_;
  RecorderStats stats_;
  bool stop_ = false;
  bool finished_ = false;
  std::thread writer_;
};

}  // namespace stagecraft::store
