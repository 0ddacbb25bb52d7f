// The arithmetic of the CUDA backend's tensor-core flash attention, as a tile program the CPU runs
// one tile after another (cpu/flash_tiles.cpp, kernels.h's cpu::flash_attention_tiled_*): the
// tiling, the causal mask, the online softmax and every bf16 rounding of runtime/flash_mma.h,
// which the GPU runs with the scores in mma fragments instead of shared memory. It is the
// reference the suites hold flash_mma.h to, on the CPU (tst_flash_mma) and on a GPU (tst_cuda),
// and the bf16 attention of the CPU suites' GPU stand-in (tst_trainer). It was written for a CUDA
// block of 16 x 16 products, whose interface it keeps.
//
// The algorithm is FlashAttention-2's (Dao, 2023) for causal attention over qkv (B, T,
// (NH + 2 NKV) HS) in bf16 (NH query heads, NKV key/value heads; query head h reads K/V head
// h / (NH / NKV)), HS a multiple of 16 up to kMaxHead. Per (sequence, head):
//   forward   a block per kRows query rows: Q stays in shared memory; for each kCols key rows at
//             or before the block's last row, S = Q K^T on tensor cores, then per row the running
//             maximum m and sum l, P = exp(scale S - m) rounded to bf16, O rescaled by
//             exp(m_old - m) and O += P V on tensor cores (exponentials base 2: kLog2e below).
//             Writes out = O / l and the row's log-sum-exp L = m + log l (B, NH, T). The T x T
//             scores never leave shared memory.
//   backward  delta_i = dO_i . O_i is computed before (the CUDA backend's delta kernel, or the CPU
//             driver), with dO rounded to bf16 as dP takes it, so that each row of dS sums to
//             zero as softmax's gradient does. A block per kCols key rows walks the query tiles at
//             or after it and accumulates dV += P^T dO and dK += dS^T Q (with grouped-query
//             attention, the query tiles of every query head of its K/V head's group, in head
//             order); a block per kRows query rows walks the key tiles at or before it and
//             accumulates dQ += dS K, where
//             P = exp(scale S - L), dP = dO V^T and dS = scale P (dP - delta). Two kinds of block
//             instead of atomics on dQ: every gradient is summed in a fixed order (7 products per
//             tile pair instead of FlashAttention-2's 5). dQ, dK and dV stay in the warps'
//             accumulators (registers) from the first tile to the last; O goes through shared
//             memory, since the online softmax rescales it by row.
// Roundings to bf16, as FlashAttention-2 does them: P before P V and P^T dO; dO (when fp32) as it
// is staged; dS before dS^T Q and dS K. Everything else is fp32: S, dP, the statistics, O, dQ, dK,
// dV and every product's accumulation.
//
// A Block (the backend's execution of one tile) provides:
//   shared()            the tile's scratch, at least the Layout's bytes, 128-byte aligned
//   thread(), threads() this thread and how many work on the tile (a loop `for (e = thread(); e <
//                       n; e += threads())` covers 0 .. n - 1 once, whoever runs it)
//   warp(), warps()     the same for groups that compute 16 x 16 products together
//   lane(), lanes()     the same for the threads of a warp
//   warp_max(x), warp_sum(x)
//                       x over the warp's lanes, returned to each (a warp-wide call)
//   warp_sync()         a barrier for the warp's lanes
//   sync()              a barrier: all of the tile's writes to shared() before it are seen after it
//   kWarps              warps() as a constant
//   Acc                 a warp's 16 x 16 fp32 accumulator, whose elements only the calls below touch
//   acc_zero(c), acc_load(c, p, ld), acc_store(p, ld, c)
//                       c = 0; c = the row-major 16 x 16 at p; the reverse
//   mma<ACol, BCol>(c, a, lda, b, ldb, K)
//                       c += A B, with A 16 x K and B K x 16 in bf16, row-major or column-major as
//                       ACol/BCol say; K a multiple of 16
// The acc_ and mma calls are warp-wide: every thread of the warp makes them.
//
// Memory moves between the slices and the tiles in units of 8 elements (load8, store8): 16 bytes
// of bf16, one 128-bit access on a GPU. qkv, a bf16 out, dO and dqkv must be 16-byte aligned (the
// CUDA launchers check; device allocations are 256-byte aligned); every row then starts on a
// unit, since the head size and the row strides are multiples of 16 elements.
//
// Not part of the engine's API; included by src/runtime/cpu and src/runtime/cuda only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime/element_math.h"
#include "stagecraft/runtime/bf16.h"

