// Communicator: the collectives and point-to-point transfers of one group of ranks, the seam
// between the training runtime and a transport (Gloo over TCP on host memory; NCCL on GPU memory,
// nccl_communicator.h).
//
// A group is the list of global ranks the topology names (plan/topology.h), e.g. with
// dp = tp = pp = 2 the TP group [2,3] or the PP group [1,5]. Inside it, ranks are addressed by
// their index in that list, the "group rank": in PP group [1,5] rank 5 is group rank 1, which
// is also its pipeline stage. Every rank of a group must issue the same collectives in the same
// order, with the same sizes; a rank creates the communicators of all its groups in one order
// that all ranks share (e.g. world, tp, dp, pp), because creation waits for every member.
//
// Buffers are spans of float or double: host memory, or for a communicator whose device_memory()
// is true (NCCL) memory of its GPU, the work ordered on that GPU's stream. Shapes:
//   all_reduce      data (n), in place
//   reduce_scatter  in (size * n) -> out (n): out = op over ranks of in[rank * n .. +n]
//   all_gather      in (n) -> out (size * n): out[r * n .. +n] = in of group rank r
//   broadcast       data (n), from group rank `root` to all, in place
//   all_to_all      in (size * n) -> out (size * n): block r of in goes to group rank r, and
//                   out[s * n .. +n] is block `rank` of group rank s's in (equal counts)
//   all_to_all_v    the same with a count per rank: in holds send_counts[r] elements for each
//                   group rank r, in rank order, out recv_counts[s] from each s; rank r's
//                   send_counts[s] must equal rank s's recv_counts[r] (exchange the counts first)
//   send / recv     data (n) to / from one group rank; sizes must match on both sides.
//                   Messages between two ranks with the same tag arrive in the order sent.
//                   send() returns once the bytes are on their way, and with Gloo that is only
//                   after the peer posted the matching recv: two neighbours that both send
//                   first deadlock (until the timeout). Use isend() + wait_sends() or send_recv().
//   isend           starts a send and returns at once; `data` must stay untouched until
//                   wait_sends(), which waits for every isend of this communicator so far
//   send_recv       a send and a recv posted together, then both awaited
//   irecv           posts a recv and may return before it has arrived; `data` must stay
//                   untouched until wait_recvs(), which waits for every irecv so far. Gloo
//                   receives in the background; a transport without that (NCCL) receives at once.
//   all_reduce_async  an all_reduce that may still run after the call returns: `data` stays
//                   untouched, and the communicator gets no other call, until wait_async(),
//                   which waits for every all_reduce_async started so far (they run in the order
//                   started) and returns the first failure. Gloo runs them on a thread of the
//                   communicator's own, NCCL on a second stream of the GPU (ordered after the
//                   work already issued on the device's stream); a transport without either
//                   runs each at once. Data-parallel gradient buckets use it to reduce while
//                   the backward pass goes on (runtime/grad_reducer.h).
//   reduce_scatter_async, all_gather_async  the same for those two collectives, in the same
//                   queue (wait_async waits for all three kinds; `in` stays untouched and `out`
//                   unread until then): ZeRO's gradient buckets and prefetched layers
//                   (runtime/zero_shards.h).
// Gloo matches a recv to the sends of its peer by tag; NCCL has no tags and matches by order, so
// portable callers post the recvs from one peer in the order that peer sent.
// kAvg divides the sum by the group size (exactly: sum / size, not sum * (1 / size)).
//
// Errors: every call returns a Status. Bad arguments (sizes that do not fit, a peer outside the
// group or equal to self) are kInvalidInput and leave the communicator usable. A transport
// failure (kTimeout when a peer does not take part within the timeout, kUnavailable when a peer
// disconnected) names the operation, the group and the peer where known, and breaks the
// communicator: the transport's state is unknown, so every later call returns that first error.
//
// Groups of one rank are valid: collectives are local copies or nothing, barrier returns at once.
//
// Thread safety: one thread at a time per communicator; different communicators (over the same
// process's transport) may be used from different threads concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
enum class DType { kF32, kF64 };

const char* to_string(ReduceOp op);
const char* to_string(DType t);
size_t size_of(DType t);

