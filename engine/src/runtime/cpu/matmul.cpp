// CPU matmul forward/backward: OpenBLAS GEMMs split across the pool's threads.
//
// Each GEMM is cut into blocks of rows (or of columns, whichever side is longer), two per thread,
// and each block is one single-threaded sgemm/dgemm call: no BLAS thread pool, no
// oversubscription. The bias is copied into a block just before its GEMM (beta = 1), so the output
// is touched while it is in that core's cache. Measured on Zen 3 at B*T = 2048, C = 256: splitting
// one GEMM into 2-4 row blocks costs 0-3% of single-call throughput, into 8-16 up to 10% (B is
// packed again per call), hence two blocks per thread, not more.
#include <cassert>
#include <cstring>

#include "runtime/cpu/cpu_math.h"
#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

using detail::gemm;

constexpr int kChunksPerThread = 2;

// C (M, N) = op(A) op(B) + beta C over threads; when row_init (N) is given, C is first set to it
// row by row and beta is 1 (bias broadcast).
template <typename Real>
void gemm_parallel(bool ta, bool tb, int M, int N, int K, const Real* A, int lda, const Real* B,
                   int ldb, Real beta, Real* C, int ldc, const Real* row_init) {
  if (M <= 0 || N <= 0) return;
  detail::ensure_blas_single_threaded();
  const int nt = detail::threads_for_gemm(M, N, K);
  const bool split_rows = M >= N;
  // kChunksPerThread blocks per thread, handed out one at a time: a thread that the OS preempts
  // (another process on the core) holds up the others for one block at most.
  const int total = split_rows ? M : N;
  size_t grain = size_t(total);
  if (nt > 1) grain = (size_t(total) + nt * kChunksPerThread - 1) / (nt * kChunksPerThread);
  grain = (grain + 15) / 16 * 16;
  detail::parallel_for(size_t(total), grain, nt, [&](size_t begin, size_t end) {
    const Real* a = A;
    const Real* b = B;
    Real* c = C;
    int m = M, n = N, col0 = 0;
    if (split_rows) {
      m = int(end - begin);
      a = ta ? A + begin : A + begin * lda;
      c = C + begin * ldc;
    } else {
      n = int(end - begin);
      col0 = int(begin);
      b = tb ? B + begin * ldb : B + begin;
      c = C + begin;
    }
    Real bt = beta;
    if (row_init != nullptr) {
      for (int i = 0; i < m; ++i) std::memcpy(c + size_t(i) * ldc, row_init + col0, sizeof(Real) * n);
      bt = Real(1);
    }
    gemm(ta, tb, m, n, K, Real(1), a, lda, b, ldb, bt, c, ldc);
  });
}

}  // namespace

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int BT, int C,
                    int OC, Layout layout) {
  // out (BT, OC), inp (BT, C), weight (C, OC) or (OC, C), bias (OC)
  assert(out != nullptr && inp != nullptr && weight != nullptr && BT >= 0 && C > 0 && OC > 0);
  const bool out_in = layout == Layout::kOutIn;
  gemm_parallel(false, out_in, BT, OC, C, inp, C, weight, out_in ? C : OC, Real(0), out, OC, bias);
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int BT, int C, int OC, Layout layout) {
  // dinp (BT, C), dweight as weight, dbias (OC), dout (BT, OC), inp (BT, C)
  assert(dout != nullptr && BT >= 0 && C > 0 && OC > 0);
  const bool out_in = layout == Layout::kOutIn;
  if (dinp != nullptr) {
    assert(weight != nullptr);
    // dinp (BT, C) = dout (BT, OC) @ W^T, with W^T (OC, C)
    gemm_parallel(false, !out_in, BT, C, OC, dout, OC, weight, out_in ? C : OC, Real(0), dinp, C,
                  static_cast<const Real*>(nullptr));
  }
  if (dweight != nullptr) {
    assert(inp != nullptr);
    if (out_in) {  // dW (OC, C) += dout^T (OC, BT) @ inp (BT, C)
      gemm_parallel(true, false, OC, C, BT, dout, OC, inp, C, Real(1), dweight, C,
                    static_cast<const Real*>(nullptr));
    } else {  // dW (C, OC) += inp^T (C, BT) @ dout (BT, OC)
      gemm_parallel(true, false, C, OC, BT, inp, C, dout, OC, Real(1), dweight, OC,
                    static_cast<const Real*>(nullptr));
    }
  }
  if (dbias != nullptr) {
    // dbias (OC) += column sums of dout: a block of 256 columns per piece (1 KB of each row, so the
    // rows stream), four rows per pass over the block.
    detail::parallel_for(size_t(OC), 256, detail::threads_for(size_t(BT) * OC), [&](size_t begin, size_t end) {
      int i = 0;
      for (; i + 4 <= BT; i += 4) {
        const Real* r = dout + size_t(i) * OC;
#pragma omp simd
        for (size_t o = begin; o < end; ++o) dbias[o] += (r[o] + r[o + OC]) + (r[o + 2 * OC] + r[o + 3 * OC]);
      }
      for (; i < BT; ++i) {
        const Real* r = dout + size_t(i) * OC;
#pragma omp simd
        for (size_t o = begin; o < end; ++o) dbias[o] += r[o];
      }
    });
  }
}

#define STAGECRAFT_INSTANTIATE(Real)                                                             \
  template void matmul_forward<Real>(Real*, const Real*, const Real*, const Real*, int, int, int, \
                                     Layout);                                                    \
  template void matmul_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, \
                                      int, int, int, Layout);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