#if defined(__CUDACC__)
#define STAGECRAFT_TILE __device__ __forceinline__
#define STAGECRAFT_UNROLL _Pragma("unroll")
#else
#define STAGECRAFT_TILE inline
#define STAGECRAFT_UNROLL
#endif

namespace stagecraft::runtime::flash {

inline constexpr int kRows = 64;  // query rows per tile
inline constexpr int kCols = 64;  // key rows per tile
inline constexpr int kMaxHead = 128;
static_assert(kRows == kCols, "tiles of queries and keys start together on the diagonal");

// Whether the tile program takes a head size.
STAGECRAFT_HD bool takes_head(int hs) { return hs > 0 && hs % 16 == 0 && hs <= kMaxHead; }

// Leading dimensions of the shared tiles, padded by 16 bytes so that the rows of a 16 x 16 load
// fall in different memory banks; they stay multiples of 16 bytes and every 16-row or 16-column
// step stays 32-byte aligned, as wmma's loads need.
STAGECRAFT_HD int ld16(int width) { return width + 8; }  // bf16
STAGECRAFT_HD int ld32(int width) { return width + 4; }  // fp32

// Byte offsets of a tile's arrays in its shared scratch, and the total.
struct Layout {
  size_t q = 0, k = 0, v = 0, dout = 0;  // bf16, kRows or kCols x ld16(HS)
  size_t s = 0, dp = 0;                  // fp32, kRows x ld32(kCols)
  size_t p = 0, ds = 0;                  // bf16, kRows x ld16(kCols)
  size_t acc = 0;                        // fp32, kRows x ld32(HS): O (forward only)
  size_t row = 0, row2 = 0;              // fp32, kRows: m and l, or L and delta
  size_t bytes = 0;
};

enum class Pass { kForward, kKeyGrads, kQueryGrads };

// Reserves n bytes at offset `at`, rounded up to 128 bytes; returns where they start.
STAGECRAFT_HD size_t take(size_t& at, size_t n) {
  const size_t here = at;
  at += (n + 127) / 128 * 128;
  return here;
}

STAGECRAFT_HD Layout layout(Pass pass, int hs) {
  const size_t in = size_t(kRows) * ld16(hs) * 2, score = size_t(kRows) * ld32(kCols) * 4,
               prob = size_t(kRows) * ld16(kCols) * 2, acc = size_t(kRows) * ld32(hs) * 4, row = size_t(kRows) * 4;
  Layout l;
  size_t at = 0;
  l.q = take(at, in);
  l.k = take(at, in);
  l.v = take(at, in);
  if (pass != Pass::kForward) l.dout = take(at, in);
  l.s = take(at, score);
  if (pass != Pass::kForward) l.dp = take(at, score);
  if (pass != Pass::kQueryGrads) l.p = take(at, prob);
  if (pass != Pass::kForward) l.ds = take(at, prob);
  if (pass == Pass::kForward) l.acc = take(at, acc);
  l.row = take(at, row);
  l.row2 = take(at, row);
  l.bytes = at;
  return l;
}

// The arrays of a Layout in a tile's scratch (those a pass does not have point at its start;
// every offset is a multiple of 128 bytes).
struct Arrays {
  bf16 *q, *k, *v, *dout, *p, *ds;
  float *s, *dp, *acc, *row, *row2;
};

STAGECRAFT_HD Arrays arrays(unsigned char* sm, const Layout& l) {
  bf16* low = reinterpret_cast<bf16*>(sm);
  float* wide = reinterpret_cast<float*>(sm);
  return {low + l.q / 2,  low + l.k / 2,  low + l.v / 2,   low + l.dout / 2, low + l.p / 2,   low + l.ds / 2,
          wide + l.s / 4, wide + l.dp / 4, wide + l.acc / 4, wide + l.row / 4, wide + l.row2 / 4};
}

// Exponentials are taken base 2, with the scale and log2(e) folded into one factor of the score:
// exp2(scale_log2 S - m) is one multiply-add and the GPU's exp2 instruction, where exp(scale S - m)
// is a multiply, a subtraction and exp's range reduction. The running maxima m are kept in that
// base-2 unit; the log-sum-exp L written out stays natural (m ln 2 + log l).
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// One (sequence, query head) slice of qkv, dqkv and the per-row arrays, with the key/value head
// that query head reads: qkv rows are (NH + 2 NKV) hs wide, q | k | v.
struct Slice {
  int T = 0, NH = 0, NKV = 0, hs = 0;
  float scale = 0;       // 1 / sqrt(hs)
  float scale_log2 = 0;  // scale log2(e): exp(scale S - x) = exp2(scale_log2 S - x log2(e))
  int b = 0, h = 0;
  int kvh = 0;  // h / (NH / NKV)
  STAGECRAFT_TILE size_t qkv_at(int t, int which) const {  // which: 0 q (head h), 1 k, 2 v (head kvh)
    const size_t row = (size_t(b) * T + t) * size_t(NH + 2 * NKV) * hs;
    return row + (which == 0 ? size_t(h) : size_t(NH) + size_t(which - 1) * NKV + kvh) * hs;
  }
  STAGECRAFT_TILE size_t out_at(int t) const { return (size_t(b) * T + t) * NH * hs + size_t(h) * hs; }
  // Row t of q, k or v (which 0, 1, 2: qkv_at), or of out, dO (which -1: out_at).
  STAGECRAFT_TILE size_t at(int t, int which) const { return which < 0 ? out_at(t) : qkv_at(t, which); }
  STAGECRAFT_TILE size_t row_at(int t) const { return (size_t(b) * NH + h) * T + t; }
};

// The slice of (sequence, query head) bh, of NH query heads over NKV key/value heads (NKV
// divides NH; NKV = NH: multi-head attention).
STAGECRAFT_HD Slice slice_of(int T, int NH, int hs, int NKV, int bh) {
  Slice s;
  s.T = T;
  s.NH = NH;
  s.NKV = NKV;
  s.hs = hs;
  s.scale = 1.0f / sqrtf(float(hs));
  s.scale_log2 = s.scale * kLog2e;
  s.b = bh / NH;
  s.h = bh % NH;
  s.kvh = s.h / (NH / NKV);
  return s;
}

// The key gradients' slice of (sequence, key/value head) bkv: the slice of the first query head
// of its group, from which key_grads_tile walks the group's NH / NKV query heads.
STAGECRAFT_HD Slice key_slice_of(int T, int NH, int hs, int NKV, int bkv) {
  return slice_of(T, NH, hs, NKV, bkv / NKV * NH + bkv % NKV * (NH / NKV));
}

// delta = dO . O of one row of hs elements, summed in order; with round_dout, dO rounded to bf16
// first, as the tensor cores take it for dP (the fp32-core kernels take it as it is). dO and O are
// fp32 or bf16 each.
template <typename Dout, typename Out>
STAGECRAFT_HD float row_delta(const Dout* dout, const Out* out, int hs, bool round_dout) {
  float sum = 0.0f;
  for (int d = 0; d < hs; ++d) {
    const float dy = element::load(dout + d);
    sum += (round_dout ? to_float(to_bf16(dy)) : dy) * element::load(out + d);
  }
  return sum;
}

STAGECRAFT_TILE int smaller(int a, int b) { return a < b ? a : b; }

// Eight bf16 values: the unit of the moves between a slice and a tile.
struct alignas(16) Bf16x8 {
  bf16 v[8];
};

STAGECRAFT_HD bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Eight elements at p (16-byte aligned where bf16) as bf16: as they are, or fp32 rounded.
STAGECRAFT_TILE Bf16x8 load8(const bf16* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const Bf16x8*>(p);
#else
  Bf16x8 u;
  std::memcpy(&u, p, sizeof u);
  return u;
#endif
}
STAGECRAFT_TILE Bf16x8 load8(const float* p) {
  Bf16x8 u;
  for (int i = 0; i < 8; ++i) u.v[i] = to_bf16(p[i]);
  return u;
}
STAGECRAFT_TILE void put8(bf16* p, const Bf16x8& u) {  // p: shared or global, 16-byte aligned
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Bf16x8*>(p) = u;
#else
  std::memcpy(p, &u, sizeof u);
#endif
}
// Eight fp32 values x, stored at p as fp32 or rounded to bf16.
STAGECRAFT_TILE void store8(float* p, const float* x) {
  for (int i = 0; i < 8; ++i) p[i] = x[i];
}
STAGECRAFT_TILE void store8(bf16* p, const float* x) {
  Bf16x8 u;
  for (int i = 0; i < 8; ++i) u.v[i] = to_bf16(x[i]);
  put8(p, u);
}

// Copies rows t0 .. t0 + n - 1 of q, k or v (bf16; which 0, 1, 2) or of dO (fp32, rounded to bf16
// on the way in, or bf16; which -1) into a tile of `rows` rows, zeros past n.
template <typename Block, typename Src>
STAGECRAFT_TILE void stage_rows(const Block& blk, bf16* tile, const Src* src, const Slice& s, int which, int t0, int n, int rows) {
  const int ld = ld16(s.hs), units = s.hs / 8;
  for (int e = blk.thread(); e < rows * units; e += blk.threads()) {
    const int r = e / units, d = e % units * 8;
    put8(tile + r * ld + d, r < n ? load8(src + s.at(t0 + r, which) + d) : Bf16x8{});
  }
}

// Key and value rows t0 .. t0 + n - 1 into kCols-row tiles.
template <typename Block>
STAGECRAFT_TILE void stage_keys(const Block& blk, bf16* K, bf16* V, const bf16* qkv, const Slice& s, int t0, int n) {
  stage_rows(blk, K, qkv, s, 1, t0, n, kCols);
  stage_rows(blk, V, qkv, s, 2, t0, n, kCols);
}

template <typename Block>
STAGECRAFT_TILE void zero(const Block& blk, float* acc, int rows, int hs) {
  const int ld = ld32(hs);
  for (int e = blk.thread(); e < rows * hs; e += blk.threads()) acc[(e / hs) * ld + e % hs] = 0.0f;
}

// c (16 x 16 fp32, row-major, in shared memory) = (accumulate ? c : 0) + A B (Block's mma).
template <bool ACol, bool BCol, typename Block>
STAGECRAFT_TILE void product(const Block& blk, float* c, int ldc, bool accumulate, const bf16* a, int lda, const bf16* b, int ldb, int K) {
  typename Block::Acc acc;
  if (accumulate) {
    blk.acc_load(acc, c, ldc);
  } else {
    blk.acc_zero(acc);
  }
  blk.template mma<ACol, BCol>(acc, a, lda, b, ldb, K);
  blk.acc_store(c, ldc, acc);
}

// How many 16 x 16 tiles of a (64 x HS) gradient a warp keeps in its accumulators, at most.
template <typename Block>
inline constexpr int kGradTiles = (kRows / 16) * (kMaxHead / 16) / Block::kWarps;

// Whether 16 x 16 tile (ti, tj) of the scores of query rows i0.. and key rows j0.. lies wholly
// above the diagonal (every key after every query): the causal mask zeroes it, so it is skipped.
STAGECRAFT_TILE bool above_diagonal(int i0, int ti, int j0, int tj) { return j0 + tj * 16 > i0 + ti * 16 + 15; }

// S = Q K^T (and dP = dO V^T where dp) for the 16 x 16 tiles not above the diagonal.
template <typename Block>
STAGECRAFT_TILE void scores(const Block& blk, float* S, float* dP, const bf16* Q, const bf16* K, const bf16* dO, const bf16* V,
                            int i0, int j0, int hs) {
  const int ldi = ld16(hs), lds = ld32(kCols);
  constexpr int tiles = (kRows / 16) * (kCols / 16);
  for (int t = blk.warp(); t < (dP ? 2 : 1) * tiles; t += blk.warps()) {
    const int u = t % tiles, ti = u / (kCols / 16), tj = u % (kCols / 16);
    if (above_diagonal(i0, ti, j0, tj)) continue;
    const bool second = t >= tiles;
    product<false, true>(blk, (second ? dP : S) + ti * 16 * lds + tj * 16, lds, false, (second ? dO : Q) + ti * 16 * ldi, ldi,
                         (second ? V : K) + tj * 16 * ldi, ldi, hs);
  }
}

// O (kRows x hs, in shared memory) += P V: P (kRows x kCols) and V (kCols x hs) row-major.
template <typename Block>
STAGECRAFT_TILE void accumulate_out(const Block& blk, float* O, const bf16* P, const bf16* V, int hs) {
  const int ldp = ld16(kCols), ldv = ld16(hs), ldo = ld32(hs);
  const int tiles = (kRows / 16) * (hs / 16);
  for (int t = blk.warp(); t < tiles; t += blk.warps()) {
    const int ti = t / (hs / 16), td = t % (hs / 16);
    product<false, false>(blk, O + ti * 16 * ldo + td * 16, ldo, true, P + ti * 16 * ldp, ldp, V + td * 16, ldv, kCols);
  }
}

// A gradient (64 x hs) in the warps' accumulators: tile t = warp + i x warps is acc[i].
template <typename Block>
struct Grad {
  typename Block::Acc acc[kGradTiles<Block>];
};

template <typename Block>
STAGECRAFT_TILE void zero_grad(const Block& blk, Grad<Block>& g) {
  STAGECRAFT_UNROLL
  for (int i = 0; i < kGradTiles<Block>; ++i) blk.acc_zero(g.acc[i]);
}

// g += A B with A = a (64 x 64, row-major) or a^T (ACol), and B = b (64 x hs, row-major); the
// loop is unrolled to its constant bound so that each accumulator stays in registers.
template <bool ACol, typename Block>
STAGECRAFT_TILE void accumulate_grad(const Block& blk, Grad<Block>& g, const bf16* a, const bf16* b, int hs) {
  const int lda = ld16(kCols), ldb = ld16(hs), tiles = (kRows / 16) * (hs / 16);
  STAGECRAFT_UNROLL
  for (int i = 0; i < kGradTiles<Block>; ++i) {
    const int t = blk.warp() + i * blk.warps();
    if (t >= tiles) break;
    const int ti = t / (hs / 16), td = t % (hs / 16);
    blk.template mma<ACol, false>(g.acc[i], ACol ? a + ti * 16 : a + ti * 16 * lda, lda, b + td * 16, ldb, kRows);
  }
}

// Writes rows 0 .. n - 1 of a gradient to dqkv's q, k or v part at rows t0 .. (fp32, or rounded
// to bf16), through `stage` (64 x ld32(hs) fp32 of shared memory, free until the call returns).
template <typename Block, typename Grads>
STAGECRAFT_TILE void store_grad(const Block& blk, Grads* dqkv, const Grad<Block>& g, float* stage, const Slice& s, int which, int t0, int n) {
  const int hs = s.hs, ld = ld32(hs), tiles = (kRows / 16) * (hs / 16);
  STAGECRAFT_UNROLL
  for (int i = 0; i < kGradTiles<Block>; ++i) {
    const int t = blk.warp() + i * blk.warps();
    if (t >= tiles) break;
    blk.acc_store(stage + (t / (hs / 16)) * 16 * ld + (t % (hs / 16)) * 16, ld, g.acc[i]);
  }
  blk.sync();
  const int units = hs / 8;
  for (int e = blk.thread(); e < n * units; e += blk.threads()) {
    const int r = e / units, d = e % units * 8;
    store8(dqkv + s.qkv_at(t0 + r, which) + d, stage + r * ld + d);
  }
  blk.sync();
}

// Forward, query rows q0 = qtile x kRows ..: out (B, T, C) in fp32 or bf16, lse (B, NH, T).
template <typename Block, typename Out>
STAGECRAFT_TILE void forward_tile(const Block& blk, Out* out, float* lse, const bf16* qkv, const Slice& s, int qtile) {
  const Arrays a = arrays(blk.shared(), layout(Pass::kForward, s.hs));
  bf16 *Q = a.q, *K = a.k, *V = a.v, *P = a.p;
  float *S = a.s, *O = a.acc, *m = a.row, *l = a.row2;
  const int hs = s.hs, lds = ld32(kCols), ldp = ld16(kCols), ldo = ld32(hs);
  const int q0 = qtile * kRows, rows = smaller(kRows, s.T - q0);
  stage_rows(blk, Q, qkv, s, 0, q0, rows, kRows);
  zero(blk, O, kRows, hs);
  for (int r = blk.thread(); r < kRows; r += blk.threads()) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (int j0 = 0; j0 < q0 + rows; j0 += kCols) {
    const int cols = smaller(kCols, s.T - j0);
    stage_keys(blk, K, V, qkv, s, j0, cols);
    blk.sync();
    scores(blk, S, nullptr, Q, K, nullptr, nullptr, q0, j0, hs);
    blk.sync();
    // Online softmax, a warp per row, its lanes along the row; keys past the row (or past T) get
    // probability 0.
    for (int r = blk.warp(); r < kRows; r += blk.warps()) {
      const int valid = r < rows ? smaller(cols, q0 + r - j0 + 1) : 0;
      float mx = -INFINITY;
      for (int c = blk.lane(); c < valid; c += blk.lanes()) mx = fmaxf(mx, S[r * lds + c]);
      const float m_old = m[r], m_new = fmaxf(m_old, blk.warp_max(mx) * s.scale_log2);  // scale > 0: the same maximum
      const float corr = m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);  // 0 on the row's first keys
      float sum = 0.0f;
      for (int c = blk.lane(); c < kCols; c += blk.lanes()) {
        const float p = c < valid ? exp2f(S[r * lds + c] * s.scale_log2 - m_new) : 0.0f;
        P[r * ldp + c] = to_bf16(p);
        sum += p;
      }
      sum = blk.warp_sum(sum);
      for (int d = blk.lane(); d < hs; d += blk.lanes()) O[r * ldo + d] *= corr;
      blk.warp_sync();  // every lane has read m and l
      if (blk.lane() == 0) {
        l[r] = l[r] * corr + sum;
        m[r] = m_new;
      }
    }
    blk.sync();
    accumulate_out(blk, O, P, V, hs);
    blk.sync();
  }
  const int units = hs / 8;
  for (int e = blk.thread(); e < rows * units; e += blk.threads()) {
    const int r = e / units, d = e % units * 8;
    float o[8];
    for (int i = 0; i < 8; ++i) o[i] = O[r * ldo + d + i] / l[r];
    store8(out + s.out_at(q0 + r) + d, o);
  }
  for (int r = blk.thread(); r < rows; r += blk.threads()) lse[s.row_at(q0 + r)] = m[r] * kLn2 + logf(l[r]);
}