// "tp[2,3]": a group's name, its label and its global ranks (long lists elided).
std::string group_name(const std::vector<int>& ranks, const std::string& label = "group");

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // The group, as errors name it ("tp[2,3]").
  const std::string& name() const { return name_; }
  // Global ranks; index = group rank.
  const std::vector<int>& ranks() const { return ranks_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int rank() const { return rank_; }  // this process's group rank
  int global_rank() const { return ranks_[rank_]; }
  // The group rank of a global rank, or -1 when it is not a member.
  int group_rank_of(int global) const;
  // Whether buffers are in the memory of a GPU (true: NCCL) rather than host memory (false).
  virtual bool device_memory() const { return false; }

  Status all_reduce(std::span<float> data, ReduceOp op = ReduceOp::kSum) { return all_reduce(view(data), op); }
  Status all_reduce(std::span<double> data, ReduceOp op = ReduceOp::kSum) { return all_reduce(view(data), op); }
  Status reduce_scatter(std::span<const float> in, std::span<float> out, ReduceOp op = ReduceOp::kSum) {
    return reduce_scatter(view(in), view(out), op);
  }
  Status reduce_scatter(std::span<const double> in, std::span<double> out, ReduceOp op = ReduceOp::kSum) {
    return reduce_scatter(view(in), view(out), op);
  }
  Status all_gather(std::span<const float> in, std::span<float> out) { return all_gather(view(in), view(out)); }
  Status all_gather(std::span<const double> in, std::span<double> out) { return all_gather(view(in), view(out)); }
  Status broadcast(std::span<float> data, int root) { return broadcast(view(data), root); }
  Status all_to_all(std::span<const float> in, std::span<float> out) { return all_to_all(view(in), view(out)); }
  Status all_to_all(std::span<const double> in, std::span<double> out) { return all_to_all(view(in), view(out)); }
  Status all_to_all_v(std::span<const float> in, std::span<const size_t> send_counts, std::span<float> out,
                      std::span<const size_t> recv_counts) {
    return all_to_all_v(view(in), send_counts, view(out), recv_counts);
  }
  Status broadcast(std::span<double> data, int root) { return broadcast(view(data), root); }
  Status send(std::span<const float> data, int peer, uint32_t tag = 0) { return send(view(data), peer, tag); }
  Status send(std::span<const double> data, int peer, uint32_t tag = 0) { return send(view(data), peer, tag); }
  Status isend(std::span<const float> data, int peer, uint32_t tag = 0) { return isend(view(data), peer, tag); }
  Status isend(std::span<const double> data, int peer, uint32_t tag = 0) { return isend(view(data), peer, tag); }
  Status recv(std::span<float> data, int peer, uint32_t tag = 0) { return recv(view(data), peer, tag); }
  Status recv(std::span<double> data, int peer, uint32_t tag = 0) { return recv(view(data), peer, tag); }
  Status send_recv(std::span<const float> out, int to, std::span<float> in, int from, uint32_t tag = 0) {
    return send_recv(view(out), to, view(in), from, tag);
  }
  Status send_recv(std::span<const double> out, int to, std::span<double> in, int from, uint32_t tag = 0) {
    return send_recv(view(out), to, view(in), from, tag);
  }
  Status irecv(std::span<float> data, int peer, uint32_t tag = 0) { return irecv(view(data), peer, tag); }
  Status wait_sends();
  Status wait_recvs();
  Status barrier();
  Status all_reduce_async(std::span<float> data, ReduceOp op = ReduceOp::kSum) { return all_reduce_async(view(data), op); }
  Status reduce_scatter_async(std::span<const float> in, std::span<float> out, ReduceOp op = ReduceOp::kSum) {
    return reduce_scatter_async(view(in), view(out), op);
  }
  Status all_gather_async(std::span<const float> in, std::span<float> out) { return all_gather_async(view(in), view(out)); }
  Status wait_async();

  // Untyped views, for backends and for callers that hold a dtype at run time.
  struct Buffer {
    void* data;
    size_t count;  // elements
    DType dtype;
  };
  struct ConstBuffer {
    const void* data;
    size_t count;
    DType dtype;
  };
  Status all_reduce(Buffer data, ReduceOp op);
  Status reduce_scatter(ConstBuffer in, Buffer out, ReduceOp op);
  Status all_gather(ConstBuffer in, Buffer out);
  Status broadcast(Buffer data, int root);
  Status all_to_all(ConstBuffer in, Buffer out);
  Status all_to_all_v(ConstBuffer in, std::span<const size_t> send_counts, Buffer out, std::span<const size_t> recv_counts);
  Status send(ConstBuffer data, int peer, uint32_t tag);
  Status isend(ConstBuffer data, int peer, uint32_t tag);
  Status recv(Buffer data, int peer, uint32_t tag);
  Status irecv(Buffer data, int peer, uint32_t tag);
  Status send_recv(ConstBuffer out, int to, Buffer in, int from, uint32_t tag);
  Status all_reduce_async(Buffer data, ReduceOp op);
  Status reduce_scatter_async(ConstBuffer in, Buffer out, ReduceOp op);
  Status all_gather_async(ConstBuffer in, Buffer out);

 protected:
  // `ranks` non-empty and distinct, `rank` an index into it (the factories check); an empty
  // name becomes group_name(ranks).
  Communicator(std::string name, std::vector<int> ranks, int rank);

  // The transport, called by the public calls above after they checked the arguments and
  // handled empty buffers and groups of one. Sizes are consistent, peers valid and not self.
  virtual Status do_all_reduce(Buffer data, ReduceOp op) = 0;
  virtual Status do_reduce_scatter(ConstBuffer in, Buffer out, ReduceOp op) = 0;
  virtual Status do_all_gather(ConstBuffer in, Buffer out) = 0;
  virtual Status do_broadcast(Buffer data, int root) = 0;
  virtual Status do_all_to_all(ConstBuffer in, Buffer out) = 0;
  // Counts: size() each, summing to in.count and out.count.
  virtual Status do_all_to_all_v(ConstBuffer in, std::span<const size_t> send_counts, Buffer out,
                                 std::span<const size_t> recv_counts) = 0;
  virtual Status do_send(ConstBuffer data, int peer, uint32_t tag) = 0;
  virtual Status do_isend(ConstBuffer data, int peer, uint32_t tag) = 0;
  virtual Status do_wait_sends() = 0;
  virtual Status do_recv(Buffer data, int peer, uint32_t tag) = 0;
  virtual Status do_send_recv(ConstBuffer out, int to, Buffer in, int from, uint32_t tag) = 0;
  // The background recv: by default received at once (do_recv), nothing left to wait for.
  virtual Status do_irecv(Buffer data, int peer, uint32_t tag) { return do_recv(data, peer, tag); }
  virtual Status do_wait_recvs() { return Status::OK(); }
  virtual Status do_barrier() = 0;
  // The background all-reduce: by default run at once (do_all_reduce), nothing left to wait for.
  virtual Status do_all_reduce_async(Buffer data, ReduceOp op) { return do_all_reduce(data, op); }
  virtual Status do_reduce_scatter_async(ConstBuffer in, Buffer out, ReduceOp op) { return do_reduce_scatter(in, out, op); }
  virtual Status do_all_gather_async(ConstBuffer in, Buffer out) { return do_all_gather(in, out); }
  virtual Status do_wait_async() { return Status::OK(); }
  // A group of one's reduce_scatter and all_gather: `bytes` from src to dst in the
  // communicator's memory (host: memmove).
  virtual Status do_copy(void* dst, const void* src, size_t bytes);

  // "all_reduce of 4096 f32 on tp[2,3] (rank 3, group rank 1 of 2)": how errors begin.
  std::string describe(const char* op, size_t count, DType dtype) const;
  // "rank 5 (group rank 1)"
  std::string describe_peer(int group_rank) const;

 private:
  static Buffer view(std::span<float> s) { return {s.data(), s.size(), DType::kF32}; }
  static Buffer view(std::span<double> s) { return {s.data(), s.size(), DType::kF64}; }
  static ConstBuffer view(std::span<const float> s) { return {s.data(), s.size(), DType::kF32}; }
  static ConstBuffer view(std::span<const double> s) { return {s.data(), s.size(), DType::kF64}; }
  Status check_peer(const char* op, int peer) const;

  std::string name_;
  std::vector<int> ranks_;
  int rank_;
};

