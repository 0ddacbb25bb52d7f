// ThreadComm: CommGroup for ranks that are threads of one test process — collectives through
// shared buffers and barriers, point-to-point through tagged mailboxes. Sums run in rank order,
// so results are deterministic. For tests of the training loop without sockets.
#pragma once

#include <barrier>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "stagecraft/runtime/comm_group.h"

namespace stagecraft::testing {

class ThreadHub {
 public:
  explicit ThreadHub(int n) : n_(n), barrier_(n), slots_(static_cast<size_t>(n)), slots_d_(static_cast<size_t>(n)) {}
  int size() const { return n_; }

  template <typename T>
  void deposit(int rank, const T* data, size_t count) {
    auto& s = slot<T>(rank);
    s.assign(data, data + count);
    barrier_.arrive_and_wait();
  }
  void done() { barrier_.arrive_and_wait(); }
  template <typename T>
  const std::vector<T>& slot(int rank) const {
    if constexpr (std::is_same_v<T, float>) {
      return slots_[static_cast<size_t>(rank)];
    } else {
      return slots_d_[static_cast<size_t>(rank)];
    }
  }
  template <typename T>
  std::vector<T>& slot(int rank) {
    if constexpr (std::is_same_v<T, float>) {
      return slots_[static_cast<size_t>(rank)];
    } else {
      return slots_d_[static_cast<size_t>(rank)];
    }
  }

  void post(int src, int dst, uint32_t tag, const float* data, size_t count) {
    std::lock_guard<std::mutex> lock(mu_);
    mail_[{src, dst, tag}].emplace_back(data, data + count);
    cv_.notify_all();
  }
  void take(int src, int dst, uint32_t tag, float* data, size_t count) {
    std::unique_lock<std::mutex> lock(mu_);
    auto key = std::make_tuple(src, dst, tag);
    cv_.wait(lock, [&] { return !mail_[key].empty(); });
    auto msg = std::move(mail_[key].front());
    mail_[key].pop_front();
    std::copy(msg.begin(), msg.begin() + static_cast<ptrdiff_t>(std::min(count, msg.size())), data);
  }

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<std::vector<float>> slots_;
  std::vector<std::vector<double>> slots_d_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, uint32_t>, std::deque<std::vector<float>>> mail_;
};

class ThreadComm final : public runtime::CommGroup {
 public:
  ThreadComm(std::shared_ptr<ThreadHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  int size() const override { return hub_->size(); }
  int rank() const override { return rank_; }

  Status all_reduce_sum(float* data, size_t count) override { return reduce(data, count); }
  Status all_reduce_sum(double* data, size_t count) override { return reduce(data, count); }
  Status reduce_scatter_sum(const float* in, float* out, size_t count) override {
    hub_->deposit(rank_, in, count * static_cast<size_t>(size()));
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < size(); ++r) s += hub_->slot<float>(r)[static_cast<size_t>(rank_) * count + i];
      out[i] = static_cast<float>(s);
    }
    hub_->done();
    return Status::OK();
  }
  Status all_gather(const float* in, float* out, size_t count) override {
    hub_->deposit(rank_, in, count);
    for (int r = 0; r < size(); ++r) std::copy(hub_->slot<float>(r).begin(), hub_->slot<float>(r).end(), out + static_cast<size_t>(r) * count);
    hub_->done();
    return Status::OK();
  }
  Status send(const float* data, size_t count, int peer, uint32_t tag) override {
    hub_->post(rank_, peer, tag, data, count);
    return Status::OK();
  }
  Status recv(float* data, size_t count, int peer, uint32_t tag) override {
    hub_->take(peer, rank_, tag, data, count);
    return Status::OK();
  }
  Status wait_sends() override { return Status::OK(); }

 private:
  template <typename T>
  Status reduce(T* data, size_t count) {
    if (size() == 1) return Status::OK();
    hub_->deposit(rank_, data, count);
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < size(); ++r) s += hub_->slot<T>(r)[i];
      data[i] = static_cast<T>(s);
    }
    hub_->done();
    return Status::OK();
  }
  std::shared_ptr<ThreadHub> hub_;
  int rank_;
};

}  // namespace stagecraft::testing
