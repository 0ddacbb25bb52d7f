// ThreadComm: a comm::Communicator for ranks that are threads of one test process — collectives
// through shared buffers and barriers, point-to-point through tagged mailboxes. Sums run in rank
// order in double, so results are deterministic. ThreadHubs hands out one hub per group, and
// thread_communicator_factory() plugs them into comm::build_process_groups, so tests build
// their groups exactly as the worker does, without sockets.
//
// With a ThreadMemory that names a MemoryMap (off_host_device.h), a ThreadComm also checks the
// memory of every buffer it is given: a device-memory group (as NCCL) refuses a pointer outside
// the test devices' allocations, a host-memory group (as Gloo) one inside them; and a
// device-memory group matches the messages between two ranks by order, as NCCL does, and fails
// a recv whose tag or size differs from the message that arrives first.
//
// Not a transport to time anything with, and no timeouts: a test that mismatches collectives
// hangs (ctest's timeout ends it).
#pragma once

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "off_host_device.h"
#include "stagecraft/comm/communicator.h"

namespace stagecraft::testing {

// Which memory a ThreadComm's buffers must be in: unchecked (map null), the test devices'
// (device true), or anywhere else.
struct ThreadMemory {
  const MemoryMap* map = nullptr;
  bool device = false;
};

// The shared state of one group: every member deposits its buffer, then reads all of them.
class ThreadHub {
 public:
  explicit ThreadHub(int n) : n_(n), barrier_(n), slots_(static_cast<size_t>(n)) {}
  int size() const { return n_; }

  void deposit(int rank, const void* data, size_t bytes) {
    auto& s = slots_[static_cast<size_t>(rank)];
    s.resize(bytes);
    if (bytes) std::memcpy(s.data(), data, bytes);
    barrier_.arrive_and_wait();
  }
  void done() { barrier_.arrive_and_wait(); }
  template <typename T>
  T at(int rank, size_t i) const {
    T v;
    std::memcpy(&v, slots_[static_cast<size_t>(rank)].data() + i * sizeof(T), sizeof(T));
    return v;
  }

  void post(int src, int dst, uint32_t tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const char* p = static_cast<const char*>(data);
    mail_[{src, dst, tag}].emplace_back(p, p + bytes);
    cv_.notify_all();
  }
  // By order between two ranks, whatever the tag: the first message src sent dst, with its tag
  // and size, for the caller to compare.
  void take_first(int src, int dst, void* data, size_t bytes, uint32_t& tag, size_t& size) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = ordered_[{src, dst}];
    cv_.wait(lock, [&] { return !q.empty(); });
    auto msg = std::move(q.front());
    q.pop_front();
    tag = msg.first;
    size = msg.second.size();
    std::memcpy(data, msg.second.data(), std::min(bytes, msg.second.size()));
  }
  void post_ordered(int src, int dst, uint32_t tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const char* p = static_cast<const char*>(data);
    ordered_[{src, dst}].emplace_back(tag, std::vector<char>(p, p + bytes));
    cv_.notify_all();
  }
  void take(int src, int dst, uint32_t tag, void* data, size_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    auto key = std::make_tuple(src, dst, tag);
    cv_.wait(lock, [&] { return !mail_[key].empty(); });
    auto msg = std::move(mail_[key].front());
    mail_[key].pop_front();
    std::memcpy(data, msg.data(), std::min(bytes, msg.size()));
  }

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<std::vector<char>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, uint32_t>, std::deque<std::vector<char>>> mail_;
  std::map<std::pair<int, int>, std::deque<std::pair<uint32_t, std::vector<char>>>> ordered_;
};

class ThreadComm final : public comm::Communicator {
 public:
  // `rank` is the group rank of this thread in `ranks`; errors name the group "label[ranks]".
  ThreadComm(std::shared_ptr<ThreadHub> hub, const std::string& label, const std::vector<int>& ranks, int rank,
             ThreadMemory memory = {})
      : Communicator(comm::group_name(ranks, label), ranks, rank), hub_(std::move(hub)), memory_(memory) {}

  bool device_memory() const override { return memory_.device; }

