// CPU kernels: the layer math of GPT-2 training as forward/backward pairs of free functions.
//
// What this is: the CPU backend's arithmetic (namespace stagecraft::runtime::cpu), one function
// per layer and direction, on raw contiguous row-major buffers the caller owns. What it is not: a
// tensor library or a model. The GPT (which buffers exist, TP/PP/DP) is assembled above this; a
// CUDA backend provides the same functions in runtime::cuda (see device.h for the seam).
//
// Conventions (llm.c style):
//   - Outputs first, then inputs, then sizes. Every buffer carries its shape in a comment.
//   - Letters: B batch, T sequence length, C input channels, OC output channels, NH heads (local to
//     this tensor-parallel rank), HS head size, V vocabulary, N element count.
//   - Real is float (training) or double (gradient checks); both are instantiated.
//   - Backward: PARAMETER gradients accumulate (+=), so micro-batches and the tied embedding sum
//     without copies. INPUT gradients are overwritten (=), except layernorm_backward's dinp and
//     residual_backward, which accumulate because they feed the residual stream (the assembler
//     can keep one dresidual buffer per stage and never copy it). Each contract says which.
//   - Weights are stored like Hugging Face GPT-2 Conv1D: W (C, OC), in x out (Layout::kInOut);
//     the tied LM head uses wte (V, C) as is (Layout::kOutIn).
//   - Nothing here allocates (the thread pool starts its threads on first use); scratch is passed
//     in. Sizes are preconditions (asserted), not Statuses: a wrong size is a programmer error.
//
// Threading: every kernel cuts its work in pieces (row blocks of a GEMM, (batch, head) pairs,
// blocks of rows or elements) and runs them on the calling thread plus up to num_threads() - 1
// workers of the engine's own pool; each GEMM piece calls single-threaded OpenBLAS (its own
// threading is switched off, so two runtimes never fight over the cores). The caller never waits
// for a worker the OS has not scheduled yet, so a busy machine costs throughput, not stalls.
// Kernels are thread-safe: a call made while another thread's call holds the pool runs on its
// own thread alone. Results do not depend on the thread count, except GEMM rounding (a row block
// may be summed in another order) and the float lanes of the machine (SSE2 or AVX2).
#pragma once

#include <cstddef>
#include <cstdint>

#include "stagecraft/runtime/bf16.h"

namespace stagecraft::runtime::cpu {

using runtime::bf16;

// ---- threads ---------------------------------------------------------------------------------

// Threads every kernel uses. Default: OMP_NUM_THREADS when set (the usual knob, though no OpenMP
// is involved), else the cores this process may run on (its affinity mask). set_num_threads(n <= 0)
// restores the default. Process-wide; thread-safe; takes effect at the next kernel call.
void set_num_threads(int n);
int num_threads();

// ---- matmul: out = inp @ W + bias --------------------------------------------------------------

enum class Layout {
  kInOut,  // W (C, OC): Hugging Face GPT-2 Conv1D (c_attn, c_proj, c_fc)
  kOutIn,  // W (OC, C): nn.Linear, and the tied LM head using wte (V, C)
};

// out (B*T, OC) = inp (B*T, C) @ W + bias (OC). bias may be nullptr. BT = B*T rows.
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int BT, int C,
                    int OC, Layout layout = Layout::kInOut);

// dinp (BT, C) = dout @ W^T (overwritten); dweight (as W) += inp^T @ dout (kInOut) or
// dout^T @ inp (kOutIn); dbias (OC) += column sums of dout. Any output may be nullptr to skip it.
template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int BT, int C, int OC, Layout layout = Layout::kInOut);

// ---- layernorm ---------------------------------------------------------------------------------

// out (N, C) = (inp - mean) * rstd * weight + bias, over the last axis, eps 1e-5 (GPT-2).
// Saves mean (N) and rstd (N) for backward.
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C);

// dinp (N, C) += ...; dweight (C) +=; dbias (C) +=. ALL accumulate (dinp is the residual stream).
template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C);

// ---- causal self-attention ---------------------------------------------------------------------

