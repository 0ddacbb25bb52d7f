// Hopper's warpgroup products as a Core of runtime/flash_mma.h's program (its comment says what a
// Core is): the block's four warps are one warpgroup, and each product is `wgmma.mma_async`
// m64nNk16 (bf16 operands, fp32 accumulation), PTX ISA 8.0, sm_90a. The accumulators are those of
// mma.sync: warp w holds rows 16 w .. 16 w + 15 of the 64 as C fragments, so the program's softmax,
// masks and stores are the same code; and the A fragments a product takes from registers (P, dS)
// are mma.sync's A fragments.
//
// Where MmaSync has each warp load both operands into registers with ldmatrix (four warps read the
// same B tile four times), wgmma reads B, and here A where it is a tile too, straight from shared
// memory through a descriptor, once for the warpgroup:
//   times_transposed   S = Q K^T and its kin: A (64 x D) and B^T (N x D) both tiles, K-major
//                      (the D columns a row's contiguous elements): wgmma with A and B from
//                      shared memory, D / 16 instructions of k16
//   times              O += P V and its kin: A (P or dS) from registers, B the K x D tile read
//                      MN-major (a row's contiguous elements run along the output's D columns):
//                      K / 16 instructions, B transposed (imm-trans-b 1)
// Products between begin and end are issued asynchronously and end waits for all of them
// (wgmma.commit_group, wgmma.wait_group 0); begin and end also hold the accumulators and register
// operands in place around them (an empty asm that reads and writes each, as CUTLASS's
// warpgroup_fence_operand), and begin's wgmma.fence orders the registers' earlier writes before the
// products read them.
//
// Tiles are stored in the 128-byte swizzle that the descriptors name: a tile of R rows and D
// columns (D a multiple of 64) is D / 64 blocks of R rows x 64 columns, each row 128 bytes, and the
// 16-byte unit u of row r sits at unit u ^ (r % 8) of its row. wgmma's hardware applies that XOR
// to bits 4-6 of a shared address from bits 7-9, so every tile starts 1024-byte aligned (kAlign;
// the Exec rounds the block's shared memory up to 1024, kSlack). The same bytes serve both
// readings: K-major, 8-row groups 1024 bytes apart (SBO) and a k16 step 32 bytes along the row;
// MN-major, 8 k-rows a group 1024 bytes apart (SBO), a k16 step 2048 bytes on, and the second
// 64-column block (D 128) rows x 128 bytes on (LBO). A copy into a tile (cp.async, or stores) is
// made visible to wgmma, which reads through the async proxy, by fence.proxy.async before the
// block's barrier (seen).
//
// The Exec of a Wgmma program adds to flash_mma.h's:
//   shared_address(p)          p's address in the shared window (what a descriptor holds)
//   wgmma_ss<N>(acc, da, db)   acc (16 x N of this warp) += A B over k16, A and B K-major tiles
//   wgmma_rs<N, TransB>(acc, a, db)
//                              the same with A this warp's A fragment a[4]; B MN-major where
//                              TransB is 1
//   wgmma_fence(), wgmma_commit(), wgmma_wait<N>(), async_fence(), hold(x)
// The CUDA backend runs it on sm_90a (cuda/flash_wgmma.cu); the suites run it on the CPU under
// tests/engine/warp_emulator.h, which reads every descriptor as the PTX ISA defines it.
//
// Not part of the engine's API; included by src/runtime/cuda and the suites only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/flash_mma.h"

namespace stagecraft::runtime::flash_mma {

// A wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the
// start address, 16-29 the leading and 32-45 the stride byte offsets (each in 16-byte units),
// 62-63 the swizzle (1: 128 bytes); base offset 0 (every pattern starts 1024-byte aligned).
STAGECRAFT_HD constexpr uint64_t descriptor(uint32_t start, uint32_t leading, uint32_t stride) {
  return uint64_t((start >> 4) & 0x3fffu) | uint64_t((leading >> 4) & 0x3fffu) << 16 | uint64_t((stride >> 4) & 0x3fffu) << 32 |
         uint64_t(1) << 62;
}

inline constexpr uint32_t kSwizzleRow = 128, kSwizzleGroup = 8 * kSwizzleRow;

struct Wgmma {
  static constexpr size_t kAlign = kSwizzleGroup, kSlack = kSwizzleGroup;
  // Head sizes it is compiled for: whole 64-column blocks.
  template <int D>
  static constexpr bool kTakes = D % 64 == 0;

  template <int D>
  static constexpr int tile_elements(int rows) {
    return rows * D;
  }
  template <int D>
  STAGECRAFT_TILE static bf16* unit(bf16* tile, int rows, int r, int d) {
    return tile + (d / 64) * rows * 64 + r * 64 + (((d % 64) / 8) ^ (r & 7)) * 8;
  }

  template <int D>
  struct Operand {
    uint32_t at = 0;  // the 64-row tile's shared address
  };
  template <int D, typename E>
  STAGECRAFT_TILE static void load(const E& e, Operand<D>& a, const bf16* tile) {
    a.at = e.shared_address(tile);
  }

  // K-major descriptor of k16 step kk of a tile of `rows` rows at shared address at.
  STAGECRAFT_TILE static uint64_t k_major(uint32_t at, int rows, int kk) {
    return descriptor(at + uint32_t(kk / 4) * uint32_t(rows) * kSwizzleRow + uint32_t(kk % 4) * 32, 16, kSwizzleGroup);
  }
  // MN-major descriptor of rows 16 kk .. 16 kk + 15 of a tile of `rows` rows.
  STAGECRAFT_TILE static uint64_t mn_major(uint32_t at, int rows, int kk) {
    return descriptor(at + uint32_t(kk) * 2 * kSwizzleGroup, uint32_t(rows) * kSwizzleRow, kSwizzleGroup);
  }

  template <int D, int N, typename E>
  STAGECRAFT_TILE static void times_transposed(const E& e, float (&acc)[N / 8][4], const Operand<D>& a, const bf16* bt) {
    const uint32_t b = e.shared_address(bt);
    STAGECRAFT_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) e.template wgmma_ss<N>(acc, k_major(a.at, kTile, kk), k_major(b, N, kk));
  }
  template <int D, int K, typename E>
  STAGECRAFT_TILE static void times(const E& e, float (&acc)[D / 8][4], const uint32_t (&a)[K / 16][4], const bf16* b) {
    const uint32_t at = e.shared_address(b);
    STAGECRAFT_UNROLL
    for (int kk = 0; kk < K / 16; ++kk) e.template wgmma_rs<D, 1>(acc, a[kk], mn_major(at, K, kk));
  }

  template <typename E, typename T, size_t N, size_t M>
  STAGECRAFT_TILE static void hold(const E& e, T (&x)[N][M]) {
    STAGECRAFT_UNROLL
    for (size_t i = 0; i < N; ++i) {
      STAGECRAFT_UNROLL
      for (size_t j = 0; j < M; ++j) e.hold(x[i][j]);
    }
  }
  template <typename E, typename... Acc>
  STAGECRAFT_TILE static void begin(const E& e, Acc&... acc) {
    (hold(e, acc), ...);
    e.wgmma_fence();
  }
  template <typename E, typename... Acc>
  STAGECRAFT_TILE static void end(const E& e, Acc&... acc) {
    e.wgmma_commit();
    e.template wgmma_wait<0>();
    (hold(e, acc), ...);
  }
  template <typename E>
  STAGECRAFT_TILE static void seen(const E& e) {
    e.async_fence();
  }
};

}  // namespace stagecraft::runtime::flash_mma
