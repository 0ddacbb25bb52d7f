// Ops: a backend's float kernels as one table, so the layer code (gpt_stage.cpp) and the trainer
// are one piece over every backend.
//
// What this is: the kernels of kernels.h, float only, as virtual functions on pointers of one
// device (Device::ops() gives the table of a device). Each function has the contract of the
// kernels.h function of the same name — which gradients accumulate, what may alias, what the
// sizes are — on every backend. CPU: runtime::cpu's kernels. CUDA: runtime::cuda's, launched
// in order on the device's stream, so a call returns before the GPU has finished (the host only
// waits where a result comes back: crossentropy_forward, crossentropy_forward_backward,
// sum_of_squares and sum_of_squares_segments).
//
// Activations (the layernorms', attention's and GELU's outputs, q k v and GELU's input — what the
// GEMMs write and read but the residual stream — and the gradients between a GEMM and the kernel
// beside it: at the logits, at GELU's output and input, at attention's output and at q k v), a
// GEMM's weight and bias, may be fp32 or bf16:
// ActOut and ActIn carry the pointer with its element type, and every backend takes both, the
// math in fp32 either way (bf16.h's rounding where a kernel stores bf16). Float pointers convert
// to them, so fp32 callers pass their buffers as they are. GptStage keeps these activations in
// bf16 with train.precision: bf16 on a GPU (gpt_stage.h); everything else stays fp32.
//
// Token ids and targets are int32 on the same device as the floats. So are the segment lists of
// the *_segments calls, which a backend reads where its kernels run: SegmentTable
// (segment_table.h) lays a list out and copies it to the device once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stagecraft/runtime/bf16.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime {

using cpu::AdamWOptions;
using cpu::Layout;
using cpu::Segment;

// A laid-out segment list (kernels.h: Segment, layout_segments) in the memory of the device whose
// Ops take it, with its element total, which a launch is sized by without reading the list back.
struct SegmentList {
  const Segment* segments = nullptr;  // (count): device memory
  size_t count = 0;
  size_t elements = 0;  // the sum of the segments' counts
  // Every segment's begin, moment and count are multiples of 4 (so is every `first`): a backend
  // may then update four elements at a time. False promises nothing.
  bool quads = false;
};

enum class ActType : uint8_t { kF32, kBf16 };

// Where a kernel writes an activation.
struct ActOut {
  void* data = nullptr;
  ActType type = ActType::kF32;
  ActOut(std::nullptr_t) {}
  ActOut(float* p) : data(p) {}
  ActOut(bf16* p) : data(p), type(ActType::kBf16) {}
  // The activation n elements further on.
  ActOut at(size_t n) const {
    ActOut o = *this;
    if (data) o.data = static_cast<char*>(data) + n * (type == ActType::kBf16 ? sizeof(bf16) : sizeof(float));
    return o;
  }
  float* f32() const { return type == ActType::kF32 ? static_cast<float*>(data) : nullptr; }
  bf16* low() const { return type == ActType::kBf16 ? static_cast<bf16*>(data) : nullptr; }
};

// Where a kernel reads one.
struct ActIn {
  const void* data = nullptr;
  ActType type = ActType::kF32;
  ActIn(std::nullptr_t) {}
  ActIn(const float* p) : data(p) {}
  ActIn(const bf16* p) : data(p), type(ActType::kBf16) {}
  ActIn(ActOut o) : data(o.data), type(o.type) {}
  ActIn at(size_t n) const {
    ActIn o = *this;
    if (data) o.data = static_cast<const char*>(data) + n * (type == ActType::kBf16 ? sizeof(bf16) : sizeof(float));
    return o;
  }
  const float* f32() const { return type == ActType::kF32 ? static_cast<const float*>(data) : nullptr; }
  const bf16* low() const { return type == ActType::kBf16 ? static_cast<const bf16*>(data) : nullptr; }
};

class Ops {
 public:
  virtual ~Ops() = default;