// A score's probability P = exp(scale S - L) under its row's log-sum-exp L, given as L2 = L log2(e)
// (log2e_of), and its gradient dS = scale P (dP - delta), both 0 where `in` is false (the causal
// mask, the sequence's end); every pass of both programs (this one and flash_mma.h) takes them from
// here.
struct ProbGrad {
  float p, ds;
};
STAGECRAFT_TILE float log2e_of(float L) { return L * kLog2e; }
STAGECRAFT_TILE ProbGrad prob_grad(bool in, float S, float dP, float L2, float delta, const Slice& s) {
  const float p = in ? exp2f(S * s.scale_log2 - L2) : 0.0f;
  return {p, in ? s.scale * p * (dP - delta) : 0.0f};
}

// P and dS of a staged score tile: query rows i0 .. i0 + rows - 1, key rows j0 .. j0 + cols - 1.
// Writes P only where P is given.
template <typename Block>
STAGECRAFT_TILE void probabilities(const Block& blk, bf16* P, bf16* dS, const float* S, const float* dP, const float* L, const float* delta,
                                   const Slice& s, int i0, int rows, int j0, int cols) {
  const int lds = ld32(kCols), ldp = ld16(kCols);
  for (int e = blk.thread(); e < kRows * kCols; e += blk.threads()) {
    const int r = e / kCols, c = e % kCols;
    const bool in = r < rows && c < cols && j0 + c <= i0 + r;
    const ProbGrad g = prob_grad(in, S[r * lds + c], dP[r * lds + c], log2e_of(L[r]), delta[r], s);
    if (P) P[r * ldp + c] = to_bf16(g.p);
    dS[r * ldp + c] = to_bf16(g.ds);
  }
}

