// CommGroup: what the trainer needs from one process group (a TP, DP or PP group, the world, or
// the pair of stages that share the tied embedding) — the seam between the training loop and a
// communication backend (Gloo on CPU, NCCL on GPU; comm/ adapts them to this).
//
// Ranks are indices within the group (0 .. size-1). Every call returns a Status that names the
// operation and the group when it fails or times out; none blocks forever. send() may return
// before the peer has received (the buffer must then stay untouched until wait_sends());
// messages between two ranks with the same tag are received in the order they were sent. A group
// that takes device memory (device_memory(), NCCL) matches the messages between two ranks by
// their order alone: the receiver must post its recvs in the order the sender sent, whatever
// the tags (the trainer's schedules do; tests/engine/tst_trainer.cpp checks it).
//
// Pointers are host memory, or the device's memory where device_memory() is true. The helpers
// at the end take either kind of group and stage a buffer through a copy only where the group
// cannot take it where it lies.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/gpt_stage.h"

namespace stagecraft::runtime {

class CommGroup : public TpReducer {
 public:
  ~CommGroup() override = default;

  virtual int size() const = 0;
  virtual int rank() const = 0;

  // In place, every rank gets the sum.
  Status all_reduce_sum(float* data, size_t count) override = 0;
  virtual Status all_reduce_sum(double* data, size_t count) = 0;
  // in (size x count) -> out (count): this rank's block of the sum.
  virtual Status reduce_scatter_sum(const float* in, float* out, size_t count) = 0;
  // in (count) -> out (size x count): every rank's block, in rank order.
  virtual Status all_gather(const float* in, float* out, size_t count) = 0;
  // in (size x count) -> out (size x count): block r of in goes to rank r; block s of out is
  // what rank s sent this rank.
  virtual Status all_to_all(const float* in, float* out, size_t count) = 0;
  // The all-to-all with a count per rank (expert parallelism's dispatch): send_counts[r]
  // elements of in, at the offset of the counts before r, go to rank r; out holds recv_counts[s]
  // elements from each rank s, in rank order. Rank r's send_counts[s] must equal rank s's
  // recv_counts[r] (counts are exchanged first); either may be 0. Arrays of size() counts.
  virtual Status all_to_all_v(const float* in, const size_t* send_counts, float* out, const size_t* recv_counts) = 0;
  virtual Status send(const float* data, size_t count, int peer, uint32_t tag) = 0;
  virtual Status recv(float* data, size_t count, int peer, uint32_t tag) = 0;
  virtual Status wait_sends() = 0;
  // A recv that may go on in the background (Communicator::irecv): `data` stays untouched until
  // wait_recvs(), which waits for every one started so far. By default it receives at once.
  virtual Status recv_start(float* data, size_t count, int peer, uint32_t tag) { return recv(data, count, peer, tag); }
  virtual Status wait_recvs() { return Status::OK(); }
  // An in-place sum that may go on in the background (Communicator::all_reduce_async): `data`
  // stays untouched, and the group gets no other call, until wait_all_reduces(), which waits for
  // every background call started so far and returns the first failure. By default it runs at once.
  virtual Status all_reduce_sum_start(float* data, size_t count) { return all_reduce_sum(data, count); }
  // reduce_scatter_sum and all_gather in the background likewise (Communicator's *_async): `in`
  // untouched and `out` unread until wait_all_reduces(). By default they run at once.
  virtual Status reduce_scatter_sum_start(const float* in, float* out, size_t count) { return reduce_scatter_sum(in, out, count); }
  virtual Status all_gather_start(const float* in, float* out, size_t count) { return all_gather(in, out, count); }
  virtual Status wait_all_reduces() { return Status::OK(); }
};

// Group calls on buffers in `device`'s memory: in place where the group takes device memory or
// the host can reach the device's, else through host copies.
//   in (size x count) -> out (count): this rank's block of the sum
Status reduce_scatter_on_device(CommGroup& group, Device& device, const float* in, float* out, size_t count);
//   in (count) -> out (size x count)
Status all_gather_on_device(CommGroup& group, Device& device, const float* in, float* out, size_t count);
//   in (size x count) -> out (size x count), block r of in to rank r
Status all_to_all_on_device(CommGroup& group, Device& device, const float* in, float* out, size_t count);

//   in (sum of send_counts) -> out (sum of recv_counts), CommGroup::all_to_all_v
Status all_to_all_v_on_device(CommGroup& group, Device& device, const float* in, const size_t* send_counts, float* out,
                              const size_t* recv_counts);

// Group calls on host buffers: in place for a group that takes host memory, else through copies
// in `device`'s memory.
//   data (count), in place: every rank gets the sum
Status all_reduce_host(CommGroup& group, Device& device, double* data, size_t count);
//   in (count) -> out (size x count)
Status all_gather_host(CommGroup& group, Device& device, const float* in, float* out, size_t count);
//   data (count) to group rank `peer`; the send has completed when this returns (wait_sends)
Status send_host(CommGroup& group, Device& device, const float* data, size_t count, int peer, uint32_t tag);
//   data (count) from group rank `peer`
Status recv_host(CommGroup& group, Device& device, float* data, size_t count, int peer, uint32_t tag);

}  // namespace stagecraft::runtime
