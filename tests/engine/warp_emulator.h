// Runs a CUDA block's program written against runtime/flash_mma.h's execution interface on the
// CPU: one std::thread per CUDA thread (kThreads of them), a std::barrier per warp for the
// warp-wide instructions and one for the block's __syncthreads. ldmatrix, mma.sync m16n8k16 and
// shfl.xor exchange their operands through the warp's slots exactly as the PTX ISA defines their
// fragments, so a wrong fragment index, a missing barrier before another warp's shared-memory
// writes are read, or an address outside the block's shared memory shows in the results or
// stops the program with a message here. The products accumulate in fp32 in k order (a GPU's order inside one
// instruction is its own). The warpgroup products of runtime/flash_wgmma.h read their shared
// operands through their descriptors (wgmma_ss, wgmma_rs below).
#pragma once

#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/flash_mma.h"
#include "runtime/flash_wgmma.h"

namespace stagecraft::test {

class WarpEmulator {
 public:
  static constexpr int kThreads = runtime::flash_mma::kThreads;
  static constexpr int kWarps = kThreads / 32;

  // Runs body(lane_exec) on kThreads threads for one block with `bytes` of shared memory (filled
  // with NaN bits, as nothing on a GPU promises zeros).
  template <typename Body>
  static void run_block(size_t bytes, Body&& body) {
    Block blk(bytes);
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) threads.emplace_back([&blk, &body, t] { body(Lane{&blk, t}); });
    for (auto& th : threads) th.join();
  }

 private:
  struct Slot {
    const runtime::bf16* addr = nullptr;
    uint32_t a[4] = {};
    uint32_t b[2] = {};
    float f = 0;
  };
  struct Block {
    explicit Block(size_t bytes) : smem((bytes + 15) / 16), size(bytes), block(kThreads) {
      std::memset(smem.data(), 0xff, smem.size() * 16);
      for (int w = 0; w < kWarps; ++w) warp.emplace_back(std::make_unique<std::barrier<>>(32));
    }
    struct alignas(16) Chunk {
      unsigned char bytes[16];
    };
    std::vector<Chunk> smem;
    size_t size;
    std::barrier<> block;
    std::vector<std::unique_ptr<std::barrier<>>> warp;
    Slot slot[kWarps][32];
    // What wgmma may read, a 4-byte word of shared memory at a time: kFree (nothing copied there,
    // or stored by the threads themselves), kInFlight (a cp.async not yet waited for), kLanded
    // (waited for by its thread, not yet fenced for the async proxy), kFenced.
    enum : uint8_t { kFree, kInFlight, kLanded, kFenced };
    std::vector<uint8_t> word = std::vector<uint8_t>(smem.size() * 4, kFree);
    struct Copies {
      std::vector<std::pair<size_t, int>> in_flight;  // word, group
      std::vector<size_t> landed;
      int groups = 0;  // committed so far; the open group's index
    };
    Copies copies[kThreads];
    // Each thread's warpgroup products: 0 none in flight, 1 fenced (wgmma.fence), 2 issued,
    // 3 committed.
    int products[kThreads] = {};
  };

 public:
  // What flash_mma.h asks of an Exec, for one emulated thread.
  struct Lane {
    Block* blk;
    int tid;
    unsigned char* shared() const { return reinterpret_cast<unsigned char*>(blk->smem.data()); }
    int thread() const { return tid; }
    int warp() const { return tid / 32; }
    int lane() const { return tid % 32; }
    void sync() const {
      if (blk->products[tid] >= 2) fail("a barrier with warpgroup products issued and not waited for (wgmma.wait_group)");
      blk->block.arrive_and_wait();
    }
    void warp_sync() const { blk->warp[warp()]->arrive_and_wait(); }
    Slot& mine() const { return blk->slot[warp()][lane()]; }
    Slot& of(int lane) const { return blk->slot[warp()][lane]; }

    float shfl_xor(float x, int mask) const {
      mine().f = x;
      warp_sync();
      const float y = of(lane() ^ mask).f;
      warp_sync();
      return y;
    }

