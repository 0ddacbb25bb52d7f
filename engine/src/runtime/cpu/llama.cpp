// CPU kernels of the Llama family's layers: RMSNorm, rotary positions (Hugging Face's
// rotate-half) and SwiGLU, forward and backward. Grouped-query attention is attention.cpp's; the
// embedding without learned positions is pointwise.cpp's encoder with wpe = nullptr.
//
// Threading and precision follow pointwise.cpp: a parallel_for (thread_pool.h) over rows or tokens
// with `omp simd` inner loops; float math in float (SiLU's sigmoid by sigmoid_fast, cpu_math.h),
// double in double. No result depends on the thread count: RMSNorm's dweight gives each piece a
// block of columns, its row reductions are compiled once (rmsnorm_rows), the rest is
// element-wise. Rotary angles and their cosines and sines are computed in double for both types
// (element_math.h's rope_angle), once per token and pair, then applied to all its heads.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <type_traits>

#include "runtime/cpu/cpu_math.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/element_math.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

using detail::parallel_for;
using detail::threads_for;

// Pieces of ~16K elements, or the rows that hold that many; column blocks of 64 for dweight, as
// pointwise.cpp cuts them.
constexpr size_t kGrain = 16384;
size_t rows_grain(size_t row_len) { return std::max<size_t>(1, kGrain / std::max<size_t>(row_len, 1)); }
constexpr size_t kColumnGrain = 64;

}  // namespace

// ---- RMSNorm -----------------------------------------------------------------------------------

namespace {

// The row and column loops of RMSNorm, compiled once each (noinline): a parallel_for runs its
// pieces inline on one thread and through the pool on several, and a copy of an `omp simd`
// reduction inlined into each would be free to sum in another order; one copy gives the same bits
// for every thread count.

// Rows [first, last): out = x rstd w, rstd saved.
template <typename Real>
[[gnu::noinline]] void rmsnorm_rows(Real* out, Real* rstd, const Real* inp, const Real* weight, size_t first, size_t last, int C,
                                    float eps) {
  for (size_t i = first; i < last; ++i) {
    const Real* x = inp + i * C;
    Real* o = out + i * C;
    Real ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const Real r = element::rmsnorm_rstd(ss / C, eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
    rstd[i] = r;
  }
}

// Rows [first, last) of dinp +=: with norm = x rstd and dn = dy w, dx = rstd (dn - norm mean(dn norm)).
template <typename Real>
[[gnu::noinline]] void rmsnorm_dinp_rows(Real* dinp, const Real* dout, const Real* inp, const Real* weight, const Real* rstd,
                                         size_t first, size_t last, int C) {
  for (size_t i = first; i < last; ++i) {
    const Real* x = inp + i * C;
    const Real* dy = dout + i * C;
    Real* dx = dinp + i * C;
    const Real r = rstd[i];
    Real b = 0;
#pragma omp simd reduction(+ : b)
    for (int c = 0; c < C; ++c) b += dy[c] * weight[c] * x[c] * r;
    b /= C;
#pragma omp simd
    for (int c = 0; c < C; ++c) dx[c] += element::rmsnorm_dx(dy[c], weight[c], x[c] * r, r, b);
  }
}

// Columns [c0, c1) of dweight += dy norm, summed over the N rows in order.
template <typename Real>
[[gnu::noinline]] void rmsnorm_dweight_columns(Real* dweight, const Real* dout, const Real* inp, const Real* rstd, size_t c0, size_t c1,
                                               int N, int C) {
  for (int i = 0; i < N; ++i) {
    const Real* x = inp + size_t(i) * C;
    const Real* dy = dout + size_t(i) * C;
    const Real r = rstd[i];
#pragma omp simd
    for (size_t c = c0; c < c1; ++c) dweight[c] += dy[c] * x[c] * r;
  }
}

}  // namespace

template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C, float eps) {
  // out (N, C), rstd (N), inp (N, C), weight (C)
  assert(out && rstd && inp && weight && N >= 0 && C > 0);
  parallel_for(size_t(N), rows_grain(C), threads_for(size_t(N) * C), [&](size_t first, size_t last) {
    rmsnorm_rows(out, rstd, inp, weight, first, last, C, eps);
  });
}

template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp, const Real* weight,
                      const Real* rstd, int N, int C) {
  // dinp (N, C), dweight (C), dout (N, C), inp (N, C), weight (C), rstd (N)
  assert(dout && inp && weight && rstd && N >= 0 && C > 0);
  const int nt = threads_for(size_t(N) * C);
  if (dinp != nullptr) {
    parallel_for(size_t(N), rows_grain(C), nt, [&](size_t first, size_t last) {
      rmsnorm_dinp_rows(dinp, dout, inp, weight, rstd, first, last, C);
    });
  }
  if (dweight != nullptr) {
    parallel_for(size_t(C), kColumnGrain, nt, [&](size_t c0, size_t c1) {
      rmsnorm_dweight_columns(dweight, dout, inp, rstd, c0, c1, N, C);
    });
  }
}

// ---- rotary positions ----------------------------------------------------------------------------