// qkv (B, T, (NH + 2*NKV)*HS) is the QKV projections' output laid out q | k | v: NH query heads,
// then NKV key and NKV value heads, head h of each at h*HS (local heads: a TP rank passes its
// slice, arranged q | k | v of its heads). NKV divides NH; query head h attends with K/V head
// h / (NH / NKV) (grouped-query attention; NKV = NH is GPT-2's multi-head attention).
// out (B, T, NH*HS) = softmax(q k^T / sqrt(HS), causal) v, heads side by side.
// att (B, NH, T, T) saves the probabilities; entries above the diagonal are written 0.
// GEMMs per (b, h) skip the blocks above the diagonal (~40% fewer FLOPs at T = 256).
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int NH, int HS, int NKV);

// dqkv (B, T, (NH + 2*NKV)*HS) overwritten; a K/V head's gradient sums over its query heads.
// scratch (B, NH, T, T): any contents, clobbered.
template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv,
                        const Real* att, int B, int T, int NH, int HS, int NKV);

// Flash attention as the CUDA backend computes it on tensor cores (src/runtime/flash_tiles.h),
// run here one tile after another, so that CPU suites check what the GPU computes: q, k, v in
// bf16, HS a multiple of 16 up to 128; P, dO and dS rounded to bf16 where the tensor cores take
// them, everything else fp32. qkv and out as attention_forward's (NKV key/value heads); lse
// (B, NH, T) each row's log-sum-exp of the scaled scores, instead of the probabilities.
void flash_attention_tiled_forward(float* out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV);

// dqkv (B, T, (NH + 2*NKV)*HS) overwritten, from the forward's out and lse; delta (B, NH, T) scratch.
void flash_attention_tiled_backward(float* dqkv, float* delta, const float* dout, const bf16* qkv, const float* out,
                                    const float* lse, int B, int T, int NH, int HS, int NKV);

// ---- attention over blocks of a sequence (context parallelism) ---------------------------------
// A sequence cut into blocks of tokens, each token with its position in the whole sequence: the
// ranks of a context-parallel group each hold some blocks and pass keys and values around
// (docs/engine.md: Context parallelism). q (B, Tq, NH*HS) is one block's queries, kv
// (B, Tk, 2*NKV*HS) another's keys and values laid out k | v, q_pos (Tq) and k_pos (Tk) the
// tokens' positions. Query i sees key j where k_pos[j] <= q_pos[i] (causal by position); query
// head h reads K/V head h / (NH / NKV) (grouped-query, as attention_forward). Scores are scaled
// by 1 / sqrt(HS).

// out (B, Tq, NH*HS): attention over the keys of this block alone; lse (B, NH, Tq): the log-sum-exp
// of each row's scaled scores over the keys it sees; a row that sees none gets out 0, lse -inf.
template <typename Real>
void attention_block_forward(Real* out, Real* lse, const Real* q, const Real* kv, const int32_t* q_pos, const int32_t* k_pos, int B,
                             int Tq, int Tk, int NH, int HS, int NKV);

// The online softmax's merge of one block's (out, lse) (B, T, NH*HS) and (B, NH, T) into the
// running (acc, acc_lse) of the same queries: acc_lse' = log(exp(acc_lse) + exp(lse)),
// acc' = acc exp(acc_lse - acc_lse') + out exp(lse - acc_lse'). A -inf lse adds nothing.
template <typename Real>
void attention_block_merge(Real* acc, Real* acc_lse, const Real* out, const Real* lse, int B, int T, int NH, int HS);

// Backward of the queries of one block against the keys of another, inside attention over all
// blocks: out (B, Tq, NH*HS) and lse (B, NH, Tq) are the merged forward's (over every key block),
// dout (B, Tq, NH*HS) the gradient at out. dq (B, Tq, NH*HS) += and dkv (B, Tk, 2*NKV*HS) +=
// (laid out dk | dv) this pair's part: summed over the key blocks dq is the queries' gradient,
// and over the query blocks dkv the keys' and values'.
template <typename Real>
void attention_block_backward(Real* dq, Real* dkv, const Real* dout, const Real* q, const Real* kv, const Real* out, const Real* lse,
                              const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV);

// ---- RMSNorm (Llama) ---------------------------------------------------------------------------

// out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean over C of inp^2 + eps), saved.
template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C, float eps);

// dinp (N, C) +=; dweight (C) +=. Both accumulate (dinp is the residual stream).
template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp, const Real* weight,
                      const Real* rstd, int N, int C);