  // out (BT, OC) = inp W + bias, plus residual (BT, OC, fp32) where it is given: the residual
  // stream's add inside the GEMM (CUDA: cuBLASLt's C input with beta 1, where it has an
  // algorithm). With a residual, out is fp32 and may be the residual itself.
  virtual void matmul_forward(ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC,
                              Layout layout = Layout::kInOut, const float* residual = nullptr) const = 0;
  // pre (BT, OC) = inp W + bias, GELU's input, and out (BT, OC) = GELU(pre): matmul_forward then
  // gelu_forward, which is what this does unless a backend fuses them (CUDA: cuBLASLt's GELU
  // epilogue, for bf16 outputs).
  virtual void matmul_gelu_forward(ActOut pre, ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC,
                                   Layout layout = Layout::kInOut) const {
    matmul_forward(pre, inp, weight, bias, BT, C, OC, layout);
    gelu_forward(out, ActIn(pre), size_t(BT) * size_t(OC));
  }
  virtual void matmul_backward(ActOut dinp, float* dweight, float* dbias, ActIn dout, ActIn inp, ActIn weight,
                               int BT, int C, int OC, Layout layout = Layout::kInOut) const = 0;
  virtual void layernorm_forward(ActOut out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N,
                                 int C) const = 0;
  // dinp_low (N, C), where given: dinp after its accumulation, rounded to bf16 — the residual
  // stream's gradient as the next GEMMs back (c_proj's) read it with bf16 activations.
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                                  const float* mean, const float* rstd, int N, int C, bf16* dinp_low = nullptr) const = 0;
  // Attention over qkv (B, T, (NH + 2 NKV) HS) laid out q | k | v: NH query heads, NKV key/value
  // heads (grouped-query attention where NKV < NH; NKV divides NH and query head h reads K/V head
  // h / (NH / NKV)); out (B, T, NH HS). Backward writes dqkv of the same layout, the K/V gradient
  // summed over the query heads that share it. NKV = NH is GPT-2's multi-head attention.
  virtual void attention_forward(ActOut out, float* att, ActIn qkv, int B, int T, int NH, int HS, int NKV) const = 0;
  virtual void attention_backward(ActOut dqkv, float* scratch, ActIn dout, ActIn qkv, const float* att, int B, int T,
                                  int NH, int HS, int NKV) const = 0;
  // Fused causal attention (train.attention: flash), where has_flash_attention(): the same out as
  // attention_forward, but instead of the probabilities (B, NH, T, T) it keeps lse (B, NH, T), each
  // row's log-sum-exp of the scaled scores. Backward takes the forward's out and lse; dqkv is
  // overwritten; scratch (B, NH, T) is clobbered. Only called where has_flash_attention().
  virtual bool has_flash_attention() const { return false; }
  virtual void flash_attention_forward(ActOut /*out*/, float* /*lse*/, ActIn /*qkv*/, int /*B*/, int /*T*/, int /*NH*/,
                                       int /*HS*/, int /*NKV*/) const {}
  virtual void flash_attention_backward(ActOut /*dqkv*/, float* /*scratch*/, ActIn /*dout*/, ActIn /*qkv*/,
                                        ActIn /*out*/, const float* /*lse*/, int /*B*/, int /*T*/, int /*NH*/, int /*HS*/,
                                        int /*NKV*/) const {}
  // The largest head size flash attention takes (0 without it).
  virtual int max_flash_head() const { return 0; }
  // Attention over blocks of a sequence (context parallelism; kernels.h has the contracts): a
  // query block (B, Tq, NH HS) against a key block (B, Tk, 2 NKV HS, k | v), each token at the
  // position q_pos (Tq) / k_pos (Tk) gives it (int32 on the device), causal by those positions;
  // out and lse (B, NH, Tq) of that block alone. merge folds a block's (out, lse) into a running
  // pair by the online softmax; backward adds one block pair's part to dq and dkv (k | v) from the
  // merged forward's out and lse. fp32.
  virtual void attention_block_forward(float* out, float* lse, const float* q, const float* kv, const int32_t* q_pos,
                                       const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV) const = 0;
  virtual void attention_block_merge(float* acc, float* acc_lse, const float* out, const float* lse, int B, int T, int NH,
                                     int HS) const = 0;
  virtual void attention_block_backward(float* dq, float* dkv, const float* dout, const float* q, const float* kv, const float* out,
                                        const float* lse, const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH,
                                        int HS, int NKV) const = 0;
  // dst (rows, ld_dst) columns [0, width) of every row = src (rows, ld_src)'s, each element
  // converted between fp32 and bf16 as the two types say (bf16.h's rounding): packs and unpacks
  // groups of heads of q | k | v, and moves token rows. dst and src must not overlap.
  virtual void copy_columns(ActOut dst, int ld_dst, ActIn src, int ld_src, int rows, int width) const = 0;
  // RMSNorm (Llama): out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps),
  // saved for backward. Backward: dinp (N, C) += (the residual stream, as layernorm_backward's),
  // dweight (C) +=; dinp_low as layernorm_backward's.
  virtual void rmsnorm_forward(ActOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) const = 0;
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                const float* rstd, int N, int C, bf16* dinp_low = nullptr) const = 0;
  // Rotary positions (Hugging Face's rotate-half), in place on qkv (B, T, (NH + 2 NKV) HS): every
  // q head and k head of the token at position t, pairs (i, i + HS/2) for i < HS/2 rotated by the
  // angle t * theta^(-2i/HS); v untouched. Backward rotates dqkv's q and k parts back (by the
  // negative angle), in place. HS even. Token t of a row is at position first + t.
  virtual void rope_forward(ActOut qkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const = 0;
  virtual void rope_backward(ActOut dqkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const = 0;
  // SwiGLU: inp (N, 2F) laid out gate | up (the fused gate and up projections' output);
  // out (N, F) = silu(gate) * up. Backward: dinp (N, 2F) overwritten from dout (N, F); dinp must
  // not alias inp or dout.
  virtual void swiglu_forward(ActOut out, ActIn inp, int N, int F) const = 0;
  virtual void swiglu_backward(ActOut dinp, ActIn inp, ActIn dout, int N, int F) const = 0;
  // Mixture of experts (kernels.h: gather_rows, scatter_add_rows, row_dot), fp32; index (int32)
  // and the weights on the device.
  virtual void gather_rows(float* out, const float* inp, const int32_t* index, const float* weight, int R, int C) const = 0;
  virtual void scatter_add_rows(float* out, const float* inp, const int32_t* index, const float* weight, int N, int K, int C) const = 0;
  virtual void row_dot(float* out, const float* a, const float* b, int R, int C) const = 0;
  virtual void gelu_forward(ActOut out, ActIn inp, size_t N) const = 0;
  virtual void gelu_backward(ActOut dinp, ActIn inp, ActIn dout, size_t N) const = 0;
  virtual void residual_forward(float* out, const float* inp1, const float* inp2, size_t N) const = 0;
  virtual void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N) const = 0;
  // wpe (dwpe) may be nullptr: a model without learned positions (Llama) adds none.
  virtual void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) const = 0;
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) const = 0;
  virtual double crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int N, int V) const = 0;
  virtual void crossentropy_backward(ActOut dlogits, const float* probs, const int32_t* targets, float dloss, int N, int V) const = 0;
  // Both in one call, as the stage's head makes them: losses (N), and dlogits (N, V) = dloss
  // (softmax(logits) - onehot(targets)); returns the mean loss. logits is clobbered, and may be
  // dlogits itself. The default calls the two; CUDA's reads the logits in one pass and keeps no
  // probabilities (element_math.h's online softmax), the difference in rounding within float
  // epsilon of the two calls'.
  virtual double crossentropy_forward_backward(float* losses, ActOut dlogits, float* logits, const int32_t* targets, float dloss, int N,
                                               int V) const {
    const double loss = crossentropy_forward(losses, logits, logits, targets, N, V);
    crossentropy_backward(dlogits, logits, targets, dloss, N, V);
    return loss;
  }
  virtual void adamw_update(float* params, float* m, float* v, const float* grads, size_t N, const AdamWOptions& opt, int64_t step,
                            bool decay, float grad_scale = 1.0f) const = 0;
  virtual double sum_of_squares(const float* x, size_t N) const = 0;
  // The kernels.h functions of these names over a list of ranges of one flat buffer, in one call:
  // the CPU's give the bits of one per-range call per segment; CUDA's are one launch each, the sum
  // deterministic run to run (a fixed grid, its blocks' partial sums added in block order) but
  // rounded otherwise than the per-range sum_of_squares.
  virtual void adamw_update_segments(float* params, float* m, float* v, const float* grads, SegmentList segs, const AdamWOptions& opt,
                                     int64_t step, float grad_scale = 1.0f) const = 0;
  virtual double sum_of_squares_segments(const float* x, SegmentList segs) const = 0;
  virtual void scale(float* x, size_t N, float s) const = 0;
  // out (N) = in rounded to bf16 (bf16.h): the bf16 copy of the weights a stage with bf16
  // activations hands its GEMMs, made once per update.
  virtual void round_to_bf16(bf16* out, const float* in, size_t N) const = 0;
};

// The CPU backend's table (runtime::cpu's kernels on host pointers).
const Ops& cpu_ops();

}  // namespace stagecraft::runtime
