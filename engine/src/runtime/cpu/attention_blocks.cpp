// CPU attention over blocks of a sequence (context parallelism): a query block against a key block
// with each token's position in the whole sequence, the online softmax's merge, and the backward of
// one pair of blocks. Contracts in kernels.h.
//
// Per (batch, head) GEMMs of the whole block pair (single-threaded BLAS, as attention.cpp's) with
// the keys a query does not see (k_pos > q_pos) masked out of the softmax between them. Forward
// spreads the (b, query head) pairs over the pool; backward the (b, K/V head) pairs, each summing
// its group's query heads in head order, so a K/V gradient needs no atomics and results do not
// depend on the thread count.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/cpu_math.h"
#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

template <typename Real>
[[gnu::always_inline]] inline Real dot(const Real* a, const Real* b, int n) {
  Real s = 0;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace

template <typename Real>
void attention_block_forward(Real* out, Real* lse, const Real* q, const Real* kv, const int32_t* q_pos, const int32_t* k_pos, int B,
                             int Tq, int Tk, int NH, int HS, int NKV) {
  assert(out && lse && q && kv && q_pos && k_pos && B >= 0 && Tq >= 0 && Tk >= 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && HS > 0);
  detail::ensure_blas_single_threaded();
  const int group = NH / NKV, qrow = NH * HS, kvrow = 2 * NKV * HS;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const Real ninf = -std::numeric_limits<Real>::infinity();
  const size_t pairs = size_t(B) * NH;
  detail::parallel_for(pairs, 1, detail::threads_for(pairs * size_t(Tq) * size_t(Tk) * size_t(HS) * 4), [&](size_t first, size_t last) {
    std::vector<Real> p(size_t(Tq) * size_t(Tk));  // (Tq, Tk): scores, then the unnormalised probabilities
    for (size_t bh = first; bh < last; ++bh) {
      const int b = int(bh / size_t(NH)), h = int(bh % size_t(NH)), g = h / group;
      const Real* qb = q + size_t(b) * Tq * qrow + size_t(h) * HS;
      const Real* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      const Real* vb = kb + size_t(NKV) * HS;
      Real* ob = out + size_t(b) * Tq * qrow + size_t(h) * HS;
      Real* lb = lse + (size_t(b) * NH + h) * Tq;
      detail::gemm(false, true, Tq, Tk, HS, scale, qb, qrow, kb, kvrow, Real(0), p.data(), Tk);  // S = q k^T / sqrt(HS)
      for (int i = 0; i < Tq; ++i) {
        Real* row = p.data() + size_t(i) * Tk;
        Real mx = ninf;
        for (int j = 0; j < Tk; ++j) {
          if (k_pos[j] > q_pos[i]) row[j] = ninf;
          mx = std::max(mx, row[j]);
        }
        if (mx == ninf) {  // sees no key: out 0, lse -inf
          std::fill(row, row + Tk, Real(0));
          lb[i] = ninf;
          continue;
        }
        Real sum = 0;
        for (int j = 0; j < Tk; ++j) {
          row[j] = row[j] == ninf ? Real(0) : std::exp(row[j] - mx);
          sum += row[j];
        }
        const Real inv = Real(1) / sum;
        for (int j = 0; j < Tk; ++j) row[j] *= inv;
        lb[i] = mx + std::log(sum);
      }
      detail::gemm(false, false, Tq, HS, Tk, Real(1), p.data(), Tk, vb, kvrow, Real(0), ob, qrow);  // out = P v
    }
  });
}

template <typename Real>
void attention_block_merge(Real* acc, Real* acc_lse, const Real* out, const Real* lse, int B, int T, int NH, int HS) {
  assert(acc && acc_lse && out && lse && B >= 0 && T >= 0 && NH > 0 && HS > 0);
  const size_t rows = size_t(B) * NH * T;
  const Real ninf = -std::numeric_limits<Real>::infinity();
  detail::parallel_for(rows, 256, detail::threads_for(rows * size_t(HS) * 4), [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {  // r = (b NH + h) T + t, as lse is laid out
      const size_t b = r / (size_t(NH) * T), h = (r / size_t(T)) % size_t(NH), t = r % size_t(T);
      const Real a = acc_lse[r], l = lse[r];
      if (l == ninf) continue;
      Real* o = acc + (b * T + t) * size_t(NH) * HS + h * HS;
      const Real* x = out + (b * T + t) * size_t(NH) * HS + h * HS;
      if (a == ninf) {
        std::copy(x, x + HS, o);
        acc_lse[r] = l;
        continue;
      }
      const Real m = std::max(a, l);
      const Real merged = m + std::log(std::exp(a - m) + std::exp(l - m));
      const Real wa = std::exp(a - merged), wl = std::exp(l - merged);
      for (int d = 0; d < HS; ++d) o[d] = o[d] * wa + x[d] * wl;
      acc_lse[r] = merged;
    }
  });
}

// Per (b, K/V head g), for each query head h of its group in order, with P = exp(S - lse) over the
// seen keys: dv += P^T dO; dS = P (dO v^T - delta) / sqrt(HS), delta = rowsum(dO O); dq += dS k;
// dk += dS^T q.
template <typename Real>
void attention_block_backward(Real* dq, Real* dkv, const Real* dout, const Real* q, const Real* kv, const Real* out, const Real* lse,
                              const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV) {
  assert(dq && dkv && dout && q && kv && out && lse && q_pos && k_pos && NH > 0 && NKV > 0 && NH % NKV == 0 && HS > 0);
  detail::ensure_blas_single_threaded();
  const int group = NH / NKV, qrow = NH * HS, kvrow = 2 * NKV * HS;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const Real ninf = -std::numeric_limits<Real>::infinity();
  const size_t pairs = size_t(B) * NKV;
  detail::parallel_for(pairs, 1, detail::threads_for(pairs * size_t(group) * size_t(Tq) * size_t(Tk) * size_t(HS) * 8), [&](size_t first, size_t last) {
    std::vector<Real> p(size_t(Tq) * size_t(Tk)), dp(p.size());  // (Tq, Tk): P, then dP and dS
    for (size_t bg = first; bg < last; ++bg) {
      const int b = int(bg / size_t(NKV)), g = int(bg % size_t(NKV));
      const Real* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      const Real* vb = kb + size_t(NKV) * HS;
      Real* dkb = dkv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      Real* dvb = dkb + size_t(NKV) * HS;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const size_t at = size_t(b) * Tq * qrow + size_t(h) * HS;
        const Real* lb = lse + (size_t(b) * NH + h) * Tq;
        detail::gemm(false, true, Tq, Tk, HS, scale, q + at, qrow, kb, kvrow, Real(0), p.data(), Tk);
        for (int i = 0; i < Tq; ++i) {
          Real* row = p.data() + size_t(i) * Tk;
          for (int j = 0; j < Tk; ++j) row[j] = (k_pos[j] > q_pos[i] || lb[i] == ninf) ? Real(0) : std::exp(row[j] - lb[i]);
        }
        detail::gemm(true, false, Tk, HS, Tq, Real(1), p.data(), Tk, dout + at, qrow, Real(1), dvb, kvrow);   // dv += P^T dO
        detail::gemm(false, true, Tq, Tk, HS, Real(1), dout + at, qrow, vb, kvrow, Real(0), dp.data(), Tk);  // dP = dO v^T
        for (int i = 0; i < Tq; ++i) {
          const Real delta = dot(dout + at + size_t(i) * qrow, out + at + size_t(i) * qrow, HS);
          const Real* prow = p.data() + size_t(i) * Tk;
          Real* drow = dp.data() + size_t(i) * Tk;
          for (int j = 0; j < Tk; ++j) drow[j] = prow[j] * (drow[j] - delta) * scale;
        }
        detail::gemm(false, false, Tq, HS, Tk, Real(1), dp.data(), Tk, kb, kvrow, Real(1), dq + at, qrow);   // dq += dS k
        detail::gemm(true, false, Tk, HS, Tq, Real(1), dp.data(), Tk, q + at, qrow, Real(1), dkb, kvrow);   // dk += dS^T q
      }
    }
  });
}

#define STAGECRAFT_INSTANTIATE(Real)                                                                                                  \
  template void attention_block_forward<Real>(Real*, Real*, const Real*, const Real*, const int32_t*, const int32_t*, int, int, int,   \
                                              int, int, int);                                                                         \
  template void attention_block_merge<Real>(Real*, Real*, const Real*, const Real*, int, int, int, int);                              \
  template void attention_block_backward<Real>(Real*, Real*, const Real*, const Real*, const Real*, const Real*, const Real*,          \
                                               const int32_t*, const int32_t*, int, int, int, int, int, int);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
