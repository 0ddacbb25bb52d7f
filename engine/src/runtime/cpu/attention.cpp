// CPU causal self-attention forward/backward: per (batch, head) GEMMs that skip the blocks above
// the diagonal, and a row softmax, with the (b, h) pairs spread over the pool's threads.
//
// Rows and columns are cut in blocks of kBlock; row block i only needs key columns [0, end_i), so
// Q K^T and P V do sum_i end_i / T of the full work: (n + 1) / (2 n) for n blocks, 62.5% at
// T = 256. Each (b, h) is one thread's work and calls single-threaded BLAS.
//
// Grouped-query attention (NKV < NH key/value heads): query head h reads K/V head h / (NH / NKV)
// in place, nothing is copied. Backward runs in two passes so that a K/V head's gradient, a sum
// over the query heads of its group, needs no atomics and no per-head copy: first every (b, h)
// makes its dS (in scratch) and dq; then every (b, K/V head, key block) sums dS^T q and P^T dout
// over the group's heads in head order, so results do not depend on the thread count.
#include <algorithm>
#include <cassert>
#include <cmath>

#include "runtime/cpu/cpu_math.h"
#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

using detail::gemm;

constexpr int kBlock = 64;

int block_end(int t, int T) { return std::min(T, (t / kBlock + 1) * kBlock); }

// Rows [r0, r1) of p (T, T): row t's entries [0, t] = their softmax, the rest of the row 0.
template <typename Real>
[[gnu::always_inline]] inline void causal_softmax_rows(Real* p, int r0, int r1, int T) {
  for (int t = r0; t < r1; ++t) {
    Real* row = p + size_t(t) * T;
    detail::softmax_row(row, row, t + 1);
    std::fill(row + t + 1, row + T, Real(0));
  }
}

// Softmax backward of the causal rows, in place: ds (T, T) holds dP and becomes
// dS = scale P (dP - rowsum(P dP)), zero above the diagonal up to the end of the row's block.
template <typename Real>
[[gnu::always_inline]] inline void causal_softmax_backward(Real* ds, const Real* p, int T, Real scale) {
  for (int t = 0; t < T; ++t) {
    const Real* pr = p + size_t(t) * T;
    Real* dr = ds + size_t(t) * T;
    Real dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; ++j) dot += pr[j] * dr[j];
#pragma omp simd
    for (int j = 0; j <= t; ++j) dr[j] = scale * pr[j] * (dr[j] - dot);
    std::fill(dr + t + 1, dr + block_end(t, T), Real(0));
  }
}

// Float versions in 8-lane AVX2 where the CPU has it (cpu_math.h).
STAGECRAFT_SIMD_CLONES void causal_softmax_rows_f32(float* p, int r0, int r1, int T) {
  causal_softmax_rows(p, r0, r1, T);
}
STAGECRAFT_SIMD_CLONES void causal_softmax_backward_f32(float* ds, const float* p, int T, float scale) {
  causal_softmax_backward(ds, p, T, scale);
}
void softmax_rows(float* p, int r0, int r1, int T) { causal_softmax_rows_f32(p, r0, r1, T); }
void softmax_rows(double* p, int r0, int r1, int T) { causal_softmax_rows(p, r0, r1, T); }
void softmax_backward(float* ds, const float* p, int T, float scale) {
  causal_softmax_backward_f32(ds, p, T, scale);
}
void softmax_backward(double* ds, const double* p, int T, double scale) {
  causal_softmax_backward(ds, p, T, scale);
}

// One (b, h): p (T, T) = causal softmax(scale q k^T); o (T, HS) = p v. q, k, v rows are C3 apart,
// o rows C apart.
template <typename Real>
void head_forward(Real* o, Real* p, const Real* q, const Real* k, const Real* v, int T, int HS,
                  int C, int C3, Real scale) {
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);
    // p[r0:r1, 0:r1] = scale q[r0:r1] k[0:r1]^T
    gemm(false, true, r1 - r0, r1, HS, scale, q + size_t(r0) * C3, C3, k, C3, Real(0),
         p + size_t(r0) * T, T);
    softmax_rows(p, r0, r1, T);
    // o[r0:r1] = p[r0:r1, 0:r1] v[0:r1]
    gemm(false, false, r1 - r0, HS, r1, Real(1), p + size_t(r0) * T, T, v, C3, Real(0),
         o + size_t(r0) * C, C);
  }
}

// One (b, h) backward, first pass: ds (T, T) is scratch (dP, then dS in place, which the second
// pass reads); dq rows C3 apart.
template <typename Real>
void head_backward_scores(Real* dq, Real* ds, const Real* dout, const Real* p, const Real* k, const Real* v, int T,
                          int HS, int C, int C3, Real scale) {
  // dP[r0:r1, 0:r1] = dout[r0:r1] v[0:r1]^T
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);
    gemm(false, true, r1 - r0, r1, HS, Real(1), dout + size_t(r0) * C, C, v, C3, Real(0),
         ds + size_t(r0) * T, T);
  }
  softmax_backward(ds, p, T, scale);
  // dq[r0:r1] = dS[r0:r1, 0:r1] k[0:r1]
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);
    gemm(false, false, r1 - r0, HS, r1, Real(1), ds + size_t(r0) * T, T, k, C3, Real(0),
         dq + size_t(r0) * C3, C3);
  }
}

