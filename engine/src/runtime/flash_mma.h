// Flash attention on tensor cores with the scores in registers: the CUDA backend's fused causal
// attention for bf16 q, k, v (cuda/flash_kernels.cuh's kernels, which cuda/flash_attention.cu
// dispatches to). The same math as the tile program of runtime/flash_tiles.h, which stays the CPU's
// reference for it (same roundings, same order of the online softmax), but organised as
// FlashAttention-2 (Dao, 2023) runs on a GPU: each warp owns 16 rows of a 64-row tile, and S, P,
// dP, dS and the accumulators O, dQ, dK, dV live in the warp's registers as the fragments of PTX's
// `mma.sync.m16n8k16` (bf16 operands, fp32 accumulation).
// Shared memory holds only the bf16 tiles of q, k, v and dO, read into fragments by `ldmatrix`.
//
// The program is written once against a small execution interface, an Exec, and over a Core, the
// family of tensor-core instructions its products run on (MmaSync below: mma.sync and ldmatrix,
// sm_80 on; runtime/flash_wgmma.h's Wgmma: Hopper's warpgroup products, sm_90a). The Exec gives:
//   shared()             the block's scratch (bytes<D, Core>(pass) less the Core's kSlack of it,
//                        aligned to the Core's kAlign)
//   thread(), warp(), lane()   this thread, its warp (0 .. kWarps - 1) and its lane (0 .. 31)
//   sync()               a barrier for the block's kThreads threads (shared memory included)
//   shfl_xor(x, m)       x of lane (lane ^ m) of this warp (a warp-wide call)
//   ldsm(r, p)           ldmatrix .x4: four 8 x 8 bf16 matrices from shared memory, lane l giving
//                        the address p of row l % 8 of matrix l / 8; r[i] receives row lane / 4,
//                        elements 2 (lane % 4) and + 1, of matrix i (low half first)
//   ldsm_t(r, p)         the same, transposed: r[i] receives column lane / 4, rows 2 (lane % 4)
//                        and + 1, of matrix i
//   mma(d, a, b0, b1)    d += A B, A 16 x 16 bf16 (row-major fragment a[4]), B 16 x 8 bf16
//                        (column-major fragment b0, b1), d a 16 x 8 fp32 fragment
//   copy16(dst, src, in), copy4(dst, src, in)
//                        an asynchronous copy of 16 (or 4) bytes from global to shared memory
//                        (cp.async), zeros where `in` is false (src is then not read)
//   commit(), wait<N>()  close the copies issued so far into a group; wait until at most N
//                        groups are in flight (the copies are seen by the block after a sync())
// The CUDA backend implements it with those PTX instructions (cuda/flash_kernels.cuh); the suites
// run the same code on the CPU under an emulation of a warp's lanes (tests/engine/warp_emulator.h).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and c = lane % 4:
//   A: a[0] rows g, columns 2c, 2c+1; a[1] row g+8, the same; a[2], a[3] those rows, columns + 8
//   B: b0 rows (k) 2c, 2c+1 of column (n) g; b1 rows + 8
//   C: d[0], d[1] row g, columns 2c, 2c+1; d[2], d[3] row g+8
// A C fragment of two neighbouring 8-column tiles is an A fragment of their 16 columns, so P and
// dS go from one product to the next without leaving the registers.
//
// Passes, per (sequence, head) and 64-row tile; D is the head size rounded up to 32, 64 or 128
// (the padding columns are zeros):
//   forward     a block per 64 query rows walks the key tiles at or before them: S = Q K^T, the
//               running row maximum m and sum l, P = exp(scale S - m) rounded to bf16,
//               O = O exp(m_old - m) + P V. Writes out = O / l and lse = m + log l. Exponentials
//               are taken base 2 with the scale folded in, as flash_tiles.h's kLog2e says.
//   key grads   a block per 64 key rows walks the query tiles at or after them: S^T = K Q^T,
//               dP^T = V dO^T, P^T = exp(scale S^T - L), dS^T = scale P^T (dP^T - delta),
//               dV += P^T dO, dK += dS^T Q. With grouped-query attention (NKV key/value heads
//               under NH query heads) the block is a key/value head's and walks the query tiles
//               of each query head of its group in turn, in head order, as flash_tiles.h's
//               key_grads_tile does: a key's gradient sums over every query head that reads it.
//   query grads a block per 64 query rows walks the key tiles at or before them: S, dP, P and dS
//               as above, dQ += dS K.
// Only the tiles that reach the diagonal (or the sequence's end) are masked: in the others every key
// precedes every query, and the per-element mask is compiled out (with_mask). Every gradient is
// summed in a fixed order (no atomics), as in the tile program. The walked tiles are
// double-buffered: the next tile's copies (cp.async) are in flight while the warps multiply the
// current one.
//
// Not part of the engine's API; included by src/runtime/cuda and the suites only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "runtime/flash_tiles.h"

