// ContextAttention: attention over a sequence split across a context-parallel group. See
// context_attention.h.
//
// Legend: B micro-batch, T this rank's tokens (2 chunks of c), Tf = cp T the sequence, NH and NKV
// this TP rank's query and key/value heads, HS head size, Q = NH HS, KV = 2 NKV HS,
// QKV = Q + KV; all_to_all: NHu = NH / cp, NKVu = NKV / cp, Qu = NHu HS, QKVu = QKV / cp.
#include "runtime/context_attention.h"

#include <string>

namespace stagecraft::runtime {

namespace {

size_t sz(long long v) { return static_cast<size_t>(v); }

// Message tags of the ring: the K|V blocks and their gradients.
constexpr uint32_t kKvTag = 0x6370'0001u;
constexpr uint32_t kDkvTag = 0x6370'0002u;

}  // namespace

std::vector<int32_t> ContextAttention::positions(int seq, int cp, int rank) {
  const int c = seq / (2 * cp);
  std::vector<int32_t> p;
  p.reserve(sz(2 * c));
  for (int chunk : {rank, 2 * cp - 1 - rank}) {
    for (int t = 0; t < c; ++t) p.push_back(chunk * c + t);
  }
  return p;
}

Result<std::unique_ptr<ContextAttention>> ContextAttention::create(const Shape& s, CommGroup& group, Device& device) {
  if (s.cp < 2 || group.size() != s.cp || group.rank() != s.cp_rank) {
    return Status::internal("context parallelism: the cp group has " + std::to_string(group.size()) + " ranks, the layout " +
                            std::to_string(s.cp));
  }
  if (s.T % 2 != 0) return Status::invalid_input("parallel.cp=" + std::to_string(s.cp) + ": model.seq_len must be a multiple of 2 x cp");
  if (!s.ring && (s.NH % s.cp != 0 || s.NKV % s.cp != 0)) {
    return Status::invalid_input("parallel.cp_comm=all_to_all: cp=" + std::to_string(s.cp) + " must divide each tensor-parallel rank's " +
                                 std::to_string(s.NH) + " query and " + std::to_string(s.NKV) +
                                 " key/value heads; set parallel.cp_comm: ring");
  }
  std::unique_ptr<ContextAttention> a(new ContextAttention(s, group, device));
  a->reaches_ = group.device_memory() || device.host_accessible();
  const size_t B = sz(s.B), T = sz(s.T), Tf = T * sz(s.cp), Q = sz(s.NH) * sz(s.HS), KV = 2 * sz(s.NKV) * sz(s.HS), QKV = Q + KV,
               cp = sz(s.cp);
  a->pos_.resize(cp);
  for (int r = 0; r < s.cp; ++r) {
    const std::vector<int32_t> p = positions(s.T * s.cp, s.cp, r);
    if (Status st = allocate_buffer(a->pos_[sz(r)], device, T); !st) return st.with_context("context parallelism");
    if (Status st = device.copy_from_host(a->pos_[sz(r)].data(), p.data(), T * sizeof(int32_t)); !st) return st;
  }
  std::vector<Status> made;
  if (s.ring) {
    for (auto* b : {&a->q_, &a->acc_, &a->blk_out_, &a->dout_, &a->out_, &a->dq_}) made.push_back(allocate_buffer(*b, device, B * T * Q));
    made.push_back(allocate_buffer(a->blk_lse_, device, B * sz(s.NH) * T));
    made.push_back(allocate_buffer(a->dkv_home_, device, B * T * KV));
    a->kvs_.resize(cp);
    a->dkvs_.resize(cp);
    for (size_t i = 0; i < cp; ++i) {
      made.push_back(allocate_buffer(a->kvs_[i], device, B * T * KV));
      made.push_back(allocate_buffer(a->dkvs_[i], device, B * T * KV));
    }
    a->host_.resize(a->reaches_ ? 0 : 2 * cp + 1);
  } else {
    const size_t NHu = sz(s.NH) / cp;
    made.push_back(allocate_buffer(a->a2a_in_, device, B * T * QKV));
    made.push_back(allocate_buffer(a->a2a_out_, device, B * T * QKV));
    made.push_back(allocate_buffer(a->full_dout_, device, B * Tf * Q / cp));
    made.push_back(allocate_buffer(a->full_dqkv_, device, B * Tf * QKV / cp));
    made.push_back(allocate_buffer(a->scratch_, device, B * NHu * Tf * (s.flash ? 1 : Tf)));
  }
  for (const Status& st : made) {
    if (!st) return st.with_context("context parallelism's buffers");
  }
  return a;
}

size_t ContextAttention::state_elems() const {
  const size_t B = sz(s_.B), T = sz(s_.T), cp = sz(s_.cp);
  if (s_.ring) return B * sz(s_.NH) * T;
  const size_t Tf = T * cp;
  return B * (sz(s_.NH) / cp) * Tf * (s_.flash ? 1 : Tf);
}

size_t ContextAttention::full_qkv_elems() const {
  return s_.ring ? 0 : sz(s_.B) * sz(s_.T) * sz(s_.NH + 2 * s_.NKV) * sz(s_.HS);
}

size_t ContextAttention::full_out_elems() const { return s_.ring ? 0 : sz(s_.B) * sz(s_.T) * sz(s_.NH) * sz(s_.HS); }

Status ContextAttention::forward(ActOut out, float* state, ActIn qkv, ActOut full_qkv, ActOut full_out) {
  return s_.ring ? ring_forward(out, state, qkv) : ulysses_forward(out, state, qkv, full_qkv, full_out);
}

Status ContextAttention::backward(ActOut dqkv, ActIn dout, ActIn qkv, ActIn out, const float* state, ActIn full_qkv, ActIn full_out) {
  return s_.ring ? ring_backward(dqkv, dout, qkv, out, state) : ulysses_backward(dqkv, dout, state, full_qkv, full_out);
}

Status ContextAttention::send(const float* data, size_t count, int peer, uint32_t tag, size_t slot) {
  if (reaches_) return group_.send(data, count, peer, tag);
  std::vector<float>& h = host_[slot];
  h.resize(count);
  if (Status s = dev_.copy_to_host(h.data(), data, count * sizeof(float)); !s) return s;
  return group_.send(h.data(), count, peer, tag);
}

Status ContextAttention::recv(float* data, size_t count, int peer, uint32_t tag, size_t slot) {
  if (reaches_) return group_.recv(data, count, peer, tag);
  std::vector<float>& h = host_[slot];
  h.resize(count);
  if (Status s = group_.recv(h.data(), count, peer, tag); !s) return s;
  return dev_.copy_from_host(data, h.data(), count * sizeof(float));
}

Status ContextAttention::recv_start(float* data, size_t count, int peer, uint32_t tag, size_t slot) {
  if (reaches_) return group_.recv_start(data, count, peer, tag);
  return recv(data, count, peer, tag, slot);  // into the device after the host copy: at once
}

Status ContextAttention::wait_recvs() { return group_.wait_recvs(); }

Status ContextAttention::wait_sends() { return group_.wait_sends(); }

// Step s attends to the block of rank (rank - s) mod cp: its own first, then each block as it
// arrives from the previous rank, which is passed on to the next before it is used; the next
// block's receive is posted before the step's attention and awaited after it.
Status ContextAttention::ring_forward(ActOut out, float* lse, ActIn qkv) {
  const int B = s_.B, T = s_.T, NH = s_.NH, NKV = s_.NKV, HS = s_.HS, cp = s_.cp, me = s_.cp_rank;
  const int Q = NH * HS, KV = 2 * NKV * HS, QKV = Q + KV, BT = B * T;
  const size_t kv = sz(BT) * sz(KV);
  const int next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  k_.copy_columns(q_.data(), Q, qkv, QKV, BT, Q);
  k_.copy_columns(kvs_[0].data(), KV, qkv.at(sz(Q)), QKV, BT, KV);
  for (int s = 0; s < cp; ++s) {
    const int src = (me - s + cp) % cp;
    if (s + 1 < cp) {
      if (Status st = send(kvs_[sz(s)].data(), kv, next, kKvTag, sz(s)); !st) return st;
      if (Status st = recv_start(kvs_[sz(s + 1)].data(), kv, prev, kKvTag, sz(cp + s)); !st) return st;
    }
    if (s == 0) {
      k_.attention_block_forward(acc_.data(), lse, q_.data(), kvs_[0].data(), pos_[sz(me)].data(), pos_[sz(me)].data(), B, T, T, NH, HS,
                                 NKV);
    } else {
      k_.attention_block_forward(blk_out_.data(), blk_lse_.data(), q_.data(), kvs_[sz(s)].data(), pos_[sz(me)].data(), pos_[sz(src)].data(),
                                 B, T, T, NH, HS, NKV);
      k_.attention_block_merge(acc_.data(), lse, blk_out_.data(), blk_lse_.data(), B, T, NH, HS);
    }
    if (s + 1 < cp) {
      if (Status st = wait_recvs(); !st) return st;
    }
  }
  if (Status st = wait_sends(); !st) return st;
  k_.copy_columns(out, Q, acc_.data(), Q, BT, Q);
  return Status::OK();
}

// The blocks go round again, each with the gradient of its K and V so far: every rank adds its
// queries' part and passes both on, and after cp steps each gradient is back at its owner.
Status ContextAttention::ring_backward(ActOut dqkv, ActIn dout, ActIn qkv, ActIn out, const float* lse) {
  const int B = s_.B, T = s_.T, NH = s_.NH, NKV = s_.NKV, HS = s_.HS, cp = s_.cp, me = s_.cp_rank;
  const int Q = NH * HS, KV = 2 * NKV * HS, QKV = Q + KV, BT = B * T;
  const size_t kv = sz(BT) * sz(KV);
  const int next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  k_.copy_columns(q_.data(), Q, qkv, QKV, BT, Q);
  k_.copy_columns(kvs_[0].data(), KV, qkv.at(sz(Q)), QKV, BT, KV);
  k_.copy_columns(dout_.data(), Q, dout, Q, BT, Q);
  k_.copy_columns(out_.data(), Q, out, Q, BT, Q);
  if (Status st = dev_.fill_zero(dq_.data(), dq_.bytes()); !st) return st;
  if (Status st = dev_.fill_zero(dkvs_[0].data(), dkvs_[0].bytes()); !st) return st;
  // Host slots: kv blocks 0 .. cp-1, their gradients cp .. 2cp-1 (sent, then received in place).
  for (int s = 0; s < cp; ++s) {
    const int src = (me - s + cp) % cp;
    if (s + 1 < cp) {
      if (Status st = send(kvs_[sz(s)].data(), kv, next, kKvTag, sz(s)); !st) return st;
      if (Status st = recv_start(kvs_[sz(s + 1)].data(), kv, prev, kKvTag, sz(s + 1)); !st) return st;
    }
    k_.attention_block_backward(dq_.data(), dkvs_[sz(s)].data(), dout_.data(), q_.data(), kvs_[sz(s)].data(), out_.data(), lse,
                                pos_[sz(me)].data(), pos_[sz(src)].data(), B, T, T, NH, HS, NKV);
    if (Status st = send(dkvs_[sz(s)].data(), kv, next, kDkvTag, sz(cp + s)); !st) return st;
    float* dkv_next = s + 1 < cp ? dkvs_[sz(s + 1)].data() : dkv_home_.data();  // the last comes home
    if (Status st = recv(dkv_next, kv, prev, kDkvTag, s + 1 < cp ? sz(cp + s + 1) : sz(2 * cp)); !st) return st;
    if (Status st = wait_recvs(); !st) return st;
  }
  if (Status st = wait_sends(); !st) return st;
  k_.copy_columns(dqkv, QKV, dq_.data(), Q, BT, Q);
  k_.copy_columns(dqkv.at(sz(Q)), QKV, dkv_home_.data(), KV, BT, KV);
  return Status::OK();
}

// Every rank's two chunks of every sequence between the all-to-all's block order (rank, sample,
// chunk) and sequence order (sample, position): `to_seq` moves blocks into sequence order.
void ContextAttention::reorder(ActOut out, ActIn in, int width, bool to_seq) const {
  const int B = s_.B, T = s_.T, c = T / 2, cp = s_.cp, Tf = T * cp;
  for (int r = 0; r < cp; ++r) {
    for (int b = 0; b < B; ++b) {
      for (int k = 0; k < 2; ++k) {
        const size_t block = (sz(r) * sz(B) * sz(T) + sz(b) * sz(T) + sz(k * c)) * sz(width);
        const size_t seq = (sz(b) * sz(Tf) + sz(chunk_of(r, k) * c)) * sz(width);
        k_.copy_columns(out.at(to_seq ? seq : block), width, in.at(to_seq ? block : seq), width, c, width);
      }
    }
  }
}

void ContextAttention::to_sequence(ActOut seq, ActIn blocks, int width) const { reorder(seq, blocks, width, true); }

void ContextAttention::from_sequence(ActOut blocks, ActIn seq, int width) const { reorder(blocks, seq, width, false); }

// Rank r receives the heads [r NHu, (r + 1) NHu) of q and [r NKVu, (r + 1) NKVu) of k and v from
// every rank, as that rank's (B, T, QKVu) block laid out q | k | v.
Status ContextAttention::ulysses_forward(ActOut out, float* state, ActIn qkv, ActOut full_qkv, ActOut full_out) {
  const int B = s_.B, T = s_.T, NH = s_.NH, NKV = s_.NKV, HS = s_.HS, cp = s_.cp, Tf = T * cp;
  const int NHu = NH / cp, NKVu = NKV / cp, Q = NH * HS, QKV = (NH + 2 * NKV) * HS, Qu = NHu * HS, KVu = NKVu * HS, QKVu = QKV / cp,
            BT = B * T;
  const size_t block = sz(BT) * sz(QKVu);
  for (int r = 0; r < cp; ++r) {
    float* dst = a2a_in_.data() + sz(r) * block;
    k_.copy_columns(dst, QKVu, qkv.at(sz(r * Qu)), QKV, BT, Qu);
    k_.copy_columns(dst + Qu, QKVu, qkv.at(sz(Q + r * KVu)), QKV, BT, KVu);
    k_.copy_columns(dst + Qu + KVu, QKVu, qkv.at(sz(Q + NKV * HS + r * KVu)), QKV, BT, KVu);
  }
  if (Status st = all_to_all_on_device(group_, dev_, a2a_in_.data(), a2a_out_.data(), block); !st) return st;
  to_sequence(full_qkv, a2a_out_.data(), QKVu);
  if (s_.flash) {
    k_.flash_attention_forward(full_out, state, full_qkv, B, Tf, NHu, HS, NKVu);
  } else {
    k_.attention_forward(full_out, state, full_qkv, B, Tf, NHu, HS, NKVu);
  }
  // Back: rank r gets its tokens' rows of this rank's heads.
  const size_t oblock = sz(BT) * sz(Qu);
  from_sequence(a2a_in_.data(), full_out, Qu);
  if (Status st = all_to_all_on_device(group_, dev_, a2a_in_.data(), a2a_out_.data(), oblock); !st) return st;
  for (int r = 0; r < cp; ++r) k_.copy_columns(out.at(sz(r * Qu)), Q, a2a_out_.data() + sz(r) * oblock, Qu, BT, Qu);
  return Status::OK();
}

Status ContextAttention::ulysses_backward(ActOut dqkv, ActIn dout, const float* state, ActIn full_qkv, ActIn full_out) {
  const int B = s_.B, T = s_.T, NH = s_.NH, NKV = s_.NKV, HS = s_.HS, cp = s_.cp, Tf = T * cp;
  const int NHu = NH / cp, NKVu = NKV / cp, Q = NH * HS, QKV = (NH + 2 * NKV) * HS, Qu = NHu * HS, KVu = NKVu * HS, QKVu = QKV / cp,
            BT = B * T;
  const size_t oblock = sz(BT) * sz(Qu), block = sz(BT) * sz(QKVu);
  for (int r = 0; r < cp; ++r) k_.copy_columns(a2a_in_.data() + sz(r) * oblock, Qu, dout.at(sz(r * Qu)), Q, BT, Qu);
  if (Status st = all_to_all_on_device(group_, dev_, a2a_in_.data(), a2a_out_.data(), oblock); !st) return st;
  to_sequence(full_dout_.data(), a2a_out_.data(), Qu);
  if (s_.flash) {
    k_.flash_attention_backward(full_dqkv_.data(), scratch_.data(), full_dout_.data(), full_qkv, full_out, state, B, Tf, NHu, HS, NKVu);
  } else {
    k_.attention_backward(full_dqkv_.data(), scratch_.data(), full_dout_.data(), full_qkv, state, B, Tf, NHu, HS, NKVu);
  }
  from_sequence(a2a_in_.data(), full_dqkv_.data(), QKVu);
  if (Status st = all_to_all_on_device(group_, dev_, a2a_in_.data(), a2a_out_.data(), block); !st) return st;
  for (int r = 0; r < cp; ++r) {
    const float* src = a2a_out_.data() + sz(r) * block;
    k_.copy_columns(dqkv.at(sz(r * Qu)), QKV, src, QKVu, BT, Qu);
    k_.copy_columns(dqkv.at(sz(Q + r * KVu)), QKV, src + Qu, QKVu, BT, KVu);
    k_.copy_columns(dqkv.at(sz(Q + NKV * HS + r * KVu)), QKV, src + Qu + KVu, QKVu, BT, KVu);
  }
  return Status::OK();
}

}  // namespace stagecraft::runtime
