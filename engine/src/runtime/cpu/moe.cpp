// CPU kernels of the mixture-of-experts layer that move token rows: the dispatch's gather, the
// combine's weighted sum of rows into their tokens, and the row-wise dot product that gives the
// combine weights' gradient. The router's softmax, top-k and bookkeeping are host code
// (runtime/moe_routing.h); the experts' GEMMs and SwiGLU are the dense kernels over row ranges.
//
// Each loop is a parallel_for over rows; every output row is written by one piece, its sum taken
// in a fixed order, so no result depends on the thread count.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "runtime/cpu/cpu_math.h"
#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

using detail::parallel_for;
using detail::threads_for;

constexpr size_t kGrain = 16384;
size_t rows_grain(int row_len) { return std::max<size_t>(1, kGrain / size_t(std::max(row_len, 1))); }

}  // namespace

template <typename Real>
void gather_rows(Real* out, const Real* inp, const int32_t* index, const Real* weight, int R, int C) {
  // out (R, C), inp (?, C), index (R), weight (R) or nullptr
  assert(out && index && R >= 0 && C > 0);
  parallel_for(size_t(R), rows_grain(C), threads_for(size_t(R) * C), [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      Real* o = out + r * C;
      const int32_t i = index[r];
      if (i < 0) {
        std::fill(o, o + C, Real(0));
        continue;
      }
      const Real* x = inp + size_t(i) * C;
      const Real w = weight ? weight[r] : Real(1);
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = w * x[c];
    }
  });
}

template <typename Real>
void scatter_add_rows(Real* out, const Real* inp, const int32_t* index, const Real* weight, int N, int K, int C) {
  // out (N, C), inp (?, C), index (N, K), weight (N, K) or nullptr
  assert(out && index && N >= 0 && K > 0 && C > 0);
  parallel_for(size_t(N), rows_grain(C * K), threads_for(size_t(N) * C * K), [&](size_t first, size_t last) {
    for (size_t t = first; t < last; ++t) {
      Real* o = out + t * C;
      for (int j = 0; j < K; ++j) {
        const size_t s = t * K + size_t(j);
        const int32_t i = index[s];
        if (i < 0) continue;
        const Real* x = inp + size_t(i) * C;
        const Real w = weight ? weight[s] : Real(1);
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] += w * x[c];
      }
    }
  });
}

template <typename Real>
void row_dot(Real* out, const Real* a, const Real* b, int R, int C) {
  // out (R), a (R, C), b (R, C)
  assert(out && R >= 0 && C > 0);
  parallel_for(size_t(R), rows_grain(C), threads_for(size_t(R) * C), [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      const Real* x = a + r * C;
      const Real* y = b + r * C;
      double s = 0;
      for (int c = 0; c < C; ++c) s += double(x[c]) * double(y[c]);
      out[r] = Real(s);
    }
  });
}

#define STAGECRAFT_INSTANTIATE(Real)                                                                        \
  template void gather_rows<Real>(Real*, const Real*, const int32_t*, const Real*, int, int);              \
  template void scatter_add_rows<Real>(Real*, const Real*, const int32_t*, const Real*, int, int, int);    \
  template void row_dot<Real>(Real*, const Real*, const Real*, int, int);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