// ---- rotary positions (Hugging Face's rotate-half) ---------------------------------------------

// In place on qkv (B, T, (NH + 2*NKV)*HS): each of the NH q heads and NKV k heads of the token at
// position t: for i < HS/2, with a = t * theta^(-2i/HS), (x_i, x_{i+HS/2}) becomes
// (x_i cos a - x_{i+HS/2} sin a, x_{i+HS/2} cos a + x_i sin a). v is untouched. HS even.
// Token t of a row is at position first + t (a block of a longer sequence: context parallelism).
template <typename Real>
void rope_forward(Real* qkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0);

// In place on dqkv (same layout): the q and k gradients rotated back (angle -a).
template <typename Real>
void rope_backward(Real* dqkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0);

// ---- SwiGLU (Llama's MLP) ----------------------------------------------------------------------

// inp (N, 2F) = gate | up per row; out (N, F) = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
template <typename Real>
void swiglu_forward(Real* out, const Real* inp, int N, int F);

// dinp (N, 2F) overwritten: d gate = dout * up * silu'(gate), d up = dout * silu(gate).
template <typename Real>
void swiglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F);

// ---- GELU (tanh approximation, as GPT-2) -------------------------------------------------------

// out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out may alias inp.
template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t N);

// dinp (N) = dout * gelu'(inp), overwritten. dinp may alias dout.
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t N);

// ---- residual ----------------------------------------------------------------------------------

// out (N) = inp1 + inp2. out may alias either input.
template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, size_t N);

// dinp1 (N) += dout; dinp2 (N) += dout. Either may be nullptr; neither may alias dout.
template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, size_t N);

// ---- mixture of experts: moving token rows -----------------------------------------------------
// The dispatch and combine of a mixture-of-experts layer (runtime/moe_routing.h has the routing).
// A negative index is no row: gather_rows writes zeros for it, scatter_add_rows skips it.

// out (R, C) row r = weight[r] * inp[index[r]] (weight nullptr: 1), overwritten. inp (?, C).
// Dispatch (the tokens' rows in expert order), and the combine weights' part of its backward.
template <typename Real>
void gather_rows(Real* out, const Real* inp, const int32_t* index, const Real* weight, int R, int C);

// out (N, C) row t += the sum over j = 0 .. K-1, in that order, of weight[t K + j] *
// inp[index[t K + j]] (weight nullptr: 1). The scatter-add of rows into their tokens, written by
// destination (each token lists its K source rows), so each output row is one sum in a fixed
// order: deterministic without atomics. inp (?, C) may not alias out.
template <typename Real>
void scatter_add_rows(Real* out, const Real* inp, const int32_t* index, const Real* weight, int N, int K, int C);

// out (R) = the dot product of row r of a (R, C) and of b (R, C), summed in double: the gradient
// of a combine weight (the expert's output against the gradient at its token).
template <typename Real>
void row_dot(Real* out, const Real* a, const Real* b, int R, int C);

// ---- bf16 storage ------------------------------------------------------------------------------

// out (N) = in rounded to bf16 (bf16.h's to_bf16), and back: exact.
void to_bf16(bf16* out, const float* in, size_t N);
void from_bf16(float* out, const bf16* in, size_t N);

// ---- token + position embedding ----------------------------------------------------------------

// out (B, T, C) = wte[tokens[b, t]] + wpe[t]. tokens (B, T) in [0, V); wte (V, C); wpe (>= T, C),
// or nullptr for a model without learned positions (Llama): out = wte[tokens[b, t]].
template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B,
                     int T, int C);

// dwte (V, C) += scatter of dout by token; dwpe (>= T, C) += sum over b. Either may be nullptr.
template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B,
                      int T, int C);

// ---- softmax and cross-entropy -----------------------------------------------------------------

// probs (N, V) = softmax(logits (N, V)) over the last axis. probs may alias logits.
template <typename Real>
void softmax_forward(Real* probs, const Real* logits, int N, int V);

// losses (N) = -log softmax(logits)[target]; probs (N, V) = softmax(logits), which may alias
// logits. targets (N) in [0, V). Returns the mean loss over the N = B*T tokens.
template <typename Real>
double crossentropy_forward(Real* losses, Real* probs, const Real* logits, const int32_t* targets,
                            int N, int V);