// The per-row L and delta of query rows i0 .. i0 + rows - 1 (0 past them).
template <typename Block>
STAGECRAFT_TILE void stage_row_stats(const Block& blk, float* Ls, float* Ds, const float* lse, const float* delta, const Slice& s, int i0,
                                     int rows) {
  for (int r = blk.thread(); r < kRows; r += blk.threads()) {
    Ls[r] = r < rows ? lse[s.row_at(i0 + r)] : 0.0f;
    Ds[r] = r < rows ? delta[s.row_at(i0 + r)] : 0.0f;
  }
}

// dK and dV of key rows k0 = ktile x kCols .. of key/value head s.kvh, into dqkv (B, T,
// (NH + 2 NKV) hs) (overwritten there). s is key_slice_of's: the tile walks the query heads of the
// group, s.h .. s.h + NH / NKV - 1, each over its query tiles, summing into the same accumulators
// (grouped-query attention: a key's gradient sums over every query head that reads it). dO and
// dqkv are fp32 or bf16 each.
template <typename Block, typename Grads, typename Dout>
STAGECRAFT_TILE void key_grads_tile(const Block& blk, Grads* dqkv, const bf16* qkv, const Dout* dout, const float* lse, const float* delta,
                                    const Slice& s, int ktile) {
  const Arrays a = arrays(blk.shared(), layout(Pass::kKeyGrads, s.hs));
  bf16 *Q = a.q, *K = a.k, *V = a.v, *dO = a.dout, *P = a.p, *dS = a.ds;
  float *S = a.s, *dP = a.dp, *Ls = a.row, *Ds = a.row2;
  const int hs = s.hs;
  const int k0 = ktile * kCols, cols = smaller(kCols, s.T - k0);
  stage_keys(blk, K, V, qkv, s, k0, cols);
  Grad<Block> dK, dV;
  zero_grad(blk, dK);
  zero_grad(blk, dV);
  for (int g = 0; g < s.NH / s.NKV; ++g) {
    Slice q = s;  // query head s.h + g, reading the same key/value head
    q.h = s.h + g;
    for (int i0 = k0 / kRows * kRows; i0 < s.T; i0 += kRows) {
      const int rows = smaller(kRows, s.T - i0);
      stage_rows(blk, Q, qkv, q, 0, i0, rows, kRows);
      stage_rows(blk, dO, dout, q, -1, i0, rows, kRows);
      stage_row_stats(blk, Ls, Ds, lse, delta, q, i0, rows);
      blk.sync();
      scores(blk, S, dP, Q, K, dO, V, i0, k0, hs);
      blk.sync();
      probabilities(blk, P, dS, S, dP, Ls, Ds, q, i0, rows, k0, cols);
      blk.sync();
      accumulate_grad<true>(blk, dV, P, dO, hs);
      accumulate_grad<true>(blk, dK, dS, Q, hs);
      blk.sync();
    }
  }
  store_grad(blk, dqkv, dK, S, s, 1, k0, cols);  // S and dP, side by side, hold 64 x ld32(hs)
  store_grad(blk, dqkv, dV, S, s, 2, k0, cols);
}

