// BackgroundLane: one thread that runs a communicator's background calls (all_reduce_async,
// communicator.h) one after another, in the order they were posted, while the caller goes on.
//
// post() queues a call and returns at once (or fails, where no thread can be started); wait() blocks until every call posted so far has run
// and returns the first failure among them (later calls still run: the communicator itself
// refuses them once broken, so they fail fast). The thread starts at the first post() and ends
// in stop() or the destructor, after the queue is empty: a communicator calls stop() first
// thing in its destructor, so no call runs on a half-destroyed communicator.
//
// Thread-safe for one caller thread plus the lane's own.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "stagecraft/core/status.h"

namespace stagecraft::comm {

class BackgroundLane {
 public:
  BackgroundLane() = default;
  BackgroundLane(const BackgroundLane&) = delete;
  BackgroundLane& operator=(const BackgroundLane&) = delete;
  ~BackgroundLane() { stop(); }

  // Queues `call`. Fails, queuing nothing, where the lane's thread cannot be started (the
  // process's thread or memory limits): a later wait() then has nothing to wait for.
  Status post(std::function<Status()> call) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!thread_.joinable()) {
      stopping_ = false;
      try {
        thread_ = std::thread([this] { loop(); });
      } catch (const std::system_error& e) {
        return Status::unavailable(std::string("cannot start the background thread for it: ") + e.what() +
                                   " (the process's thread or memory limit; see ulimit -u and -v)");
      }
    }
    queue_.push_back(std::move(call));
    cv_.notify_all();
    return Status::OK();
  }

  // Every call posted so far has run; the first failure since the last wait(), or OK.
  Status wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return queue_.empty() && !running_; });
    Status s = std::move(first_failure_);
    first_failure_ = Status::OK();
    return s;
  }

  // Runs what is queued, then ends the thread.
  void stop() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!thread_.joinable()) return;
      stopping_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<Status()> call = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      lock.unlock();
      Status s = call();
      lock.lock();
      running_ = false;
      if (!s && first_failure_.ok()) first_failure_ = std::move(s);
      if (queue_.empty()) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<Status()>> queue_;
  bool running_ = false, stopping_ = false;
  Status first_failure_;
  std::thread thread_;
};

}  // namespace stagecraft::comm