 protected:
  Status do_all_reduce(Buffer data, comm::ReduceOp op) override {
    if (Status s = check_memory("all_reduce", data.data, data.count * comm::size_of(data.dtype)); !s) return s;
    if (data.dtype == comm::DType::kF32) return reduce_into(static_cast<const float*>(data.data), static_cast<float*>(data.data), data.count, 0, op);
    return reduce_into(static_cast<const double*>(data.data), static_cast<double*>(data.data), data.count, 0, op);
  }
  // in (size x count) -> out (count)
  Status do_reduce_scatter(ConstBuffer in, Buffer out, comm::ReduceOp op) override {
    if (Status s = check_memory("reduce_scatter in", in.data, in.count * comm::size_of(in.dtype)); !s) return s;
    if (Status s = check_memory("reduce_scatter out", out.data, out.count * comm::size_of(out.dtype)); !s) return s;
    const size_t offset = static_cast<size_t>(rank()) * out.count;
    if (in.dtype == comm::DType::kF32) return reduce_into(static_cast<const float*>(in.data), static_cast<float*>(out.data), out.count, offset, op, in.count);
    return reduce_into(static_cast<const double*>(in.data), static_cast<double*>(out.data), out.count, offset, op, in.count);
  }
  // in (count) -> out (size x count)
  Status do_all_gather(ConstBuffer in, Buffer out) override {
    const size_t bytes = in.count * comm::size_of(in.dtype);
    if (Status s = check_memory("all_gather in", in.data, bytes); !s) return s;
    if (Status s = check_memory("all_gather out", out.data, bytes * static_cast<size_t>(size())); !s) return s;
    hub_->deposit(rank(), in.data, bytes);
    for (int r = 0; r < size(); ++r) {
      for (size_t b = 0; b < bytes; ++b) static_cast<char*>(out.data)[static_cast<size_t>(r) * bytes + b] = hub_->at<char>(r, b);
    }
    hub_->done();
    return Status::OK();
  }
  // in (size x n) -> out (size x n): block r of every rank's in to rank r.
  Status do_all_to_all(ConstBuffer in, Buffer out) override {
    const size_t bytes = in.count * comm::size_of(in.dtype), block = bytes / static_cast<size_t>(size());
    if (Status s = check_memory("all_to_all in", in.data, bytes); !s) return s;
    if (Status s = check_memory("all_to_all out", out.data, bytes); !s) return s;
    hub_->deposit(rank(), in.data, bytes);
    for (int r = 0; r < size(); ++r) {
      for (size_t b = 0; b < block; ++b) {
        static_cast<char*>(out.data)[static_cast<size_t>(r) * block + b] = hub_->at<char>(r, static_cast<size_t>(rank()) * block + b);
      }
    }
    hub_->done();
    return Status::OK();
  }
  // Block r of every rank's in (its send_counts[r] elements) to rank r; the counts ride along.
  Status do_all_to_all_v(ConstBuffer in, std::span<const size_t> send_counts, Buffer out, std::span<const size_t> recv_counts) override {
    const size_t el = comm::size_of(in.dtype), n = static_cast<size_t>(size());
    if (Status s = check_memory("all_to_all_v in", in.data, in.count * el); !s) return s;
    if (Status s = check_memory("all_to_all_v out", out.data, out.count * el); !s) return s;
    // Deposit: n counts (as size_t), then the elements.
    std::vector<char> msg(n * sizeof(size_t) + in.count * el);
    std::memcpy(msg.data(), send_counts.data(), n * sizeof(size_t));
    if (in.count) std::memcpy(msg.data() + n * sizeof(size_t), in.data, in.count * el);
    hub_->deposit(rank(), msg.data(), msg.size());
    size_t at = 0;
    for (int r = 0; r < size(); ++r) {
      size_t offset = 0;  // where rank r's block for this rank starts in its elements
      for (int q = 0; q < rank(); ++q) offset += hub_->at<size_t>(r, static_cast<size_t>(q));
      const size_t count = hub_->at<size_t>(r, static_cast<size_t>(rank()));
      if (count != recv_counts[static_cast<size_t>(r)]) {
        hub_->done();
        return Status::internal(name() + ": all_to_all_v: rank " + std::to_string(r) + " sends " + std::to_string(count) +
                                " elements, this rank expects " + std::to_string(recv_counts[static_cast<size_t>(r)]));
      }
      for (size_t b = 0; b < count * el; ++b) {
        static_cast<char*>(out.data)[at * el + b] = hub_->at<char>(r, n * sizeof(size_t) + offset * el + b);
      }
      at += count;
    }
    hub_->done();
    return Status::OK();
  }
  Status do_broadcast(Buffer data, int root) override {
    const size_t bytes = data.count * comm::size_of(data.dtype);
    if (Status s = check_memory("broadcast", data.data, bytes); !s) return s;
    hub_->deposit(rank(), data.data, bytes);
    for (size_t b = 0; b < bytes; ++b) static_cast<char*>(data.data)[b] = hub_->at<char>(root, b);
    hub_->done();
    return Status::OK();
  }
  Status do_send(ConstBuffer data, int peer, uint32_t tag) override {
    const size_t bytes = data.count * comm::size_of(data.dtype);
    if (Status s = check_memory("send", data.data, bytes); !s) return s;
    if (memory_.device) {
      hub_->post_ordered(rank(), peer, tag, data.data, bytes);
    } else {
      hub_->post(rank(), peer, tag, data.data, bytes);
    }
    return Status::OK();
  }
  Status do_isend(ConstBuffer data, int peer, uint32_t tag) override { return do_send(data, peer, tag); }
  Status do_wait_sends() override { return Status::OK(); }
  Status do_recv(Buffer data, int peer, uint32_t tag) override {
    const size_t bytes = data.count * comm::size_of(data.dtype);
    if (Status s = check_memory("recv", data.data, bytes); !s) return s;
    if (!memory_.device) {
      hub_->take(peer, rank(), tag, data.data, bytes);
      return Status::OK();
    }
    uint32_t got_tag = 0;
    size_t got_bytes = 0;
    hub_->take_first(peer, rank(), data.data, bytes, got_tag, got_bytes);
    if (got_tag != tag || got_bytes != bytes) {
      return Status::internal(describe("recv", data.count, data.dtype) + ": expected tag " + std::to_string(tag) + " (" +
                              std::to_string(bytes) + " bytes) but the first message from " + describe_peer(peer) + " has tag " +
                              std::to_string(got_tag) + " (" + std::to_string(got_bytes) + " bytes): NCCL would deliver it here");
    }
    return Status::OK();
  }
  Status do_send_recv(ConstBuffer out, int to, Buffer in, int from, uint32_t tag) override {
    if (Status s = do_send(out, to, tag); !s) return s;
    return do_recv(in, from, tag);
  }
  Status do_barrier() override {
    hub_->done();
    return Status::OK();
  }