// dQ of query rows q0 = qtile x kRows .., into dqkv (overwritten there).
template <typename Block, typename Grads, typename Dout>
STAGECRAFT_TILE void query_grads_tile(const Block& blk, Grads* dqkv, const bf16* qkv, const Dout* dout, const float* lse, const float* delta,
                                      const Slice& s, int qtile) {
  const Arrays a = arrays(blk.shared(), layout(Pass::kQueryGrads, s.hs));
  bf16 *Q = a.q, *K = a.k, *V = a.v, *dO = a.dout, *dS = a.ds;
  float *S = a.s, *dP = a.dp, *Ls = a.row, *Ds = a.row2;
  const int hs = s.hs;
  const int q0 = qtile * kRows, rows = smaller(kRows, s.T - q0);
  stage_rows(blk, Q, qkv, s, 0, q0, rows, kRows);
  stage_rows(blk, dO, dout, s, -1, q0, rows, kRows);
  stage_row_stats(blk, Ls, Ds, lse, delta, s, q0, rows);
  Grad<Block> dQ;
  zero_grad(blk, dQ);
  for (int j0 = 0; j0 < q0 + rows; j0 += kCols) {
    const int cols = smaller(kCols, s.T - j0);
    stage_keys(blk, K, V, qkv, s, j0, cols);
    blk.sync();
    scores(blk, S, dP, Q, K, dO, V, q0, j0, hs);
    blk.sync();
    probabilities(blk, static_cast<bf16*>(nullptr), dS, S, dP, Ls, Ds, s, q0, rows, j0, cols);
    blk.sync();
    accumulate_grad<false>(blk, dQ, dS, K, hs);
    blk.sync();
  }
  store_grad(blk, dqkv, dQ, S, s, 0, q0, rows);
}

}  // namespace stagecraft::runtime::flash