namespace stagecraft::runtime::flash_mma {

using flash::Slice;

inline constexpr int kTile = 64;  // query (or key) rows of a block
inline constexpr int kWarps = 4;  // 16 rows each
inline constexpr int kThreads = kWarps * 32;
static_assert(kTile == 16 * kWarps, "a warp owns 16 rows of a tile");

// The 64-row tiles of the first T rows of a sequence: a pass's blocks per (sequence, head), and
// the key tiles a query tile's rows reach (T is at most config_schema.cpp's 1e9: no overflow).
STAGECRAFT_HD constexpr int tiles(int T) { return (T + kTile - 1) / kTile; }

// The padded head size a program is compiled for: 0 where the head size is not taken.
STAGECRAFT_HD int padded_head(int hs) {
  if (!flash::takes_head(hs)) return 0;
  return hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}

// Calls f.template operator()<D>() with hs's padded head size D (a host-side dispatch to the
// compiled programs); false, calling nothing, where the head size is not taken.
template <typename F>
bool with_padded_head(int hs, F&& f) {
  switch (padded_head(hs)) {
    case 32:
      return f.template operator()<32>(), true;
    case 64:
      return f.template operator()<64>(), true;
    case 128:
      return f.template operator()<128>(), true;
  }
  return false;
}

// Rows of the tiles a gradient pass walks (its inner loop's tile). The key-gradient warp holds dK
// and dV (D / 2 floats a thread) from the first tile to the last and the walked tile's S, P, dP
// and dS besides: it walks 32 query rows, so that at head size 64 its bf16 program took 168
// registers, three blocks an SM (ptxas at sm_90, with bf16.h's integer rounding in pack; walking
// 64, it took 240: two). The query-gradient pass walks 64 key rows up to head size 64 (168
// registers either way) and 32 at 128. cuda/flash_kernels.cuh says what the one-launch gradient
// kernel takes now.
template <int D, flash::Pass P>
inline constexpr int kWalk = P == flash::Pass::kKeyGrads || D > 64 ? 32 : 64;

// bf16 elements per row of a shared tile: padded by 16 bytes, so that the eight rows an ldmatrix
// reads fall in eight different groups of four banks, and every row start stays 16-byte aligned.
template <int D>
inline constexpr int kLd = D + 8;

// Bytes of the row statistics of a key-gradient walked tile (L and delta, kWalk floats each).
template <int D>
inline constexpr int kStatBytes = 2 * kWalk<D, flash::Pass::kKeyGrads> * 4;

// The two gradient passes run as one launch (cuda/flash_kernels.cuh's tensor_grads_kernel): of a
// head's 2 x tiles blocks, block y takes the y-th longest of both passes' tiles, so that the
// longest start first and the passes end together. A key tile k walks tiles - k query tiles' worth
// of rows with four products each, a query tile q walks q + 1 key tiles with three; ties go to the
// key pass. Worked example, 2 tiles: key 0 (8), query 1 (6), key 1 (4), query 0 (3).
struct GradsTile {
  bool key;  // the key gradients' pass, else the query gradients'
  int tile;
};
STAGECRAFT_HD GradsTile grads_tile(int tiles, int y) {
  int k = 0, q = tiles - 1;  // each pass's next tile in its own longest-first order
  for (;; --y) {
    const bool key = k < tiles && (q < 0 || 4 * (tiles - k) >= 3 * (q + 1));
    if (y <= 0) return {key, key ? k : q};
    if (key) {
      ++k;
    } else {
      --q;
    }
  }
}

// Two floats as a bf16 pair, the first in the low half (the lower column or row). On a GPU one
// instruction (cvt.rn.bf16x2.f32) where bf16.h's to_bf16 takes a handful of integer operations an
// element: the same rounding, to nearest with ties to even, for every value but NaN, which it
// makes the canonical NaN rather than keeping the payload.
STAGECRAFT_TILE uint32_t pack(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // the first source goes to the high half
  return r;
#else
  return uint32_t(to_bf16(lo).bits) | (uint32_t(to_bf16(hi).bits) << 16);
#endif
}

// Rows t0 .. t0 + n - 1 of q, k, v (which 0, 1, 2 of qkv) or of dO (which -1, dout (B, T, C) in
// fp32 or bf16) into a tile of `rows` rows: zeros past n and past the head size. bf16 goes
// asynchronously (the Exec's copy16, seen after its wait and a sync()); fp32 dO, which must be
// rounded on the way, is loaded and stored.
template <int D, typename Core, typename E, typename Src>
STAGECRAFT_TILE void stage(const E& e, bf16* tile, const Src* src, const Slice& s, int which, int t0, int n, int rows) {
  constexpr int units = D / 8;
  for (int u = e.thread(); u < rows * units; u += kThreads) {
    const int r = u / units, d = u % units * 8;
    const bool in = r < n && d < s.hs;
    const Src* from = in ? src + s.at(t0 + r, which) + d : src;
    if constexpr (std::is_same_v<Src, bf16>) {
      e.copy16(Core::template unit<D>(tile, rows, r, d), from, in);
    } else {
      flash::put8(Core::template unit<D>(tile, rows, r, d), in ? flash::load8(from) : flash::Bf16x8{});
    }
  }
}

// Before working on walked tile j of `tiles`: starts tile j + 1's copies (fetch(j + 1), into the
// buffer that iteration j - 1 read and finished with a sync()), waits for tile j's, and makes
// them seen by the block (and by the Core's products).
template <typename Core, typename E, typename Fetch>
STAGECRAFT_TILE void next_tile(const E& e, int j, int tiles, Fetch&& fetch) {
  if (j + 1 < tiles) {
    fetch(j + 1);
    e.template wait<1>();
  } else {
    e.template wait<0>();
  }
  Core::seen(e);
  e.sync();
}

// Calls f(std::true_type{}) where a tile needs the causal mask, else f(std::false_type{}): the
// tile's element loop is compiled twice, and the second leaves out the mask's per-element work.
template <typename F>
STAGECRAFT_TILE void with_mask(bool needed, F&& f) {
  if (needed) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// This lane's ldmatrix address for the A fragment of rows r0 .. r0 + 15 and columns k0 .. k0 + 15
// of a row-major tile; the same address loads, transposed (ldsm_t), the B fragments of rows (k)
// r0 .. r0 + 15 and columns (n) k0 .. k0 + 15 as two 8-column tiles.
template <int D, typename E>
STAGECRAFT_TILE const bf16* a_rows(const E& e, const bf16* tile, int r0, int k0) {
  return tile + (r0 + (e.lane() & 15)) * kLd<D> + k0 + (e.lane() >> 4) * 8;
}

// This lane's ldmatrix address for the B fragments of two 8-column tiles (n) n0 .. n0 + 15 over
// rows (k) k0 .. k0 + 15 of B, read from a row-major tile that holds B^T (rows n, columns k):
// r[0], r[1] are tile n0's b0, b1 and r[2], r[3] tile n0 + 8's.
template <int D, typename E>
STAGECRAFT_TILE const bf16* b_cols(const E& e, const bf16* tile, int n0, int k0) {
  return tile + (n0 + (e.lane() & 7) + (e.lane() >> 4) * 8) * kLd<D> + k0 + ((e.lane() >> 3) & 1) * 8;
}

// acc[N / 8] += A (16 x D, fragments a[D / 16]) times B^T, B^T (N x D) a row-major shared tile.
template <int D, int N, typename E>
STAGECRAFT_TILE void times_transposed(const E& e, float (&acc)[N / 8][4], const uint32_t (&a)[D / 16][4], const bf16* bt) {
  STAGECRAFT_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    STAGECRAFT_UNROLL
    for (int nj = 0; nj < N / 16; ++nj) {
      uint32_t b[4];
      e.ldsm(b, b_cols<D>(e, bt, nj * 16, kk * 16));
      e.mma(acc[2 * nj], a[kk], b[0], b[1]);
      e.mma(acc[2 * nj + 1], a[kk], b[2], b[3]);
    }
  }
}

// acc[D / 8] += A (16 x K, fragments a[K / 16]) times B (K x D), a row-major shared tile.
template <int D, int K, typename E>
STAGECRAFT_TILE void times(const E& e, float (&acc)[D / 8][4], const uint32_t (&a)[K / 16][4], const bf16* b) {
  STAGECRAFT_UNROLL
  for (int kk = 0; kk < K / 16; ++kk) {
    STAGECRAFT_UNROLL
    for (int dj = 0; dj < D / 16; ++dj) {
      uint32_t f[4];
      e.ldsm_t(f, a_rows<D>(e, b, kk * 16, dj * 16));
      e.mma(acc[2 * dj], a[kk], f[0], f[1]);
      e.mma(acc[2 * dj + 1], a[kk], f[2], f[3]);
    }
  }
}

// The A fragments of this warp's 16 rows (w x 16 ..) of a row-major tile.
template <int D, typename E>
STAGECRAFT_TILE void fragments(const E& e, uint32_t (&a)[D / 16][4], const bf16* tile) {
  STAGECRAFT_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) e.ldsm(a[kk], a_rows<D>(e, tile, e.warp() * 16, kk * 16));
}