// dlogits (N, V) = dloss * (probs - onehot(targets)), overwritten; may alias probs. For the mean
// over this batch's tokens pass dloss = 1 / N (with gradient accumulation over M micro-batches,
// 1 / (N M)).
template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* probs, const int32_t* targets, Real dloss,
                           int N, int V);

// ---- optimizer and gradient norm ---------------------------------------------------------------

// AdamW (Loshchilov & Hutter 2019) with bias correction and decoupled weight decay. Defaults are
// GPT-3's (Brown et al. 2020, appendix B).
struct AdamWOptions {
  float lr = 6e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied only where adamw_update is told decay = true
};

// One step, t = step >= 1, on N parameters (any slice: a ZeRO shard updates its own). With
// g = grad_scale * grads (e.g. a clip factor):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  mh = m / (1 - b1^t);  vh = v / (1 - b2^t)
//   params -= lr (mh / (sqrt(vh) + eps) + (decay ? weight_decay : 0) params)
// params, m, v (N) in/out; grads (N) in.
template <typename Real>
void adamw_update(Real* params, Real* m, Real* v, const Real* grads, size_t N,
                  const AdamWOptions& opt, int64_t step, bool decay, Real grad_scale = Real(1));

// sum of x[i]^2 over N, accumulated in double in fixed-size chunks, so the result is the same for
// every thread count. The global norm is sqrt of the sum of these over all gradient buffers (and,
// sharded, over ranks).
template <typename Real>
double sum_of_squares(const Real* x, size_t N);

// x (N) *= s.
template <typename Real>
void scale(Real* x, size_t N, Real s);

// ---- many ranges of one flat buffer in one call ------------------------------------------------
// The optimizer's view of a stage: its parameters are ~150 tensors of one flat buffer, and a step
// updates all of them and takes the norm of all their gradients. These take a list of ranges
// (segments) so that each is one call (on CUDA one launch) instead of one per tensor.

// A range of a flat buffer for the *_segments kernels: elements [begin, begin + count) of the
// buffers indexed like the parameters (params, grads, x), and [moment, moment + count) of AdamW's
// moments m and v, which may start elsewhere (the trainer's hold its ZeRO shard only, so there
// moment = begin - the shard's begin). `first` places the segment in the concatenation of its
// list, [first, first + count): the sum of the counts before it, which layout_segments sets and
// by which a kernel finds an element's segment (src/runtime/element_math.h: segment_of).
struct Segment {
  size_t begin = 0;
  size_t count = 0;    // 0 is allowed: the segment is skipped
  size_t moment = 0;   // adamw only
  size_t first = 0;    // layout_segments sets it
  bool decay = false;  // adamw: weight decay on this segment
};

// Sets segs[k].first to the sum of the counts of segs[0, k); returns the sum of all n counts.
size_t layout_segments(Segment* segs, size_t n);

// The segment of a laid-out list (n >= 1) that holds element i of its concatenation, i < the
// list's total: the last k with segs[k].first <= i, never an empty segment. `hint` (a segment that
// may hold i) is checked first. The lookup both backends' segment kernels run per piece or per
// element (src/runtime/element_math.h), here for host code and tests.
size_t segment_of(const Segment* segs, size_t n, size_t i, size_t hint = 0);

// adamw_update of every segment (params and grads at begin, m and v at moment), decayed where the
// segment says so: the same bits as one adamw_update call per segment, in one call whose pieces
// span segments. Segments must not overlap in either index space; segs laid out (layout_segments).
template <typename Real>
void adamw_update_segments(Real* params, Real* m, Real* v, const Real* grads, const Segment* segs,
                           size_t nsegs, const AdamWOptions& opt, int64_t step,
                           Real grad_scale = Real(1));

// The sum over the segments, in their order, of sum_of_squares(x + begin, count): the same bits as
// those calls added one by one to 0, in one call whose pieces (every segment's chunks, cut as
// sum_of_squares cuts them) share the threads. Segments may overlap; segs laid out. A NaN or an
// infinity in x makes the result non-finite (the fp16 loss scaler, loss_scaler.h, relies on it).
template <typename Real>
double sum_of_squares_segments(const Real* x, const Segment* segs, size_t nsegs);

}  // namespace stagecraft::runtime::cpu