namespace {

// Pairs whose cosines and sines a token holds at once (on the stack), applied to every head
// before the next block of pairs.
constexpr int kPairBlock = 64;

// Rotates the q and k heads of every token of qkv (B, T, (NH + 2*NKV)*HS) by sign x its angles.
template <typename Real>
void rope_apply(Real* qkv, int B, int T, int NH, int NKV, int HS, float theta, Real sign, int pos0) {
  assert(qkv && B >= 0 && T > 0 && NH > 0 && NKV > 0 && HS > 0 && HS % 2 == 0);
  const int half = HS / 2, heads = NH + NKV;  // q heads then k heads: contiguous at the row's start
  const size_t row = size_t(NH + 2 * NKV) * HS, rows = size_t(B) * T;
  parallel_for(rows, rows_grain(size_t(heads) * HS), threads_for(rows * heads * HS * 4), [&](size_t first, size_t last) {
    Real cs[kPairBlock], sn[kPairBlock];
    for (size_t bt = first; bt < last; ++bt) {
      const int t = pos0 + int(bt % size_t(T));
      Real* x = qkv + bt * row;
      for (int i0 = 0; i0 < half; i0 += kPairBlock) {
        const int n = std::min(kPairBlock, half - i0);
        for (int i = 0; i < n; ++i) {
          const double a = element::rope_angle(t, i0 + i, HS, theta);
          cs[i] = Real(std::cos(a));
          sn[i] = sign * Real(std::sin(a));
        }
        for (int h = 0; h < heads; ++h) {
          Real* lo = x + size_t(h) * HS + i0;  // x_i
          Real* hi = lo + half;                // x_{i+HS/2}
#pragma omp simd
          for (int i = 0; i < n; ++i) element::rope_rotate(lo[i], hi[i], cs[i], sn[i]);
        }
      }
    }
  });
}

}  // namespace

template <typename Real>
void rope_forward(Real* qkv, int B, int T, int NH, int NKV, int HS, float theta, int first) {
  // qkv (B, T, (NH + 2*NKV)*HS), in place
  rope_apply(qkv, B, T, NH, NKV, HS, theta, Real(1), first);
}

template <typename Real>
void rope_backward(Real* dqkv, int B, int T, int NH, int NKV, int HS, float theta, int first) {
  // dqkv (B, T, (NH + 2*NKV)*HS), in place: the transpose of a rotation is the rotation back
  rope_apply(dqkv, B, T, NH, NKV, HS, theta, Real(-1), first);
}

// ---- SwiGLU --------------------------------------------------------------------------------------

namespace {

// Rows [0, rows) of inp (rows, 2F) = gate | up into out (rows, F).
template <typename Real>
[[gnu::always_inline]] inline void swiglu_forward_rows(Real* out, const Real* inp, size_t rows, int F) {
  for (size_t r = 0; r < rows; ++r) {
    const Real* g = inp + r * 2 * F;
    const Real* u = g + F;
    Real* o = out + r * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) o[j] = element::silu_value(g[j], detail::sigmoid_real(g[j])) * u[j];
  }
}

template <typename Real>
[[gnu::always_inline]] inline void swiglu_backward_rows(Real* dinp, const Real* inp, const Real* dout, size_t rows, int F) {
  for (size_t r = 0; r < rows; ++r) {
    const Real* g = inp + r * 2 * F;
    const Real* u = g + F;
    const Real* dy = dout + r * F;
    Real* dg = dinp + r * 2 * F;
    Real* du = dg + F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const Real s = detail::sigmoid_real(g[j]);
      dg[j] = dy[j] * u[j] * element::silu_slope(g[j], s);
      du[j] = dy[j] * element::silu_value(g[j], s);
    }
  }
}

// The float loops in 8-lane AVX2 where the CPU has it (see STAGECRAFT_SIMD_CLONES).
STAGECRAFT_SIMD_CLONES void swiglu_forward_f32(float* out, const float* inp, size_t rows, int F) {
  swiglu_forward_rows(out, inp, rows, F);
}
STAGECRAFT_SIMD_CLONES void swiglu_backward_f32(float* dinp, const float* inp, const float* dout, size_t rows, int F) {
  swiglu_backward_rows(dinp, inp, dout, rows, F);
}

}  // namespace

template <typename Real>
void swiglu_forward(Real* out, const Real* inp, int N, int F) {
  // out (N, F), inp (N, 2F)
  assert(out && inp && N >= 0 && F > 0);
  parallel_for(size_t(N), rows_grain(F), threads_for(size_t(N) * F * 8), [&](size_t first, size_t last) {
    if constexpr (std::is_same_v<Real, float>) {
      swiglu_forward_f32(out + first * F, inp + first * 2 * F, last - first, F);
    } else {
      swiglu_forward_rows(out + first * F, inp + first * 2 * F, last - first, F);
    }
  });
}

template <typename Real>
void swiglu_backward(Real* dinp, const Real* inp, const Real* dout, int N, int F) {
  // dinp (N, 2F), inp (N, 2F), dout (N, F)
  assert(dinp && inp && dout && N >= 0 && F > 0);
  parallel_for(size_t(N), rows_grain(F), threads_for(size_t(N) * F * 8), [&](size_t first, size_t last) {
    if constexpr (std::is_same_v<Real, float>) {
      swiglu_backward_f32(dinp + first * 2 * F, inp + first * 2 * F, dout + first * F, last - first, F);
    } else {
      swiglu_backward_rows(dinp + first * 2 * F, inp + first * 2 * F, dout + first * F, last - first, F);
    }
  });
}

#define STAGECRAFT_INSTANTIATE(Real)                                                                          \
  template void rmsnorm_forward<Real>(Real*, Real*, const Real*, const Real*, int, int, float);              \
  template void rmsnorm_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, const Real*, int, \
                                       int);                                                                 \
  template void rope_forward<Real>(Real*, int, int, int, int, int, float, int);                              \
  template void rope_backward<Real>(Real*, int, int, int, int, int, float, int);                             \
  template void swiglu_forward<Real>(Real*, const Real*, int, int);                                          \
  template void swiglu_backward<Real>(Real*, const Real*, const Real*, int, int);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
