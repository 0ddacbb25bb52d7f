// Private helpers of the CPU kernels: single-threaded BLAS calls, GEMM split across threads, how
// many threads a loop deserves, and an exp that the compiler vectorises.
//
// Not part of the engine's API; included by src/runtime/cpu/*.cpp only.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "stagecraft/runtime/kernels.h"

// Compiles a function twice, for x86-64-v3 (AVX2, 8 float lanes) and for the baseline (SSE2, 4
// lanes); the dynamic loader picks one per machine (GCC function multi-versioning). For the
// exp-bound loops only (GELU, softmax): GELU ran 3x faster with it on Zen 3. GEMMs are
// OpenBLAS's, which picks its kernels by itself.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define STAGECRAFT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STAGECRAFT_SIMD_CLONES
#endif

namespace stagecraft::runtime::cpu::detail {

// Switches OpenBLAS's own thread pool off (once per process): we split GEMMs across our own
// threads, and two spinning runtimes on the same cores slow each other down (measured on a 2-core
// box: PyTorch 1.13 with OpenMP and OpenBLAS both at 2 threads took 2x longer a step than with
// its OpenMP at 1).
void ensure_blas_single_threaded();

// Threads for a loop of `work` cheap element operations: one per ~32K elements, so that small
// tensors do not pay a hand-off to the pool (~1-10 us) for nothing; at most num_threads().
inline int threads_for(size_t work) {
  const size_t kGrain = size_t(1) << 15;
  const size_t want = work / kGrain + 1;
  const int nt = num_threads();
  return want < size_t(nt) ? int(want) : nt;
}

// Single-threaded GEMM, row-major: C (M, N) = alpha op(A) op(B) + beta C.
inline void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Threads for a GEMM of M x N x K: one per ~2 MFLOP (below that a hand-off costs more than it saves).
inline int threads_for_gemm(int M, int N, int K) {
  const double flops = 2.0 * M * N * K;
  const int want = int(flops / 2e6) + 1;
  return std::min(want, num_threads());
}

// e^x for float, written so that GCC vectorises the loops that call it (no libm call, no branch):
// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, Cephes' degree-6 polynomial for e^r,
// and 2^n built in the exponent bits. Relative error <= 2 ulp. Valid for x in [-87.3, 88.3] only:
// callers clamp (see exp_fast and sigmoid_fast).
inline float exp_fast_in_range(float x) {
  const float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kShift;
  const float n = t - kShift;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((ni + 127) << 23);
}

// e^x, inputs clamped to [-87.3, 88.3] (e^-87.3 ~ 1e-38 is 0 to our softmaxes).
inline float exp_fast(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.3f ? 88.3f : x;
  return exp_fast_in_range(x);
}

// 1 / (1 + e^-z), with z clamped to [-40, 40] (the error, < 5e-18, is below float resolution
// near 0 and 1 that matters). Why not 88: GCC if-converts the clamps by computing the clamped
// branch for every element, and 1 / (1 + e^88) is a denormal, which costs ~100 cycles per
// operation on x86: GELU ran 3x slower with it.
inline float sigmoid_fast(float z) {
  z = z < -40.0f ? -40.0f : z;
  z = z > 40.0f ? 40.0f : z;
  return 1.0f / (1.0f + exp_fast_in_range(-z));
}

template <typename Real>
inline Real exp_real(Real x) {
  if constexpr (std::is_same_v<Real, float>) {
    return exp_fast(x);
  } else {
    return std::exp(x);
  }
}

template <typename Real>
inline Real sigmoid_real(Real z) {
  if constexpr (std::is_same_v<Real, float>) {
    return sigmoid_fast(z);
  } else {
    return Real(1) / (Real(1) + std::exp(-z));
  }
}

// out[0, n) = softmax(in[0, n)), out may alias in; returns the row's log-sum-exp. The one row
// softmax of the CPU kernels: attention's causal rows and the vocabulary's cross-entropy rows.
// Always inlined, so it vectorises in each caller's SIMD clone (STAGECRAFT_SIMD_CLONES).
template <typename Real>
[[gnu::always_inline]] inline Real softmax_row(Real* out, const Real* in, int n) {
  Real maxv = in[0];
#pragma omp simd reduction(max : maxv)
  for (int j = 0; j < n; ++j) maxv = std::max(maxv, in[j]);
  Real sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const Real e = exp_real(in[j] - maxv);
    out[j] = e;
    sum += e;
  }
  const Real inv = Real(1) / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) out[j] *= inv;
  return std::log(sum) + maxv;
}

}  // namespace stagecraft::runtime::cpu::detail
