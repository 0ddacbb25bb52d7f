// The per-element math of the layers, written once for both backends: the CPU kernels
// (src/runtime/cpu/pointwise.cpp) call these in their vectorised loops and the CUDA kernels
// (src/runtime/cuda/cuda_kernels.cu) call them per thread, so the CPU suites test the formulas
// the GPU runs. So is the index arithmetic they share: which segment of a list holds an element,
// and the chains of rows by which the GPU adds the embeddings' token gradient in the CPU's order;
// and the online softmax's running statistics, which the GPU's cross-entropy keeps (the CPU suites
// check them against the CPU's two passes). Only the exponential differs per backend (the CPU's
// vectorisable exp_fast, the GPU's expf), so the functions here take what depends on it (a
// sigmoid, or the exponential itself) as an argument.
//
// Not part of the engine's API; included by src/runtime/cpu and src/runtime/cuda only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "stagecraft/runtime/bf16.h"
#include "stagecraft/runtime/kernels.h"

#if defined(__CUDACC__)
#define STAGECRAFT_HD __host__ __device__ __forceinline__
#else
#define STAGECRAFT_HD inline
#endif

namespace stagecraft::runtime::element {

// An activation element in fp32 or bf16 storage (ops.h's ActIn, ActOut): kernels read and write
// through these, computing in fp32 either way.
STAGECRAFT_HD float load(const float* p) { return *p; }
STAGECRAFT_HD float load(const bf16* p) { return to_float(*p); }
STAGECRAFT_HD void store(float* p, float v) { *p = v; }
STAGECRAFT_HD void store(bf16* p, float v) { *p = to_bf16(v); }

inline constexpr double kLayerNormEps = 1e-5;  // GPT-2's layer_norm_epsilon

// GELU (tanh approximation) written with the logistic function: 0.5 (1 + tanh(u)) = sigmoid(2 u),
// u = sqrt(2 / pi) (x + 0.044715 x^3).
inline constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluA = 0.044715;

template <typename Real>
STAGECRAFT_HD Real gelu_arg(Real x) {  // 2 u: the argument of the sigmoid
  return Real(2) * (Real(kGeluK) * (x + Real(kGeluA) * x * x * x));
}

// GELU(x), given s = sigmoid(gelu_arg(x)).
template <typename Real>
STAGECRAFT_HD Real gelu_value(Real x, Real s) {
  return x * s;
}

// dGELU/dx, given s = sigmoid(gelu_arg(x)): d/dx [x s(2u)] = s + 2 x s (1 - s) u'.
template <typename Real>
STAGECRAFT_HD Real gelu_slope(Real x, Real s) {
  const Real du = Real(kGeluK) * (Real(1) + Real(3) * Real(kGeluA) * x * x);
  return s + Real(2) * x * s * (Real(1) - s) * du;
}

template <typename Real>
STAGECRAFT_HD Real square_root(Real x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// 1 / sqrt(variance + eps): layernorm's rstd from a row's variance.
template <typename Real>
STAGECRAFT_HD Real layernorm_rstd(Real variance) {
  return Real(1) / square_root(variance + Real(kLayerNormEps));
}

// Layernorm's input gradient for one element: with n = (x - mean) rstd and dn = dy w,
//   dx = rstd (dn - mean(dn) - n mean(dn n)); mean_dn and mean_dn_n are the row's means.
template <typename Real>
STAGECRAFT_HD Real layernorm_dx(Real dy, Real w, Real norm, Real rstd, Real mean_dn, Real mean_dn_n) {
  return rstd * (dy * w - mean_dn - norm * mean_dn_n);
}

// ---- Llama's layers ----

// 1 / sqrt(mean square + eps): RMSNorm's rstd from a row's mean of x^2.
template <typename Real>
STAGECRAFT_HD Real rmsnorm_rstd(Real mean_square, float eps) {
  return Real(1) / square_root(mean_square + Real(eps));
}

// RMSNorm's input gradient for one element: with n = x rstd and dn = dy w,
//   dx = rstd (dn - n mean(dn n)); mean_dn_n is the row's mean of dn n.
template <typename Real>
STAGECRAFT_HD Real rmsnorm_dx(Real dy, Real w, Real norm, Real rstd, Real mean_dn_n) {
  return rstd * (dy * w - norm * mean_dn_n);
}

// SiLU(x) = x sigmoid(x), given s = sigmoid(x), and its slope s (1 + x (1 - s)).
template <typename Real>
STAGECRAFT_HD Real silu_value(Real x, Real s) {
  return x * s;
}
template <typename Real>
STAGECRAFT_HD Real silu_slope(Real x, Real s) {
  return s * (Real(1) + x * (Real(1) - s));
}

// The rotary angle of pair (i, i + HS/2) at position t: t theta^(-2i/HS), in double (at t = 8192
// a float angle would be off by ~5e-4 rad).
STAGECRAFT_HD double rope_angle(int t, int i, int HS, float theta) {
  return double(t) * pow(double(theta), -2.0 * double(i) / double(HS));
}

// Rotates the pair (x0, x1) = (x_i, x_{i+HS/2}) by the angle whose cosine and sine are c, s.
template <typename Real>
STAGECRAFT_HD void rope_rotate(Real& x0, Real& x1, Real c, Real s) {
  const Real a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = b * c + a * s;
}

// One AdamW step's constants (kernels.h's adamw_update documents the update).
template <typename Real>
struct AdamWStep {
  Real lr, beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale;  // bias_k = 1 - beta_k^t
};

// The AdamW update of one parameter p with moments m, v and raw gradient g.
template <typename Real>
STAGECRAFT_HD void adamw(Real& p, Real& m, Real& v, Real g, const AdamWStep<Real>& s) {
  g *= s.grad_scale;
  const Real mi = s.beta1 * m + (Real(1) - s.beta1) * g;
  const Real vi = s.beta2 * v + (Real(1) - s.beta2) * g * g;
  m = mi;
  v = vi;
  p -= s.lr * ((mi / s.bias1) / (square_root(vi / s.bias2) + s.eps) + s.weight_decay * p);
}

// The constants of step t = step >= 1 (host code: both backends make them before their loop or
// launch), with opt.weight_decay where `decay` and 0 elsewhere.
template <typename Real>
inline AdamWStep<Real> adamw_step(const cpu::AdamWOptions& opt, int64_t step, bool decay, Real grad_scale) {
  return {Real(opt.lr),
          Real(opt.beta1),
          Real(opt.beta2),
          Real(opt.eps),
          decay ? Real(opt.weight_decay) : Real(0),
          Real(1 - std::pow(double(opt.beta1), double(step))),
          Real(1 - std::pow(double(opt.beta2), double(step))),
          grad_scale};
}

// Cross-entropy over a row read once (the CUDA backend's crossentropy_forward_backward): the
// online softmax (Milakov and Gimelshein, 2018) keeps a running maximum m of the values seen and
// the sum s of exp(x - m) over them, rescaled where m grows. Runs over parts of a row merge into
// the run of the whole, in any grouping, up to rounding; the row's log-sum-exp is then m + log s
// and its probabilities exp(x - m) / s. `exp` is the backend's exponential (exp(-inf) must be 0).
// -inf values add nothing; a NaN value makes s NaN, so that an overflow upstream stays seen.
// Worked example: {0, ln 3} from the empty run {-inf, 0}: {0, 1}, then {ln 3, 1 * 1/3 + 1} = {ln 3,
// 4/3}: log-sum-exp ln 3 + ln(4/3) = ln 4, as log(1 + 3).
struct SoftmaxRun {
  float m;  // -inf while empty
  float s;
};
STAGECRAFT_HD SoftmaxRun softmax_empty() { return {-INFINITY, 0.0f}; }

template <typename Exp>
STAGECRAFT_HD void softmax_add(SoftmaxRun& r, float x, Exp exp) {
  if (x > r.m) {
    r.s = r.s * exp(r.m - x) + 1.0f;  // exp(-inf) = 0 on the run's first value
    r.m = x;
  } else if (x != -INFINITY) {
    r.s += exp(x - r.m);
  }
}

template <typename Exp>
STAGECRAFT_HD SoftmaxRun softmax_merge(SoftmaxRun a, SoftmaxRun b, Exp exp) {
  const float m = b.m > a.m ? b.m : a.m;
  if (m == -INFINITY) return a;  // both empty
  return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
}

// The segment of a laid-out list (kernels.h's Segment; layout_segments) that holds element i of
// its concatenation, for i < the list's element total: the last k with segs[k].first <= i. Empty
// segments share their `first` with the segment after them, so they are never the answer.
// `hint` (the caller's previous answer, so a thread walking a large segment searches once) is
// returned at once when it holds i; otherwise a binary search, O(log n). n >= 1.
// Worked example: counts {3, 0, 2, 0} lay out as first {0, 3, 3, 5}; i = 0..2 -> 0, i = 3, 4 -> 2.
STAGECRAFT_HD size_t segment_of(const cpu::Segment* segs, size_t n, size_t i, size_t hint = 0) {
  if (hint < n && segs[hint].first <= i && i - segs[hint].first < segs[hint].count) return hint;
  size_t lo = 0, hi = n;  // segs[lo].first <= i < segs[hi].first (segs[n].first read as infinite)
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (segs[mid].first <= i) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The embeddings' token gradient without atomics (the CUDA backend's encoder_backward): dwte's row
// of a token gets dout's rows of that token added in ascending order onto it, as the CPU's
// encoder_backward adds them, so both give the same bits. A links pass gives every row a link: the
// next row with its token (or none), and whether an earlier row has it; then the thread of a
// token's first row walks the chain.
// Worked example: tokens {4, 9, 4, 4} link as {next 2, next none, next 3 + earlier, none + earlier};
// the thread of row 0 adds rows 0, 2, 3 of dout onto dwte's row 4, row 1's adds row 1 onto row 9.
inline constexpr int32_t kLinkEarlier = 1 << 30;   // an earlier row has the token
inline constexpr int32_t kLinkNone = kLinkEarlier - 1;  // no later row has it

// Scans the tokens of rows j0 .. j0 + n - 1 (chunk[0 .. n)) for row's token t: the first later row
// goes to next, where next < 0 so far; earlier is set where an earlier row has t. Called over
// consecutive chunks from row 0 on, it gives the link's two parts.
STAGECRAFT_HD void scan_token_links(const int32_t* chunk, int n, int j0, int row, int32_t t, int& next, bool& earlier) {
  for (int k = 0; k < n; ++k) {
    if (chunk[k] != t) continue;
    const int j = j0 + k;
    if (j < row) earlier = true;
    if (j > row && next < 0) next = j;
  }
}
STAGECRAFT_HD int32_t token_link(int next, bool earlier) { return (next < 0 ? kLinkNone : next) | (earlier ? kLinkEarlier : 0); }
STAGECRAFT_HD bool link_has_earlier(int32_t link) { return (link & kLinkEarlier) != 0; }
STAGECRAFT_HD int link_next(int32_t link) { return (link & kLinkNone) == kLinkNone ? -1 : (link & kLinkNone); }

// w (dwte's element c of the token of `row`, a chain's first row) plus column c of the chain's rows
// of dout (C columns), added in order.
STAGECRAFT_HD float token_chain_sum(float w, const float* dout, const int32_t* links, int C, int row, int c) {
  for (int j = row; j >= 0; j = link_next(links[j])) w += dout[size_t(j) * C + c];
  return w;
}

}  // namespace stagecraft::runtime::element
