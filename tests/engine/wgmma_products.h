// Single products of runtime/flash_wgmma.h's Wgmma Core as block programs, and the plain products
// they must equal. A block of the Core's four warps (one warpgroup) stages its tiles as the fused
// attention does (the Exec's copy16 into the 128-byte swizzle, the Core's seen, a barrier),
// multiplies between the Core's begin and end, and writes the accumulators out through mma.sync's
// C fragments, having read their starting values in the same way:
//   times_transposed_block<D, N>   c (64 x N) += a (64 x D) bt^T, bt N x D: S = Q K^T's reading,
//                                  both tiles K-major through descriptors
//   times_block<D, K>              c (64 x D) += p (64 x K) v, v K x D: O += P V's reading, p
//                                  rounded to bf16 into registers as the forward's P (mma.sync's A
//                                  fragments), v MN-major
// All matrices row-major. tst_flash_mma runs them under tests/engine/warp_emulator.h, and
// tst_cuda on a GPU of compute capability 9.0 (tests/gpu/wgmma_probe.cu), each against the plain
// products below: where the attention's wgmma kernels disagree with their tile program on a GPU,
// these say whether a reading is wrong or the program around them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "runtime/flash_wgmma.h"

namespace stagecraft::test::wgmma_products {

using runtime::bf16;
using runtime::flash_mma::kThreads;
using runtime::flash_mma::kTile;
using runtime::flash_mma::Wgmma;

// rows x D of a row-major matrix into a Wgmma tile, as flash_mma.h's stage copies them.
template <int D, typename E>
STAGECRAFT_TILE void stage_rows(const E& e, bf16* tile, const bf16* from, int rows) {
  for (int u = e.thread(); u < rows * (D / 8); u += kThreads) {
    const int r = u / (D / 8), d = u % (D / 8) * 8;
    e.copy16(Wgmma::unit<D>(tile, rows, r, d), from + r * D + d, true);
  }
}
template <typename E>
STAGECRAFT_TILE void staged(const E& e) {
  e.commit();
  e.template wait<0>();
  Wgmma::seen(e);
  e.sync();
}

// This thread's C fragments (rows 16 w + lane / 4 and + 8, columns 8 nt + 2 (lane % 4) and + 1)
// of a row-major 64 x N matrix c: read into acc, or written from it (kOut).
template <int N, bool kOut, typename E>
STAGECRAFT_TILE void fragments(const E& e, float* c, float (&acc)[N / 8][4]) {
  const int row = e.warp() * 16 + e.lane() / 4, col = 2 * (e.lane() % 4);
  STAGECRAFT_UNROLL
  for (int nt = 0; nt < N / 8; ++nt) {
    STAGECRAFT_UNROLL
    for (int i = 0; i < 4; ++i) {
      float& x = c[(row + (i / 2) * 8) * N + nt * 8 + col + i % 2];
      if constexpr (kOut) {
        x = acc[nt][i];
      } else {
        acc[nt][i] = x;
      }
    }
  }
}

// Shared memory a block takes: the Core's slack and its tiles (a, bt; or v).
template <int D, int N>
inline constexpr size_t kTimesTransposedBytes = size_t(Wgmma::tile_elements<D>(kTile + N)) * 2 + Wgmma::kSlack;
template <int D, int K>
inline constexpr size_t kTimesBytes = size_t(Wgmma::tile_elements<D>(K)) * 2 + Wgmma::kSlack;

template <int D, int N, typename E>
STAGECRAFT_TILE void times_transposed_block(const E& e, float* c, const bf16* a, const bf16* bt) {
  bf16* A = reinterpret_cast<bf16*>(e.shared());
  bf16* Bt = A + Wgmma::tile_elements<D>(kTile);
  stage_rows<D>(e, A, a, kTile);
  stage_rows<D>(e, Bt, bt, N);
  staged(e);
  Wgmma::Operand<D> op;
  Wgmma::load<D>(e, op, A);
  float acc[N / 8][4];
  fragments<N, false>(e, c, acc);
  Wgmma::begin(e, acc);
  Wgmma::times_transposed<D, N>(e, acc, op, Bt);
  Wgmma::end(e, acc);
  fragments<N, true>(e, c, acc);
}

template <int D, int K, typename E>
STAGECRAFT_TILE void times_block(const E& e, float* c, const float* p, const bf16* v) {
  bf16* V = reinterpret_cast<bf16*>(e.shared());
  stage_rows<D>(e, V, v, K);
  staged(e);
  uint32_t pf[K / 16][4];  // this warp's rows of p as C fragments, then A fragments, as the forward makes P's
  const int row = e.warp() * 16 + e.lane() / 4, col = 2 * (e.lane() % 4);
  STAGECRAFT_UNROLL
  for (int nt = 0; nt < K / 8; ++nt) {
    const float* at = p + row * K + nt * 8 + col;
    runtime::flash_mma::to_a<K>(pf, nt, at[0], at[1], at[8 * K], at[8 * K + 1]);
  }
  float acc[D / 8][4];
  fragments<D, false>(e, c, acc);
  Wgmma::begin(e, acc, pf);
  Wgmma::times<D, K>(e, acc, pf, V);
  Wgmma::end(e, acc, pf);
  fragments<D, true>(e, c, acc);
}

// Calls f.template operator()<D, N>() for the shapes the probes take: head sizes D 64 and 128
// (one and two 64-column blocks), N (or K) 32 and 64 rows; false, calling nothing, for others.
template <typename F>
bool with_shape(int D, int N, F&& f) {
  if (D == 64 && N == 32) {
    f.template operator()<64, 32>();
  } else if (D == 64 && N == 64) {
    f.template operator()<64, 64>();
  } else if (D == 128 && N == 32) {
    f.template operator()<128, 32>();
  } else if (D == 128 && N == 64) {
    f.template operator()<128, 64>();
  } else {
    return false;
  }
  return true;
}

// The plain products in double, from c's starting values.
inline std::vector<double> plain_times_transposed(int D, int N, const std::vector<float>& c, const std::vector<bf16>& a,
                                                  const std::vector<bf16>& bt) {
  std::vector<double> out(c.begin(), c.end());
  for (int r = 0; r < kTile; ++r) {
    for (int n = 0; n < N; ++n) {
      for (int d = 0; d < D; ++d) out[r * N + n] += double(to_float(a[r * D + d])) * to_float(bt[n * D + d]);
    }
  }
  return out;
}
inline std::vector<double> plain_times(int D, int K, const std::vector<float>& c, const std::vector<float>& p, const std::vector<bf16>& v) {
  std::vector<double> out(c.begin(), c.end());
  for (int r = 0; r < kTile; ++r) {
    for (int j = 0; j < K; ++j) {
      const double pj = to_float(runtime::to_bf16(p[r * K + j]));
      for (int d = 0; d < D; ++d) out[r * D + d] += pj * to_float(v[j * D + d]);
    }
  }
  return out;
}

// The largest difference of got from ref, over ref's largest magnitude.
inline double error(const std::vector<float>& got, const std::vector<double>& ref) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / scale;
}

