// CPU attention over blocks of a sequence (context parallelism): a query block against a key block
// with each token's position in the whole sequence, the online softmax's merge, and the backward of
// one pair of blocks. Contracts in kernels.h.
//
// Per (batch, head) GEMMs (single-threaded BLAS, as attention.cpp's) over the pairs of runs of
// consecutive positions (a context-parallel block is two chunks) in which some query sees some
// key, the keys a query does not see (k_pos > q_pos) masked out of the softmax between them; a
// pair of runs whose keys all come after its queries costs nothing. Forward
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

// A run of consecutive positions: tokens [first, first + count) of a block.
struct Run {
  int first = 0, count = 0;
};

std::vector<Run> runs_of(const int32_t* pos, int n) {
  std::vector<Run> runs;
  for (int i = 0; i < n; ++i) {
    if (runs.empty() || pos[i] != pos[i - 1] + 1) runs.push_back({i, 0});
    ++runs.back().count;
  }
  return runs;
}

// The (query run, key run) pairs in which some query sees some key: the rest of the block pair is
// masked whole and costs no GEMM (context parallelism's chunks come as such runs).
struct RunPair {
  Run q, k;
};

std::vector<RunPair> seen_pairs(const int32_t* q_pos, int Tq, const int32_t* k_pos, int Tk) {
  std::vector<RunPair> pairs;
  for (const Run& qr : runs_of(q_pos, Tq)) {
    for (const Run& kr : runs_of(k_pos, Tk)) {
      if (k_pos[kr.first] <= q_pos[qr.first + qr.count - 1]) pairs.push_back({qr, kr});
    }
  }
  return pairs;
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
  const std::vector<RunPair> seen = seen_pairs(q_pos, Tq, k_pos, Tk);
  const size_t pairs = size_t(B) * NH;
  detail::parallel_for(pairs, 1, detail::threads_for(pairs * size_t(Tq) * size_t(Tk) * size_t(HS) * 4), [&](size_t first, size_t last) {
    std::vector<Real> p(size_t(Tq) * size_t(Tk));  // (Tq, Tk): scores, then the probabilities
    for (size_t bh = first; bh < last; ++bh) {
      const int b = int(bh / size_t(NH)), h = int(bh % size_t(NH)), g = h / group;
      const Real* qb = q + size_t(b) * Tq * qrow + size_t(h) * HS;
      const Real* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
      const Real* vb = kb + size_t(NKV) * HS;
      Real* ob = out + size_t(b) * Tq * qrow + size_t(h) * HS;
      Real* lb = lse + (size_t(b) * NH + h) * Tq;
      for (const RunPair& r : seen) {  // S = q k^T / sqrt(HS) where some key is seen
        detail::gemm(false, true, r.q.count, r.k.count, HS, scale, qb + size_t(r.q.first) * qrow, qrow, kb + size_t(r.k.first) * kvrow, kvrow,
                     Real(0), p.data() + size_t(r.q.first) * Tk + r.k.first, Tk);
      }
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
      for (int i = 0; i < Tq; ++i) std::fill(ob + size_t(i) * qrow, ob + size_t(i) * qrow + HS, Real(0));
      for (const RunPair& r : seen) {  // out = P v
        detail::gemm(false, false, r.q.count, HS, r.k.count, Real(1), p.data() + size_t(r.q.first) * Tk + r.k.first, Tk,
                     vb + size_t(r.k.first) * kvrow, kvrow, Real(1), ob + size_t(r.q.first) * qrow, qrow);
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
  const std::vector<RunPair> seen = seen_pairs(q_pos, Tq, k_pos, Tk);
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
        // Each GEMM over the run pairs where some key is seen; the masked entries are 0 in P and dS.
        const Real* qh = q + at;
        const Real* doh = dout + at;
        auto sub = [&](std::vector<Real>& m, const RunPair& r) { return m.data() + size_t(r.q.first) * Tk + r.k.first; };
        for (const RunPair& r : seen) {
          detail::gemm(false, true, r.q.count, r.k.count, HS, scale, qh + size_t(r.q.first) * qrow, qrow, kb + size_t(r.k.first) * kvrow, kvrow,
                       Real(0), sub(p, r), Tk);  // S
          detail::gemm(false, true, r.q.count, r.k.count, HS, Real(1), doh + size_t(r.q.first) * qrow, qrow, vb + size_t(r.k.first) * kvrow,
                       kvrow, Real(0), sub(dp, r), Tk);  // dP = dO v^T
        }
        for (int i = 0; i < Tq; ++i) {
          const Real delta = dot(doh + size_t(i) * qrow, out + at + size_t(i) * qrow, HS);
          Real* prow = p.data() + size_t(i) * Tk;
          Real* drow = dp.data() + size_t(i) * Tk;
          for (int j = 0; j < Tk; ++j) {
            if (k_pos[j] > q_pos[i] || lb[i] == ninf) {
              prow[j] = drow[j] = Real(0);
              continue;
            }
            prow[j] = std::exp(prow[j] - lb[i]);
            drow[j] = prow[j] * (drow[j] - delta) * scale;  // dS
          }
        }
        for (const RunPair& r : seen) {
          const size_t qo = size_t(r.q.first) * qrow, ko = size_t(r.k.first) * kvrow;
          detail::gemm(true, false, r.k.count, HS, r.q.count, Real(1), sub(p, r), Tk, doh + qo, qrow, Real(1), dvb + ko, kvrow);  // dv += P^T dO
          detail::gemm(false, false, r.q.count, HS, r.k.count, Real(1), sub(dp, r), Tk, kb + ko, kvrow, Real(1), dq + at + qo, qrow);  // dq += dS k
          detail::gemm(true, false, r.k.count, HS, r.q.count, Real(1), sub(dp, r), Tk, qh + qo, qrow, Real(1), dkb + ko, kvrow);  // dk += dS^T q
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