// Element i of C fragment tile nt, as a bf16 pair into the A fragment of the 16-column chunk.
template <int N>
STAGECRAFT_TILE void to_a(uint32_t (&a)[N / 16][4], int nt, float x0, float x1, float x2, float x3) {
  a[nt / 2][(nt & 1) * 2] = pack(x0, x1);
  a[nt / 2][(nt & 1) * 2 + 1] = pack(x2, x3);
}

// The tensor-core instructions a program runs on, a Core: how a shared tile of `rows` rows and D
// columns is laid out, how the products read it, and what orders them.
//   tile_elements<D>(rows)    bf16 elements of a tile (its successor starts there)
//   unit<D>(tile, rows, r, d) the address of elements d .. d + 7 (d % 8 == 0) of row r
//   Operand<D>, load(e, a, tile)
//                             the A side of times_transposed: this warp's 16 of a 64-row tile's
//                             rows (the warp's rows of tile, as loaded by `load`)
//   times_transposed<D, N>(e, acc, a, bt)
//                             acc (this warp's 16 rows x N, C fragments) += A B^T, B^T the N x D
//                             tile bt
//   times<D, K>(e, acc, a, b) acc (16 x D) += A B, A this warp's 16 x K in A fragments (P or dS
//                             from registers), B the K x D tile b
//   begin(e, acc...), end(e, acc...)
//                             bracket products; their accumulators are read only after end
//   seen(e)                   after a wait for copies and before the sync() that shows them
//   kAlign, kSlack            what every walked buffer's start is rounded to; bytes of shared
//                             memory a block needs beyond its tiles
//   kTakes<D>                 whether it runs padded head size D
// MmaSync is mma.sync m16n8k16 on sm_80 or later: each warp loads its operands with ldmatrix from
// tiles whose rows are padded (kLd), and every product completes in order. flash_wgmma.h's Wgmma
// is Hopper's warpgroup products.
struct MmaSync {
  static constexpr size_t kAlign = 16, kSlack = 0;
  template <int D>
  static constexpr bool kTakes = true;  // every padded head size
  template <int D>
  static constexpr int tile_elements(int rows) {
    return rows * kLd<D>;
  }
  template <int D>
  STAGECRAFT_TILE static bf16* unit(bf16* tile, int /*rows*/, int r, int d) {
    return tile + r * kLd<D> + d;
  }
  template <int D>
  using Operand = uint32_t[D / 16][4];
  template <int D, typename E>
  STAGECRAFT_TILE static void load(const E& e, Operand<D>& a, const bf16* tile) {
    fragments<D>(e, a, tile);
  }
  template <int D, int N, typename E>
  STAGECRAFT_TILE static void times_transposed(const E& e, float (&acc)[N / 8][4], const Operand<D>& a, const bf16* bt) {
    flash_mma::times_transposed<D, N>(e, acc, a, bt);
  }
  template <int D, int K, typename E>
  STAGECRAFT_TILE static void times(const E& e, float (&acc)[D / 8][4], const uint32_t (&a)[K / 16][4], const bf16* b) {
    flash_mma::times<D, K>(e, acc, a, b);
  }
  template <typename E, typename... Acc>
  STAGECRAFT_TILE static void begin(const E&, Acc&...) {}
  template <typename E, typename... Acc>
  STAGECRAFT_TILE static void end(const E&, Acc&...) {}
  template <typename E>
  STAGECRAFT_TILE static void seen(const E&) {}
};