// Second pass, key rows [r0, r1) of one K/V head: dk[r0:r1] (+)= dS[r0:T, r0:r1]^T q[r0:T] and
// dv[r0:r1] (+)= P[r0:T, r0:r1]^T dout[r0:T], overwritten by the first query head and added to
// by the others. ds, p (T, T) of that query head; q rows C3 apart, dout rows C apart.
template <typename Real>
void key_block_backward(Real* dk, Real* dv, const Real* ds, const Real* p, const Real* q, const Real* dout, int r0, int r1,
                        int T, int HS, int C, int C3, bool first) {
  const Real beta = first ? Real(0) : Real(1);
  gemm(true, false, r1 - r0, HS, T - r0, Real(1), ds + size_t(r0) * T + r0, T, q + size_t(r0) * C3, C3, beta,
       dk + size_t(r0) * C3, C3);
  gemm(true, false, r1 - r0, HS, T - r0, Real(1), p + size_t(r0) * T + r0, T, dout + size_t(r0) * C, C, beta,
       dv + size_t(r0) * C3, C3);
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int NH, int HS, int NKV) {
  // out (B, T, NH*HS), att (B, NH, T, T), qkv (B, T, (NH + 2*NKV)*HS)
  assert(out != nullptr && att != nullptr && qkv != nullptr && B >= 0 && T > 0 && NH > 0 && HS > 0);
  assert(NKV > 0 && NH % NKV == 0);
  detail::ensure_blas_single_threaded();
  const int C = NH * HS, C3 = (NH + 2 * NKV) * HS, group = NH / NKV, pairs = B * NH;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const int nt = std::min(pairs, detail::threads_for_gemm(T, T, HS * pairs));
  detail::parallel_for(size_t(pairs), 1, nt, [&](size_t first, size_t last) {
    for (size_t bh = first; bh < last; ++bh) {
      const size_t b = bh / NH, h = bh % NH, kv = h / group;
      const Real* row = qkv + b * T * C3;  // (T, C3)
      const Real* q = row + h * HS;        // (T, HS) each, row stride C3
      const Real* k = row + C + kv * HS;
      const Real* v = row + C + (NKV + kv) * HS;
      head_forward(out + b * T * C + h * HS, att + bh * T * T, q, k, v, T, HS, C, C3, scale);
    }
  });
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv,
                        const Real* att, int B, int T, int NH, int HS, int NKV) {
  // dqkv (B, T, (NH + 2*NKV)*HS), scratch (B, NH, T, T), dout (B, T, NH*HS),
  // qkv (B, T, (NH + 2*NKV)*HS), att (B, NH, T, T)
  assert(dqkv != nullptr && scratch != nullptr && dout != nullptr && qkv != nullptr && att != nullptr);
  assert(NKV > 0 && NH % NKV == 0);
  detail::ensure_blas_single_threaded();
  const int C = NH * HS, C3 = (NH + 2 * NKV) * HS, group = NH / NKV, pairs = B * NH;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const int nt = std::min(pairs, detail::threads_for_gemm(T, T, HS * pairs));
  // dS of every (b, h) into scratch, and dq.
  detail::parallel_for(size_t(pairs), 1, nt, [&](size_t first, size_t last) {
    for (size_t bh = first; bh < last; ++bh) {
      const size_t b = bh / NH, h = bh % NH, kv = h / group;
      const size_t row = b * T * C3;
      head_backward_scores(dqkv + row + h * HS, scratch + bh * T * T, dout + b * T * C + h * HS, att + bh * T * T,
                           qkv + row + C + kv * HS, qkv + row + C + (NKV + kv) * HS, T, HS, C, C3, scale);
    }
  });
  // dk, dv per (b, K/V head, key block), summed over the group's query heads in order.
  const int blocks = (T + kBlock - 1) / kBlock, pieces = B * NKV * blocks;
  const int nk = std::min(pieces, detail::threads_for_gemm(T, T, HS * pairs));
  detail::parallel_for(size_t(pieces), 1, nk, [&](size_t first, size_t last) {
    for (size_t piece = first; piece < last; ++piece) {
      const size_t bkv = piece / blocks, b = bkv / NKV, kv = bkv % NKV;
      const int r0 = int(piece % blocks) * kBlock, r1 = std::min(T, r0 + kBlock);
      const size_t row = b * T * C3;
      Real* dk = dqkv + row + C + kv * HS;  // (T, HS) each, row stride C3
      Real* dv = dqkv + row + C + (NKV + kv) * HS;
      for (int g = 0; g < group; ++g) {
        const size_t h = kv * group + g, bh = b * NH + h;
        key_block_backward(dk, dv, scratch + bh * T * T, att + bh * T * T, qkv + row + h * HS, dout + b * T * C + h * HS, r0,
                           r1, T, HS, C, C3, g == 0);
      }
    }
  });
}

#define STAGECRAFT_INSTANTIATE(Real)                                                           \
  template void attention_forward<Real>(Real*, Real*, const Real*, int, int, int, int, int);   \
  template void attention_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, \
                                         int, int, int, int, int);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
