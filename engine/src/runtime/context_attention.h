// ContextAttention: causal self-attention of sequences split over the ranks of a context-parallel
// group (parallel.cp > 1), for GptStage. docs/engine.md (Context parallelism) has the picture.
//
// Layout: a sequence of Tf tokens is cut into 2 cp chunks of c = Tf / (2 cp); cp rank i holds
// chunks i and 2 cp - 1 - i, in that order, so its T = 2 c tokens are two runs of positions and
// every rank gets the same share of the causal mask's work (Megatron-Core's load balancing).
// positions() gives a rank's token positions.
//
// Two exchanges (parallel.cp_comm):
//   ring        K and V travel around the group, one block per step; each step's attention of
//               the local queries against the block (Ops::attention_block_forward, causal by
//               position) is merged into a running result by the online softmax, and the
//               per-row log-sum-exp kept as the state for backward. Backward sends the blocks
//               round again with their dK, dV accumulating, which end at their owner.
//   all_to_all  (DeepSpeed-Ulysses) an all-to-all turns (local tokens, all heads) into (all
//               tokens, heads / cp) for q, k and v; the rows are put in sequence order and the
//               backend's own attention (standard, or fused where the stage uses it) runs on the
//               whole sequence; another all-to-all brings the output back. It keeps the whole
//               sequence's q | k | v and output of its heads for backward.
// The ring posts each step's send and receive (CommGroup::send, recv_start) before the step's
// attention and waits for the receive after it, so a transport that moves them in the background
// (Gloo) transfers the next block while this one is computed; one that receives at once (NCCL
// here) or a group fed through host copies transfers it first.
//
// Buffers the exchanges need live here, allocated once, in the stage's device memory; a group
// that takes host memory on a device the host cannot reach is fed through host copies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/comm_group.h"
#include "stagecraft/runtime/device.h"

namespace stagecraft::runtime {

class ContextAttention {
 public:
  struct Shape {
    int B = 1;        // micro-batch
    int T = 0;        // this rank's tokens of a sequence (2 chunks)
    int NH = 1;       // query heads of this TP rank
    int NKV = 1;      // key/value heads of this TP rank
    int HS = 1;       // head size
    int cp = 2, cp_rank = 0;
    bool ring = true;   // parallel.cp_comm: ring, else all_to_all
    bool flash = false; // all_to_all: the backend's fused attention (Ops::flash_attention_*)
  };

  // The positions of cp rank `rank`'s tokens in a sequence of `seq` tokens, in the order the rank
  // holds them.
  static std::vector<int32_t> positions(int seq, int cp, int rank);

  // `group` (cp ranks) and `device` must outlive it.
  static Result<std::unique_ptr<ContextAttention>> create(const Shape& shape, CommGroup& group, Device& device);

  // fp32 elements of the state one layer keeps for backward: ring, lse (B, NH, T); all_to_all,
  // the whole sequence's probabilities (B, NH / cp, Tf, Tf) or with flash its lse (B, NH / cp, Tf).
  size_t state_elems() const;
  // all_to_all: elements of the whole sequence's q | k | v (B, Tf, (NH + 2 NKV) HS / cp) and output
  // (B, Tf, NH HS / cp) one layer keeps; 0 with the ring.
  size_t full_qkv_elems() const;
  size_t full_out_elems() const;

  // out (B, T, NH HS) = causal attention of this rank's queries against the whole sequence, from
  // qkv (B, T, (NH + 2 NKV) HS) laid out q | k | v. full_qkv and full_out: all_to_all's kept
  // tensors (ignored by the ring).
  Status forward(ActOut out, float* state, ActIn qkv, ActOut full_qkv, ActOut full_out);
  // dqkv (B, T, (NH + 2 NKV) HS) overwritten from dout (B, T, NH HS) and what forward kept.
  Status backward(ActOut dqkv, ActIn dout, ActIn qkv, ActIn out, const float* state, ActIn full_qkv, ActIn full_out);

 private:
  ContextAttention(const Shape& s, CommGroup& g, Device& d) : s_(s), group_(g), dev_(d), k_(d.ops()) {}
  Status ring_forward(ActOut out, float* lse, ActIn qkv);
  Status ring_backward(ActOut dqkv, ActIn dout, ActIn qkv, ActIn out, const float* lse);
  Status ulysses_forward(ActOut out, float* state, ActIn qkv, ActOut full_qkv, ActOut full_out);
  Status ulysses_backward(ActOut dqkv, ActIn dout, const float* state, ActIn full_qkv, ActIn full_out);
  // Point-to-point on device buffers: directly where the group reaches the device's memory, else
  // through host slot `slot` (kept until wait_sends).
  Status send(const float* data, size_t count, int peer, uint32_t tag, size_t slot);
  Status recv(float* data, size_t count, int peer, uint32_t tag, size_t slot);
  // recv, in the background where the group reaches the device's memory (until wait_recvs).
  Status recv_start(float* data, size_t count, int peer, uint32_t tag, size_t slot);
  Status wait_recvs();
  Status wait_sends();
  // Rows of the whole sequence (b, chunk) <-> rows of a rank's block: chunk `k` (0, 1) of rank r
  // is the sequence's chunk chunk_of(r, k).
  int chunk_of(int r, int k) const { return k == 0 ? r : 2 * s_.cp - 1 - r; }
  // Every rank's block (cp x (B, T, width)) into sequence order (B, Tf, width), or back.
  void to_sequence(ActOut seq, ActIn blocks, int width) const;
  void from_sequence(ActOut blocks, ActIn seq, int width) const;
  void reorder(ActOut out, ActIn in, int width, bool to_seq) const;

  Shape s_;
  CommGroup& group_;
  Device& dev_;
  const Ops& k_;
  bool reaches_ = true;  // the group takes the device's memory (or the host can reach it)
  std::vector<Buffer<int32_t>> pos_;  // per cp rank: its tokens' positions (T)
  // ring: q (B, T, NH HS) and per step a K|V block and its gradient (B, T, 2 NKV HS), fp32;
  // the running output, a block's output and lse, dout and out in fp32, dq.
  Buffer<float> q_, acc_, blk_out_, blk_lse_, dout_, out_, dq_, dkv_home_;
  std::vector<Buffer<float>> kvs_, dkvs_;
  // all_to_all: what goes out and comes in (cp x (B, T, width)), the whole sequence's dout and
  // dqkv in fp32, and the standard attention's backward scratch.
  Buffer<float> a2a_in_, a2a_out_, full_dout_, full_dqkv_, scratch_;
  std::vector<std::vector<float>> host_;  // host staging, per slot
};

}  // namespace stagecraft::runtime