STAGECRAFT_HD constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Bytes of a walked buffer of a pass (two tiles of kWalk rows: K and V, or Q and dO, and in the key
// gradients' pass L and delta), rounded to the Core's kAlign.
template <int D, typename Core>
STAGECRAFT_HD constexpr size_t walked_bytes(flash::Pass pass) {
  const int rows = pass == flash::Pass::kForward ? kTile : pass == flash::Pass::kKeyGrads ? kWalk<D, flash::Pass::kKeyGrads>
                                                                                          : kWalk<D, flash::Pass::kQueryGrads>;
  const size_t tiles = 2 * size_t(Core::template tile_elements<D>(rows)) * 2;
  return round_up(pass == flash::Pass::kKeyGrads ? tiles + kStatBytes<D> : tiles, Core::kAlign);
}

// Shared memory of a pass at padded head size D: the block's own tiles (forward: Q; the key
// gradients: K and V; the query gradients: Q and dO), then two buffers of the walked tiles.
template <int D, typename Core = MmaSync>
STAGECRAFT_HD constexpr size_t bytes(flash::Pass pass) {
  const size_t tile = size_t(Core::template tile_elements<D>(kTile)) * 2;
  return (pass == flash::Pass::kForward ? 1 : 2) * tile + 2 * walked_bytes<D, Core>(pass) + Core::kSlack;
}

template <typename Core = MmaSync>
STAGECRAFT_HD size_t bytes_for_head(flash::Pass pass, int hs) {
  switch (padded_head(hs)) {
    case 32:
      return bytes<32, Core>(pass);
    case 64:
      return bytes<64, Core>(pass);
    case 128:
      return bytes<128, Core>(pass);
  }
  return 0;
}

// Shared memory of the one-launch gradient passes: the larger of the two.
template <int D, typename Core = MmaSync>
STAGECRAFT_HD constexpr size_t grads_bytes() {
  const size_t keys = bytes<D, Core>(flash::Pass::kKeyGrads), queries = bytes<D, Core>(flash::Pass::kQueryGrads);
  return keys > queries ? keys : queries;
}

// C fragments of this warp's 16 rows and D columns, each divided by its row's `by`, into rows
// row0 and row0 + 8 (where they are before T) of out (which -1) or of dqkv's q, k or v part
// (which 0, 1, 2), columns before the head size.
template <int D, typename E, typename Dst>
STAGECRAFT_TILE void store_rows(const E& e, Dst* dst, const float (&acc)[D / 8][4], const float (&by)[2], const Slice& s, int which,
                                int row0) {
  const int c = (e.lane() & 3) * 2;
  STAGECRAFT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + half * 8;
    if (row >= s.T) continue;
    Dst* y = dst + s.at(row, which);
    STAGECRAFT_UNROLL
    for (int dt = 0; dt < D / 8; ++dt) {
      if (dt * 8 + c >= s.hs) break;
      element::store(y + dt * 8 + c, acc[dt][half * 2] / by[half]);
      element::store(y + dt * 8 + c + 1, acc[dt][half * 2 + 1] / by[half]);
    }
  }
}