 private:
  // out[i] = op over ranks r (in rank order, in double) of rank r's in[offset + i]; in_count is
  // what each rank deposits.
  template <typename T>
  Status reduce_into(const T* in, T* out, size_t count, size_t offset, comm::ReduceOp op, size_t in_count = 0) {
    hub_->deposit(rank(), in, (in_count ? in_count : count) * sizeof(T));
    std::vector<T> result(count);
    for (size_t i = 0; i < count; ++i) {
      double s = op == comm::ReduceOp::kMax ? -std::numeric_limits<double>::infinity()
                 : op == comm::ReduceOp::kMin ? std::numeric_limits<double>::infinity()
                                              : 0.0;
      for (int r = 0; r < size(); ++r) {
        const double x = hub_->at<T>(r, offset + i);
        if (op == comm::ReduceOp::kMax) s = std::max(s, x);
        else if (op == comm::ReduceOp::kMin) s = std::min(s, x);
        else s += x;
      }
      if (op == comm::ReduceOp::kAvg) s /= size();
      result[i] = static_cast<T>(s);
    }
    hub_->done();  // everyone has read the deposits before anyone overwrites `in`
    std::copy(result.begin(), result.end(), out);
    return Status::OK();
  }

  // Fails a buffer in the wrong memory for this group (ThreadMemory).
  Status check_memory(const char* what, const void* p, size_t bytes) const {
    if (!memory_.map || bytes == 0) return Status::OK();
    const bool on_device = memory_.map->contains(p, bytes);
    if (on_device == memory_.device) return Status::OK();
    return Status::internal(name() + ": " + what + " of " + std::to_string(bytes) + " bytes in " +
                            (on_device ? "device memory, but this group takes host memory"
                                       : "host memory, but this group takes device memory"));
  }

  std::shared_ptr<ThreadHub> hub_;
  ThreadMemory memory_;
};

// One hub per (group label, ranks), shared by the threads that are its members. Not
// thread-safe: build every rank's groups before the rank threads start.
class ThreadHubs {
 public:
  std::shared_ptr<ThreadHub> hub(const std::string& name, const std::vector<int>& ranks) {
    auto& h = hubs_[{name, ranks}];
    if (!h) h = std::make_shared<ThreadHub>(static_cast<int>(ranks.size()));
    return h;
  }

 private:
  std::map<std::pair<std::string, std::vector<int>>, std::shared_ptr<ThreadHub>> hubs_;
};

// The CommunicatorFactory of `global_rank` over ThreadComms from `hubs`, which must outlive it.
inline comm::CommunicatorFactory thread_communicator_factory(ThreadHubs& hubs, int global_rank, ThreadMemory memory = {}) {
  return [&hubs, global_rank, memory](const std::string& name,
                                      const std::vector<int>& ranks) -> Result<std::unique_ptr<comm::Communicator>> {
    auto group_rank = comm::group_rank_in(ranks, global_rank);
    if (!group_rank.ok()) return group_rank.status();
    return std::unique_ptr<comm::Communicator>(new ThreadComm(hubs.hub(name, ranks), name, ranks, group_rank.value(), memory));
  };
}

}  // namespace stagecraft::testing