    // The bf16 at row r (0 .. 7), column col of matrix i, as the lanes gave its rows' addresses.
    uint16_t element(int i, int r, int col) const {
      const runtime::bf16* row = of(i * 8 + r).addr;
      const auto* base = reinterpret_cast<const unsigned char*>(blk->smem.data());
      const auto* at = reinterpret_cast<const unsigned char*>(row + col);
      if (at < base || at + 2 > base + blk->size) fail("ldmatrix reads outside the block's shared memory");
      return row[col].bits;
    }
    void load_matrices(uint32_t (&r)[4], const runtime::bf16* p, bool trans) const {
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0) fail("an ldmatrix row address is not 16-byte aligned");
      mine().addr = p;
      warp_sync();
      const int g = lane() >> 2, c = (lane() & 3) * 2;
      for (int i = 0; i < 4; ++i) {
        const uint16_t lo = trans ? element(i, c, g) : element(i, g, c);
        const uint16_t hi = trans ? element(i, c + 1, g) : element(i, g, c + 1);
        r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
      }
      warp_sync();
    }
    void ldsm(uint32_t (&r)[4], const runtime::bf16* p) const { load_matrices(r, p, false); }
    void ldsm_t(uint32_t (&r)[4], const runtime::bf16* p) const { load_matrices(r, p, true); }

    // The copies land at once. Which have been waited for is tracked for the warpgroup products'
    // reads below; for ldmatrix's, a missing wait shows only on a GPU, a missing sync() here too.
    void check_shared(const void* dst, size_t n) const {
      const auto* base = reinterpret_cast<const unsigned char*>(blk->smem.data());
      const auto* at = static_cast<const unsigned char*>(dst);
      if (at < base || at + n > base + blk->size) fail("a copy writes outside the block's shared memory");
      if (reinterpret_cast<uintptr_t>(dst) % n != 0) fail("a copy's shared-memory address is not aligned to its size");
    }
    void copied(const void* dst, size_t n) const {
      Block::Copies& c = blk->copies[tid];
      const size_t first = size_t(static_cast<const unsigned char*>(dst) - reinterpret_cast<const unsigned char*>(blk->smem.data())) / 4;
      for (size_t w = first; w < first + n / 4; ++w) {
        blk->word[w] = Block::kInFlight;
        c.in_flight.emplace_back(w, c.groups);
      }
    }
    void copy16(runtime::bf16* dst, const runtime::bf16* src, bool in) const {
      check_shared(dst, 16);
      if (in && reinterpret_cast<uintptr_t>(src) % 16 != 0) fail("a 16-byte copy's global address is not 16-byte aligned");
      in ? std::memcpy(dst, src, 16) : std::memset(dst, 0, 16);
      copied(dst, 16);
    }
    void copy4(float* dst, const float* src, bool in) const {
      check_shared(dst, 4);
      *dst = in ? *src : 0.0f;
      copied(dst, 4);
    }
    void commit() const { ++blk->copies[tid].groups; }
    // The copies of every group but the newest N have landed (for wgmma, once fenced).
    template <int N>
    void wait() const {
      Block::Copies& c = blk->copies[tid];
      std::vector<std::pair<size_t, int>> still;
      for (const auto& [w, group] : c.in_flight) {
        if (group < c.groups - N) {
          blk->word[w] = Block::kLanded;
          c.landed.push_back(w);
        } else {
          still.emplace_back(w, group);
        }
      }
      c.in_flight = std::move(still);
    }