// A short name of a group's ranks for store keys, whatever their number: "<size>-<16 hex digits
// of an FNV-1a hash of the ranks>", e.g. "2-..." for [0,1].
std::string group_key(const std::vector<int>& ranks);

// Checks a group for `global_rank`: non-empty, distinct non-negative ranks, containing it.
// Returns the group rank. kInvalidInput naming the group ("dp[0,2]", with its label) otherwise.
Result<int> group_rank_in(const std::vector<int>& ranks, int global_rank, const std::string& label = "group");

// A communicator for a group of one rank (no transport): collectives are local.
Result<std::unique_ptr<Communicator>> make_single_rank_communicator(int global_rank, std::string name = "");

// Makes this rank's communicator for one group: `name` is the group's label ("world", "tp",
// "dp", "pp", "embedding"), `ranks` its global ranks in group-rank order. It may block until
// every member calls it for the same group (Gloo does). The communicator must have exactly
// `ranks`, this rank among them. build_process_groups (process_groups.h) calls it for every
// group of a rank; gloo_communicator_factory (gloo_communicator.h) makes one over Gloo.
using CommunicatorFactory =
    std::function<Result<std::unique_ptr<Communicator>>(const std::string& name, const std::vector<int>& ranks)>;

}  // namespace stagecraft::comm