// One shape's operands for both probes: S (64 x N) += Q (64 x D) K^T and O (64 x D) += P (64 x N)
// V, with S and O holding the accumulators' starting values until a probe runs (and its results
// after), and the plain products.
struct Case {
  int D = 0, N = 0;
  std::vector<bf16> q, k, v;
  std::vector<float> s, p, o;
  std::vector<double> s_plain, o_plain;
};

// Every shape with_shape takes, its operands from draw(n) (n normal floats; q, k and v rounded to
// bf16).
template <typename Draw>
std::vector<Case> cases(Draw&& draw) {
  auto bf16s = [&](size_t n) {
    const std::vector<float> x = draw(n);
    std::vector<bf16> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = runtime::to_bf16(x[i]);
    return out;
  };
  std::vector<Case> all;
  for (const int D : {64, 128}) {
    for (const int N : {32, 64}) {
      Case c{D, N, bf16s(size_t(kTile) * D), bf16s(size_t(N) * D), bf16s(size_t(N) * D), draw(size_t(kTile) * N), draw(size_t(kTile) * N),
             draw(size_t(kTile) * D), {}, {}};
      c.s_plain = plain_times_transposed(D, N, c.s, c.q, c.k);
      c.o_plain = plain_times(D, N, c.o, c.p, c.v);
      all.push_back(std::move(c));
    }
  }
  return all;
}

// After both probes ran on c: empty where each is within `tolerance` of its plain product (as
// error counts), else which reading is off and by how much. `print` also says each error.
inline std::string check(const Case& c, double tolerance, bool print = false) {
  std::string out;
  const struct {
    const char* reading;
    double err;
  } results[] = {{"K-major (S = Q K^T)", error(c.s, c.s_plain)}, {"MN-major (O += P V)", error(c.o, c.o_plain)}};
  for (const auto& r : results) {
    char line[160];
    std::snprintf(line, sizeof line, "wgmma %s at head size %d over %d keys: error %.2e", r.reading, c.D, c.N, r.err);
    if (print) std::printf("%s\n", line);
    if (!(r.err < tolerance)) out += std::string(out.empty() ? "" : "; ") + line;
  }
  return out;
}

}  // namespace stagecraft::test::wgmma_products