    static float half(uint32_t pair, int which) {
      return runtime::to_float(runtime::bf16{uint16_t(which ? pair >> 16 : pair & 0xffffu)});
    }
    // Element (row, k) of the 16 x 16 A whose fragments this warp's lanes put in their slots.
    float a_element(int row, int k) const {
      const Slot& as = of((row % 8) * 4 + (k % 8) / 2);
      return half(as.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1);
    }
    void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) const {
      Slot& s = mine();
      for (int i = 0; i < 4; ++i) s.a[i] = a[i];
      s.b[0] = b0;
      s.b[1] = b1;
      warp_sync();
      const int g = lane() >> 2, c = (lane() & 3) * 2;
      for (int i = 0; i < 4; ++i) {
        const int row = g + (i >> 1) * 8, col = c + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; ++k) {
          const Slot& bs = of(col * 4 + (k % 8) / 2);
          acc += a_element(row, k) * half(bs.b[k >= 8 ? 1 : 0], k & 1);
        }
        d[i] = acc;
      }
      warp_sync();
    }

    // ---- the warpgroup products of runtime/flash_wgmma.h (wgmma.mma_async m64nNk16) ----
    // Issued and completed at once, but in the order a GPU needs checked: every product after a
    // wgmma.fence, none in flight at a barrier, and every copy it reads waited for and fenced for
    // the async proxy by the thread that made it (a store by the threads themselves is not
    // tracked). Warp w computes rows 16 w .. 16 w + 15 of the 64, its
    // lanes holding them as mma.sync's C fragments; every operand read from shared memory goes
    // through the descriptor as the PTX ISA defines it, the 128-byte swizzle applied to the
    // address's bits as the hardware applies it, so a tile staged in another layout, or one that
    // does not start 1024-byte aligned, gives wrong products here too.
    uint32_t shared_address(const void* p) const {
      const auto* base = reinterpret_cast<const unsigned char*>(blk->smem.data());
      const auto* at = static_cast<const unsigned char*>(p);
      if (at < base || at >= base + blk->size) fail("a shared address outside the block's shared memory");
      return uint32_t(at - base);
    }
    // The order of a thread's products: wgmma.fence, the products, commit, wait (for all: N 0).
    void wgmma_fence() const { blk->products[tid] = 1; }
    void issue() const {
      int& p = blk->products[tid];
      if (p == 0) fail("a warpgroup product without wgmma.fence before it");
      if (p == 3) fail("a warpgroup product after its group was committed, without a wgmma.fence");
      p = 2;
    }
    void wgmma_commit() const {
      if (blk->products[tid] == 2) blk->products[tid] = 3;
    }
    template <int N>
    void wgmma_wait() const {
      static_assert(N == 0, "the programs wait for all their products");
      blk->products[tid] = 0;
    }
    // fence.proxy.async: this thread's landed copies become visible to wgmma.
    void async_fence() const {
      Block::Copies& c = blk->copies[tid];
      for (size_t w : c.landed) {
        if (blk->word[w] == Block::kLanded) blk->word[w] = Block::kFenced;
      }
      c.landed.clear();
    }
    template <typename T>
    void hold(T&) const {}

    // Element (mn, k) of the matrix a descriptor gives: K-major, row mn of 16 k; MN-major, row k
    // of the mn columns.
    uint16_t described(uint64_t desc, bool mn_major, int mn, int k) const {
      const size_t start = size_t(desc & 0x3fffu) << 4, leading = size_t((desc >> 16) & 0x3fffu) << 4,
                   stride = size_t((desc >> 32) & 0x3fffu) << 4;
      if ((desc >> 62) != 1) fail("a wgmma descriptor without the 128-byte swizzle");
      if (((desc >> 49) & 7u) != 0) fail("a wgmma descriptor with a base offset");
      size_t at = mn_major ? start + size_t(mn / 64) * leading + size_t(k / 8) * stride + size_t(k % 8) * 128 + size_t(mn % 64 / 8) * 16 +
                                 size_t(mn % 8) * 2
                           : start + size_t(mn / 8) * stride + size_t(mn % 8) * 128 + size_t(k / 8) * 16 + size_t(k % 8) * 2;
      at ^= ((at >> 7) & 7u) << 4;
      if (at + 2 > blk->size) fail("wgmma reads outside the block's shared memory");
      if (blk->word[at / 4] == Block::kInFlight) fail("wgmma reads a copy into shared memory that was not waited for");
      if (blk->word[at / 4] == Block::kLanded) fail("wgmma reads a copy into shared memory not fenced for it (fence.proxy.async)");
      uint16_t bits;
      std::memcpy(&bits, reinterpret_cast<const unsigned char*>(blk->smem.data()) + at, 2);
      return bits;
    }
    static float wide(uint16_t bits) { return runtime::to_float(runtime::bf16{bits}); }

    // acc (this warp's 16 rows x N) += A B over 16 k, a(row, k) giving A's element of this
    // warp's row 0 .. 15.
    template <int N, typename A>
    void warpgroup_product(float (&acc)[N / 8][4], uint64_t b, bool trans_b, A&& a) const {
      const int g = lane() >> 2, c = (lane() & 3) * 2;
      for (int nt = 0; nt < N / 8; ++nt) {
        for (int i = 0; i < 4; ++i) {
          const int row = g + (i >> 1) * 8, col = nt * 8 + c + (i & 1);
          float sum = acc[nt][i];
          for (int k = 0; k < 16; ++k) sum += a(row, k) * wide(described(b, trans_b, col, k));
          acc[nt][i] = sum;
        }
      }
    }
    template <int N>
    void wgmma_ss(float (&acc)[N / 8][4], uint64_t a, uint64_t b) const {
      issue();
      const int w = warp();
      warpgroup_product<N>(acc, b, false, [&](int row, int k) { return wide(described(a, false, 16 * w + row, k)); });
    }
    template <int N, int TransB>
    void wgmma_rs(float (&acc)[N / 8][4], const uint32_t (&a)[4], uint64_t b) const {
      issue();
      Slot& s = mine();
      for (int i = 0; i < 4; ++i) s.a[i] = a[i];
      warp_sync();
      warpgroup_product<N>(acc, b, TransB == 1, [&](int row, int k) { return a_element(row, k); });
      warp_sync();
    }

    // The other threads wait at a barrier that never completes: stop the program, saying why.
    [[noreturn]] static void fail(const char* what) {
      std::fprintf(stderr, "warp emulator: %s\n", what);
      std::abort();
    }
  };
};

}  // namespace stagecraft::test
