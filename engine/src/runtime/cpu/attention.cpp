// CPU causal self-attention forward/backward: per (batch, head) GEMMs that skip the blocks above
// the diagonal, and a row softmax, with the (b, h) pairs spread over the pool's threads.
//
// Rows and columns are cut in blocks of kBlock; row block i only needs key columns [0, end_i), so
// Q K^T and P V do sum_i end_i / T of the full work: (n + 1) / (2 n) for n blocks, 62.5% at
// T = 256. Each (b, h) is one thread's work and calls single-threaded BLAS.
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

// One (b, h) backward: ds (T, T) is scratch (dP, then dS in place); dq, dk, dv rows C3 apart.
template <typename Real>
void head_backward(Real* dq, Real* dk, Real* dv, Real* ds, const Real* dout, const Real* p,
                   const Real* q, const Real* k, const Real* v, int T, int HS, int C, int C3,
                   Real scale) {
  // dP[r0:r1, 0:r1] = dout[r0:r1] v[0:r1]^T
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);
    gemm(false, true, r1 - r0, r1, HS, Real(1), dout + size_t(r0) * C, C, v, C3, Real(0),
         ds + size_t(r0) * T, T);
  }
  softmax_backward(ds, p, T, scale);
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock);
    // dq[r0:r1] = dS[r0:r1, 0:r1] k[0:r1]
    gemm(false, false, r1 - r0, HS, r1, Real(1), ds + size_t(r0) * T, T, k, C3, Real(0),
         dq + size_t(r0) * C3, C3);
    // dk[r0:r1] = dS[r0:T, r0:r1]^T q[r0:T];  dv[r0:r1] = P[r0:T, r0:r1]^T dout[r0:T]
    gemm(true, false, r1 - r0, HS, T - r0, Real(1), ds + size_t(r0) * T + r0, T,
         q + size_t(r0) * C3, C3, Real(0), dk + size_t(r0) * C3, C3);
    gemm(true, false, r1 - r0, HS, T - r0, Real(1), p + size_t(r0) * T + r0, T,
         dout + size_t(r0) * C, C, Real(0), dv + size_t(r0) * C3, C3);
  }
}

}  // namespace

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int NH, int HS) {
  // out (B, T, NH*HS), att (B, NH, T, T), qkv (B, T, 3*NH*HS)
  assert(out != nullptr && att != nullptr && qkv != nullptr && B >= 0 && T > 0 && NH > 0 && HS > 0);
  detail::ensure_blas_single_threaded();
  const int C = NH * HS, C3 = 3 * C, pairs = B * NH;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const int nt = std::min(pairs, detail::threads_for_gemm(T, T, HS * pairs));
  detail::parallel_for(size_t(pairs), 1, nt, [&](size_t first, size_t last) {
    for (size_t bh = first; bh < last; ++bh) {
      const size_t b = bh / NH, h = bh % NH;
      const Real* q = qkv + b * T * C3 + h * HS;  // (T, HS), row stride C3
      head_forward(out + b * T * C + h * HS, att + bh * T * T, q, q + C, q + 2 * C, T, HS, C, C3, scale);
    }
  });
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, const Real* dout, const Real* qkv,
                        const Real* att, int B, int T, int NH, int HS) {
  // dqkv (B, T, 3*NH*HS), scratch (B, NH, T, T), dout (B, T, NH*HS), qkv (B, T, 3*NH*HS),
  // att (B, NH, T, T)
  assert(dqkv != nullptr && scratch != nullptr && dout != nullptr && qkv != nullptr && att != nullptr);
  detail::ensure_blas_single_threaded();
  const int C = NH * HS, C3 = 3 * C, pairs = B * NH;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const int nt = std::min(pairs, detail::threads_for_gemm(T, T, HS * pairs));
  detail::parallel_for(size_t(pairs), 1, nt, [&](size_t first, size_t last) {
    for (size_t bh = first; bh < last; ++bh) {
      const size_t b = bh / NH, h = bh % NH;
      const size_t off = b * T * C3 + h * HS;  // q of head h; k and v C and 2C further
      const Real* q = qkv + off;
      Real* dq = dqkv + off;
      head_backward(dq, dq + C, dq + 2 * C, scratch + bh * T * T, dout + b * T * C + h * HS,
                    att + bh * T * T, q, q + C, q + 2 * C, T, HS, C, C3, scale);
    }
  });
}

#define STAGECRAFT_INSTANTIATE(Real)                                                           \
  template void attention_forward<Real>(Real*, Real*, const Real*, int, int, int, int);        \
  template void attention_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, \
                                         int, int, int, int);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