// Forward of query tile qtile: out (B, T, C) in fp32 or bf16, lse (B, NH, T).
template <int D, typename Core, typename E, typename Out>
STAGECRAFT_TILE void forward(const E& e, Out* out, float* lse, const bf16* qkv, const Slice& s, int qtile) {
  constexpr int kOwnTile = Core::template tile_elements<D>(kTile);  // elements of a 64-row tile
  bf16* Q = reinterpret_cast<bf16*>(e.shared());
  bf16* walked = Q + kOwnTile;  // K and V of key tile j in buffer j % 2
  constexpr int kBuffer = 2 * kOwnTile;
  const int q0 = qtile * kTile, rows = flash::smaller(kTile, s.T - q0), key_tiles = tiles(q0 + rows);
  const int c = (e.lane() & 3) * 2, row0 = q0 + e.warp() * 16 + (e.lane() >> 2);  // this thread's rows: row0, row0 + 8
  auto buffer = [&](int j) { return walked + (j & 1) * kBuffer; };
  auto fetch = [&](int j) {  // key tile j into its buffer
    bf16* K = buffer(j);
    const int j0 = j * kTile, cols = flash::smaller(kTile, s.T - j0);
    stage<D, Core>(e, K, qkv, s, 1, j0, cols, kTile);
    stage<D, Core>(e, K + kOwnTile, qkv, s, 2, j0, cols, kTile);
    e.commit();
  };
  stage<D, Core>(e, Q, qkv, s, 0, q0, rows, kTile);
  fetch(0);
  typename Core::template Operand<D> qf;
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int j = 0; j < key_tiles; ++j) {
    const int j0 = j * kTile;
    const bf16* K = buffer(j);
    const bf16* V = K + kOwnTile;
    next_tile<Core>(e, j, key_tiles, fetch);
    if (j == 0) Core::template load<D>(e, qf, Q);
    float sc[kTile / 8][4] = {};
    Core::begin(e, sc);
    Core::template times_transposed<D, kTile>(e, sc, qf, K);
    Core::end(e, sc);
    // P of the tile and the online softmax's update. Masked (keys after the row, rows past T:
    // -inf) only where the tile reaches the diagonal; before it, every key precedes every row of
    // the block and the mask's per-element work is left out (rows past T then get finite values
    // that are never stored).
    uint32_t pf[kTile / 16][4];
    float corr[2];
    auto probabilities = [&](auto masked) {
      float mx[2] = {-INFINITY, -INFINITY};  // the rows' maxima, over the quad of lanes that holds them
      STAGECRAFT_UNROLL
      for (int nt = 0; nt < kTile / 8; ++nt) {
        STAGECRAFT_UNROLL
        for (int i = 0; i < 4; ++i) {
          if constexpr (decltype(masked)::value) {
            const int row = row0 + (i >> 1) * 8, col = j0 + nt * 8 + c + (i & 1);
            if (row >= s.T || col > row) sc[nt][i] = -INFINITY;
          }
          mx[i >> 1] = fmaxf(mx[i >> 1], sc[nt][i]);
        }
      }
      float m_new[2], sum[2] = {0.0f, 0.0f};
      STAGECRAFT_UNROLL
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], e.shfl_xor(mx[h], 1));
        mx[h] = fmaxf(mx[h], e.shfl_xor(mx[h], 2));
        m_new[h] = fmaxf(m[h], mx[h] * s.scale_log2);  // base 2, as in the tile program; scale > 0
        corr[h] = m_new[h] == -INFINITY ? 1.0f : exp2f(m[h] - m_new[h]);  // 0 on the row's first keys
      }
      STAGECRAFT_UNROLL
      for (int nt = 0; nt < kTile / 8; ++nt) {
        float p[4];
        STAGECRAFT_UNROLL
        for (int i = 0; i < 4; ++i) {
          if constexpr (decltype(masked)::value) {
            p[i] = sc[nt][i] == -INFINITY ? 0.0f : exp2f(sc[nt][i] * s.scale_log2 - m_new[i >> 1]);
          } else {
            p[i] = exp2f(sc[nt][i] * s.scale_log2 - m_new[i >> 1]);  // finite: m_new is a maximum of finite scores
          }
          sum[i >> 1] += p[i];
        }
        to_a<kTile>(pf, nt, p[0], p[1], p[2], p[3]);
      }
      STAGECRAFT_UNROLL
      for (int h = 0; h < 2; ++h) {
        l[h] = l[h] * corr[h] + sum[h];  // this lane's share of the row; the quad sums at the end
        m[h] = m_new[h];
      }
    };
    with_mask(j0 + kTile > q0, probabilities);
    STAGECRAFT_UNROLL
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= corr[0];
      o[dt][1] *= corr[0];
      o[dt][2] *= corr[1];
      o[dt][3] *= corr[1];
    }
    Core::begin(e, o, pf);
    Core::template times<D, kTile>(e, o, pf, V);
    Core::end(e, o, pf);
    e.sync();  // every warp has read buffer j % 2
  }
  STAGECRAFT_UNROLL
  for (int h = 0; h < 2; ++h) {
    l[h] += e.shfl_xor(l[h], 1);
    l[h] += e.shfl_xor(l[h], 2);
  }
  store_rows<D>(e, out, o, l, s, -1, row0);
  STAGECRAFT_UNROLL
  for (int h = 0; h < 2; ++h) {
    if (row0 + h * 8 < s.T && c == 0) lse[s.row_at(row0 + h * 8)] = m[h] * flash::kLn2 + logf(l[h]);
  }
}

