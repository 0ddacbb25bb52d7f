// CPU attention over blocks of a sequence (context parallelism): a query block against a key block
// with each token's position in the whole sequence, the online softmax's merge, and the backward of
// one pair of blocks. Contracts in kernels.h.
//
// Each query row walks the keys it sees (k_pos <= q_pos), so a key block that lies wholly after a
// query block costs a comparison per pair and no arithmetic. Forward spreads the (b, query head)
// pairs over the pool; backward the (b, K/V head) pairs, each summing its group's query heads in
// head order, so a K/V gradient needs no atomics and results do not depend on the thread count.
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

template <typename Real>
[[gnu::always_inline]] inline void axpy(Real* y, Real a, const Real* x, int n) {
#pragma omp simd
  for (int d = 0; d < n; ++d) y[d] += a * x[d];
}

}  // namespace

template <typename Real>
void attention_block_forward(Real* out, Real* lse, const Real* q, const Real* kv, const int32_t* q_pos, const int32_t* k_pos, int B,
                             int Tq, int Tk, int NH, int HS, int NKV) {
  assert(out && lse && q && kv && q_pos && k_pos && B >= 0 && Tq >= 0 && Tk >= 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && HS > 0);
  const int group = NH / NKV;
  const size_t qrow = size_t(NH) * HS, kvrow = size_t(2) * NKV * HS;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const size_t pairs = size_t(B) * NH;
  detail::parallel_for(pairs, 1, detail::threads_for(pairs * size_t(Tq) * size_t(Tk) * size_t(HS) * 4), [&](size_t first, size_t last) {
    std::vector<Real> s(static_cast<size_t>(Tk));
    for (size_t bh = first; bh < last; ++bh) {
      const int b = int(bh / size_t(NH)), h = int(bh % size_t(NH)), g = h / group;
      const Real* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      const Real* vb = kb + size_t(NKV) * HS;
      for (int i = 0; i < Tq; ++i) {
        const Real* qi = q + (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
        Real* oi = out + (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
        Real* li = lse + (size_t(b) * NH + h) * Tq + i;
        Real mx = -std::numeric_limits<Real>::infinity();
        for (int j = 0; j < Tk; ++j) {
          if (k_pos[j] > q_pos[i]) continue;
          s[size_t(j)] = dot(qi, kb + size_t(j) * kvrow, HS) * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        std::fill(oi, oi + HS, Real(0));
        if (mx == -std::numeric_limits<Real>::infinity()) {
          *li = mx;
          continue;
        }
        Real sum = 0;
        for (int j = 0; j < Tk; ++j) {
          if (k_pos[j] > q_pos[i]) continue;
          const Real p = std::exp(s[size_t(j)] - mx);
          sum += p;
          axpy(oi, p, vb + size_t(j) * kvrow, HS);
        }
        const Real inv = Real(1) / sum;
        for (int d = 0; d < HS; ++d) oi[d] *= inv;
        *li = mx + std::log(sum);
      }
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

template <typename Real>
void attention_block_backward(Real* dq, Real* dkv, const Real* dout, const Real* q, const Real* kv, const Real* out, const Real* lse,
                              const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV) {
  assert(dq && dkv && dout && q && kv && out && lse && q_pos && k_pos && NH > 0 && NKV > 0 && NH % NKV == 0 && HS > 0);
  const int group = NH / NKV;
  const size_t qrow = size_t(NH) * HS, kvrow = size_t(2) * NKV * HS;
  const Real scale = Real(1) / std::sqrt(Real(HS));
  const size_t pairs = size_t(B) * NKV;
  detail::parallel_for(pairs, 1, detail::threads_for(pairs * size_t(group) * size_t(Tq) * size_t(Tk) * size_t(HS) * 8), [&](size_t first, size_t last) {
    for (size_t bg = first; bg < last; ++bg) {
      const int b = int(bg / size_t(NKV)), g = int(bg % size_t(NKV));
      const Real* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      const Real* vb = kb + size_t(NKV) * HS;
      Real* dkb = dkv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      Real* dvb = dkb + size_t(NKV) * HS;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        for (int i = 0; i < Tq; ++i) {
          const size_t at = (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
          const Real l = lse[(size_t(b) * NH + h) * Tq + i];
          if (l == -std::numeric_limits<Real>::infinity()) continue;
          const Real* qi = q + at;
          const Real* doi = dout + at;
          Real* dqi = dq + at;
          const Real delta = dot(doi, out + at, HS);  // sum_d dO O: the softmax's backward term
          for (int j = 0; j < Tk; ++j) {
            if (k_pos[j] > q_pos[i]) continue;
            const Real* kj = kb + size_t(j) * kvrow;
            const Real p = std::exp(dot(qi, kj, HS) * scale - l);
            axpy(dvb + size_t(j) * kvrow, p, doi, HS);
            const Real ds = p * (dot(doi, vb + size_t(j) * kvrow, HS) - delta) * scale;
            axpy(dqi, ds, kj, HS);
            axpy(dkb + size_t(j) * kvrow, ds, qi, HS);
          }
        }
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
