// Batched recording of a live run. See run_recorder.h.
#include "stagecraft/store/run_recorder.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "stagecraft/core/clock.h"

namespace stagecraft::store {

bool metric_from_event(int rank, const launch::WorkerEvent& event, double time, MetricRow& out) {
  const auto* step = std::get_if<launch::StepEvent>(&event);
  if (!step) return false;
  out = MetricRow{};
  out.rank = rank;
  out.step = step->step;
  out.loss = step->loss;
  out.lr = step->lr;
  out.grad_norm = step->grad_norm;
  out.tokens_per_s = step->tokens_per_s;
  out.step_ms = step->step_ms;
  out.mem_bytes = step->mem_bytes;
  out.tflops = step->tflops;
  out.mfu = step->mfu;
  out.time = time;
  return true;
}

RunRecorder::RunRecorder(RunStore& store, int64_t run_id, RecorderOptions options)
    : store_(store), run_id_(run_id), options_(options) {
  writer_ = std::thread([this] { writer_loop(); });
}

RunRecorder::~RunRecorder() { (void)finish(); }

void RunRecorder::on_event(int rank, const launch::WorkerEvent& event) {
  const double t = unix_seconds();
  EventRow row;
  row.rank = rank;
  row.time = t;
  row.kind = launch::event_name(event);
  row.json = launch::encode_event(event);
  row.json.pop_back();  // the line's newline
  MetricRow m;
  const bool is_metric = metric_from_event(rank, event, t, m);
  std::unique_lock lock(mu_);
  wait_for_room(lock);
  pending_.events.push_back(std::move(row));
  if (is_metric) pending_.metrics.push_back(m);
  if (pending_.rows() >= options_.flush_rows) wake_.notify_one();
}

void RunRecorder::on_log(int rank, bool is_stderr, const std::string& line) {
  LogRow row{rank, is_stderr, unix_seconds(), line};
  std::unique_lock lock(mu_);
  wait_for_room(lock);
  pending_.logs.push_back(std::move(row));
  if (pending_.rows() >= options_.flush_rows) wake_.notify_one();
}

void RunRecorder::wait_for_room(std::unique_lock<std::mutex>& lock) {
  if (pending_.rows() < options_.max_pending_rows) return;
  wake_.notify_one();
  drained_.wait(lock, [&] { return stop_ || pending_.rows() < options_.max_pending_rows; });
}

// Takes the pending rows and writes them without holding mu_, so producers keep appending.
// Lock order: write_mu_, then mu_.
Status RunRecorder::write_pending() {
  std::lock_guard write_lock(write_mu_);
  std::unique_lock lock(mu_);
  Batch batch;
  std::swap(batch, pending_);
  drained_.notify_all();
  if (batch.empty()) return status_;
  if (!status_) {
    stats_.dropped_rows += batch.rows();
    return status_;
  }
  lock.unlock();
  Status s = store_.append(run_id_, batch);
  lock.lock();
  if (!s) {
    status_ = s.with_context("recording run " + std::to_string(run_id_));
    stats_.dropped_rows += batch.rows();
    return status_;
  }
  stats_.events += batch.events.size();
  stats_.metrics += batch.metrics.size();
  stats_.logs += batch.logs.size();
  stats_.batches += 1;
  stats_.max_batch_rows = std::max<uint64_t>(stats_.max_batch_rows, batch.rows());
  return status_;
}

void RunRecorder::writer_loop() {
  const auto interval = std::chrono::duration<double>(options_.flush_interval_s);
  while (true) {
    {
      std::unique_lock lock(mu_);
      const size_t due = std::min(options_.flush_rows, options_.max_pending_rows);
      wake_.wait_for(lock, interval, [&] { return stop_ || pending_.rows() >= due; });
      if (stop_) return;
    }
    (void)write_pending();
  }
}

Status RunRecorder::flush() { return write_pending(); }

Status RunRecorder::finish() {
  {
    std::lock_guard lock(mu_);
    if (finished_) return status_;
    stop_ = true;
  }
  wake_.notify_one();
  drained_.notify_all();
  if (writer_.joinable()) writer_.join();
  Status s = write_pending();
  std::lock_guard lock(mu_);
  finished_ = true;
  return s;
}

RecorderStats RunRecorder::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace stagecraft::store