// dK and dV of key tile ktile of key/value head s.kvh, into dqkv (B, T, (NH + 2 NKV) hs)
// (overwritten there); dO and dqkv in fp32 or bf16 each; delta as flash_tiles.h's row_delta gives
// it. s is flash_tiles.h's key_slice_of: the first query head of the group, s.h; the walk takes
// the query tiles from the block's own on of query heads s.h .. s.h + NH / NKV - 1, one head after
// the other, into the same accumulators.
template <int D, typename Core, typename E, typename Grads, typename Dout>
STAGECRAFT_TILE void key_grads(const E& e, Grads* dqkv, const bf16* qkv, const Dout* dout, const float* lse, const float* delta,
                               const Slice& s, int ktile) {
  constexpr flash::Pass kPass = flash::Pass::kKeyGrads;
  constexpr int N = kWalk<D, kPass>;
  // Elements of the block's own tiles and of a walked one.
  constexpr int kOwnTile = Core::template tile_elements<D>(kTile), kWalkedTile = Core::template tile_elements<D>(N);
  bf16* K = reinterpret_cast<bf16*>(e.shared());
  bf16* V = K + kOwnTile;
  unsigned char* walked = reinterpret_cast<unsigned char*>(V + kOwnTile);  // the query tile of step w in buffer w % 2
  constexpr size_t kBuffer = walked_bytes<D, Core>(kPass);
  const int k0 = ktile * kTile, cols = flash::smaller(kTile, s.T - k0), first = k0 / N, query_tiles = (s.T + N - 1) / N;
  const int c = (e.lane() & 3) * 2, key0 = k0 + e.warp() * 16 + (e.lane() >> 2);  // this thread's keys: key0, key0 + 8
  // The walk: step w is query tile first + w % per_head of query head s.h + w / per_head.
  const int per_head = query_tiles - first, steps = s.NH / s.NKV * per_head;
  auto query_slice = [&](int w) {
    Slice q = s;  // the same key/value head
    q.h = s.h + w / per_head;
    return q;
  };
  auto buffer = [&](int w) { return reinterpret_cast<bf16*>(walked + (w & 1) * kBuffer); };  // Q, dO, then L, delta
  auto fetch = [&](int w) {  // step w's query tile into its buffer
    bf16* Qb = buffer(w);
    float* Lb = reinterpret_cast<float*>(Qb + 2 * kWalkedTile);
    const Slice q = query_slice(w);
    const int i0 = (first + w % per_head) * N, rows = flash::smaller(N, s.T - i0);
    stage<D, Core>(e, Qb, qkv, q, 0, i0, rows, N);
    stage<D, Core>(e, Qb + kWalkedTile, dout, q, -1, i0, rows, N);
    for (int r = e.thread(); r < N; r += kThreads) {
      e.copy4(Lb + r, r < rows ? lse + q.row_at(i0 + r) : lse, r < rows);
      e.copy4(Lb + N + r, r < rows ? delta + q.row_at(i0 + r) : delta, r < rows);
    }
    e.commit();
  };
  stage<D, Core>(e, K, qkv, s, 1, k0, cols, kTile);
  stage<D, Core>(e, V, qkv, s, 2, k0, cols, kTile);
  fetch(0);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int w = 0; w < steps; ++w) {
    const int i0 = (first + w % per_head) * N;
    const bf16* Q = buffer(w);
    const bf16* dO = Q + kWalkedTile;
    const float* Ls = reinterpret_cast<const float*>(Q + 2 * kWalkedTile);
    const float* Ds = Ls + N;
    next_tile<Core>(e, w, steps, fetch);
    float st[N / 8][4] = {}, dpt[N / 8][4] = {};
    {
      typename Core::template Operand<D> kf;
      Core::begin(e, st, dpt);
      Core::template load<D>(e, kf, K);
      Core::template times_transposed<D, N>(e, st, kf, Q);
      Core::template load<D>(e, kf, V);
      Core::template times_transposed<D, N>(e, dpt, kf, dO);
      Core::end(e, st, dpt);
    }
    uint32_t pf[N / 16][4], dsf[N / 16][4];
    auto prob_grads = [&](auto masked) {
      STAGECRAFT_UNROLL
      for (int nt = 0; nt < N / 8; ++nt) {
        float p[4], ds[4];
        STAGECRAFT_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int key = key0 + (i >> 1) * 8, r = nt * 8 + c + (i & 1), query = i0 + r;
          const bool in = !decltype(masked)::value || (query < s.T && key <= query);
          const flash::ProbGrad g = flash::prob_grad(in, st[nt][i], dpt[nt][i], flash::log2e_of(Ls[r]), Ds[r], s);
          p[i] = g.p;
          ds[i] = g.ds;
        }
        to_a<N>(pf, nt, p[0], p[1], p[2], p[3]);
        to_a<N>(dsf, nt, ds[0], ds[1], ds[2], ds[3]);
      }
    };
    // Masked where a query of the tile may come before a key of the block, or the tile passes T.
    with_mask(i0 < k0 + kTile || i0 + N > s.T, prob_grads);
    Core::begin(e, dv, dk, pf, dsf);
    Core::template times<D, N>(e, dv, pf, dO);
    Core::template times<D, N>(e, dk, dsf, Q);
    Core::end(e, dv, dk, pf, dsf);
    e.sync();  // every warp has read buffer w % 2
  }
  const float as_is[2] = {1.0f, 1.0f};  // x / 1 is x
  store_rows<D>(e, dqkv, dk, as_is, s, 1, key0);
  store_rows<D>(e, dqkv, dv, as_is, s, 2, key0);
}

