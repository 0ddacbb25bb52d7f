// A launched run's record in the history. See run_history.h.
#include "stagecraft/launch/run_history.h"

#include <chrono>

#include "stagecraft/config/config_io.h"

namespace stagecraft::launch {

Result<int64_t> record_new_run(const std::string& db, const config::RunConfig& config, const plan::Plan& plan,
                               const std::vector<std::string>& hosts) {
  auto st = store::RunStore::open(db);
  if (!st.ok()) return st.status();
  store::NewRun run;
  run.name = config.name;
  run.config_yaml = config::to_yaml(config);
  run.plan_json = plan::plan_to_json(plan).dump();
  run.hosts = hosts;
  run.world_size = plan.topology.world_size();
  run.total_steps = config.train.steps;
  run.supervisor = store::this_process_identity();
  return st.value()->create_run(run);
}

Result<std::unique_ptr<RunHistory>> RunHistory::open(const std::string& db, int64_t id) {
  store::StoreOptions o;
  o.create = false;
  o.detect_lost = false;  // right after a fork the recorded supervisor may still be the parent
  auto st = store::RunStore::open(db, o);
  if (!st.ok()) return st.status();
  if (Status s = st.value()->set_supervisor(id, store::this_process_identity()); !s) return s;
  std::unique_ptr<RunHistory> h(new RunHistory());
  h->store_ = std::move(st).value();
  h->id_ = id;
  h->recorder_ = std::make_unique<store::RunRecorder>(*h->store_, id);
  h->watcher_ = std::thread([raw = h.get()] { raw->watch_for_cancel(); });
  return h;
}

RunHistory::~RunHistory() {
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (recorder_) (void)recorder_->finish();
}

void RunHistory::watch_for_cancel() {
  std::unique_lock lock(watch_mu_);
  while (!watch_stop_) {
    watch_wake_.wait_for(lock, std::chrono::milliseconds(200));
    if (watch_stop_ || cancel_.load()) continue;
    lock.unlock();
    auto asked = store_->cancel_requested(id_);  // a read error is retried at the next poll
    if (asked.ok() && asked.value()) cancel_.store(true);
    lock.lock();
  }
}

RunCallbacks RunHistory::wrap(RunCallbacks inner) {
  RunCallbacks cb;
  store::RunRecorder* rec = recorder_.get();
  auto on_event = inner.on_event;
  auto on_log = inner.on_log;
  cb.on_event = [rec, on_event](int rank, const WorkerEvent& e) {
    rec->on_event(rank, e);
    if (on_event) on_event(rank, e);
  };
  cb.on_log = [rec, on_log](int rank, bool is_stderr, const std::string& line) {
    rec->on_log(rank, is_stderr, line);
    if (on_log) on_log(rank, is_stderr, line);
  };
  cb.on_exit = inner.on_exit;
  cb.on_job = inner.on_job;
  return cb;
}

void RunHistory::running(const std::string& reason) {
  if (running_) return;
  running_ = store_->transition(id_, store::RunState::kRunning, reason).ok();
}

void RunHistory::job(const SlurmJobState& job) {
  scheduled_ = true;
  (void)store_->set_job(id_, job.job_id, job.state, job.reason, job.nodes);  // a busy history: the next change writes it
}

Status RunHistory::flush() { return recorder_->flush(); }

Status RunHistory::finish(const Result<RunOutcome>& outcome) {
  {
    std::lock_guard lock(watch_mu_);
    watch_stop_ = true;
  }
  watch_wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  Status recorded = recorder_->finish();
  store::RunState to = store::RunState::kFailed;
  std::string reason;
  if (!outcome.ok()) {
    reason = "could not start: " + outcome.status().message();
  } else {
    switch (outcome->state) {
      case RunOutcome::State::kSucceeded:
        to = store::RunState::kSucceeded;
        reason = "every rank finished";
        break;
      case RunOutcome::State::kCancelled:
        to = store::RunState::kCancelled;
        reason = "cancelled on request; every rank was stopped";
        // A launcher that says more (a Slurm run: "cancelled; Slurm job 12 CANCELLED by 0") is kept.
        if (const std::string& more = outcome->reason; !more.empty() && more != "cancelled") {
          reason = "cancelled on request; " + more.substr(more.rfind("cancelled; ", 0) == 0 ? 11 : 0);
        }
        break;
      case RunOutcome::State::kHung:
      case RunOutcome::State::kFailed:
        reason = outcome->reason;
        break;
    }
  }
  // A run that started but whose queued -> running could not be written (a busy history) still
  // ends in the state it reached: the end is not refused for want of the start.
  if (!running_ && outcome.ok() && !scheduled_) running();
  if (Status s = store_->transition(id_, to, reason); !s) return s;
  return recorded;
}

}  // namespace stagecraft::launch