// dQ of query tile qtile, into dqkv (overwritten there).
template <int D, typename Core, typename E, typename Grads, typename Dout>
STAGECRAFT_TILE void query_grads(const E& e, Grads* dqkv, const bf16* qkv, const Dout* dout, const float* lse, const float* delta,
                                 const Slice& s, int qtile) {
  constexpr flash::Pass kPass = flash::Pass::kQueryGrads;
  constexpr int N = kWalk<D, kPass>;
  // Elements of the block's own tiles and of a walked one.
  constexpr int kOwnTile = Core::template tile_elements<D>(kTile), kWalkedTile = Core::template tile_elements<D>(N);
  bf16* Q = reinterpret_cast<bf16*>(e.shared());
  bf16* dO = Q + kOwnTile;
  bf16* walked = dO + kOwnTile;  // K and V of key tile j in buffer j % 2
  const int q0 = qtile * kTile, rows = flash::smaller(kTile, s.T - q0), key_tiles = (q0 + rows + N - 1) / N;
  const int c = (e.lane() & 3) * 2, row0 = q0 + e.warp() * 16 + (e.lane() >> 2);  // this thread's rows: row0, row0 + 8
  auto buffer = [&](int j) { return walked + (j & 1) * (walked_bytes<D, Core>(kPass) / 2); };
  auto fetch = [&](int j) {  // key tile j into its buffer
    bf16* Kb = buffer(j);
    const int j0 = j * N, cols = flash::smaller(N, s.T - j0);
    stage<D, Core>(e, Kb, qkv, s, 1, j0, cols, N);
    stage<D, Core>(e, Kb + kWalkedTile, qkv, s, 2, j0, cols, N);
    e.commit();
  };
  stage<D, Core>(e, Q, qkv, s, 0, q0, rows, kTile);
  stage<D, Core>(e, dO, dout, s, -1, q0, rows, kTile);
  fetch(0);
  float L[2], Dl[2];
  STAGECRAFT_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + h * 8;
    L[h] = row < s.T ? flash::log2e_of(lse[s.row_at(row)]) : 0.0f;  // base 2, as prob_grad takes it
    Dl[h] = row < s.T ? delta[s.row_at(row)] : 0.0f;
  }
  typename Core::template Operand<D> qf, df;
  float dq[D / 8][4] = {};
  for (int j = 0; j < key_tiles; ++j) {
    const int j0 = j * N;
    const bf16* K = buffer(j);
    const bf16* V = K + kWalkedTile;
    next_tile<Core>(e, j, key_tiles, fetch);
    if (j == 0) {
      Core::template load<D>(e, qf, Q);
      Core::template load<D>(e, df, dO);
    }
    float sc[N / 8][4] = {}, dp[N / 8][4] = {};
    Core::begin(e, sc, dp);
    Core::template times_transposed<D, N>(e, sc, qf, K);
    Core::template times_transposed<D, N>(e, dp, df, V);
    Core::end(e, sc, dp);
    uint32_t dsf[N / 16][4];
    auto prob_grads = [&](auto masked) {
      STAGECRAFT_UNROLL
      for (int nt = 0; nt < N / 8; ++nt) {
        float ds[4];
        STAGECRAFT_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int row = row0 + (i >> 1) * 8, col = j0 + nt * 8 + c + (i & 1);
          const bool in = !decltype(masked)::value || (row < s.T && col <= row);
          ds[i] = flash::prob_grad(in, sc[nt][i], dp[nt][i], L[i >> 1], Dl[i >> 1], s).ds;
        }
        to_a<N>(dsf, nt, ds[0], ds[1], ds[2], ds[3]);
      }
    };
    // Keys before every row of the block need no mask; rows past T then get finite values that are
    // never stored (their q and dO are zeros, L and delta 0).
    with_mask(j0 + N > q0, prob_grads);
    Core::begin(e, dq, dsf);
    Core::template times<D, N>(e, dq, dsf, K);
    Core::end(e, dq, dsf);
    e.sync();  // every warp has read buffer j % 2
  }
  const float as_is[2] = {1.0f, 1.0f};  // x / 1 is x
  store_rows<D>(e, dqkv, dq, as_is, s, 0, row0);
}

}  // namespace stagecraft::runtime::flash_mma
