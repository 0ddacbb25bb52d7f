// The tensor-core flash attention's tile program (runtime/flash_tiles.h) on the CPU: a tile is one
// thread's serial walk through the code a CUDA block runs, its shared memory a buffer of its own,
// its 16 x 16 products plain loops with fp32 accumulation of bf16 operands. The (sequence, head)
// pairs are spread over the pool's threads: query heads for the forward and dQ, key/value heads
// (each walking its group of query heads) for dK and dV. Here for the suites that check the GPU's
// arithmetic; the CPU engine trains with attention.cpp.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "runtime/cpu/thread_pool.h"
#include "runtime/flash_tiles.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

// One tile at a time, by one thread: every cooperative loop runs whole, barriers have nothing to
// wait for, and an accumulator is a plain 16 x 16 array.
class SerialTile {
 public:
  explicit SerialTile(size_t bytes) : smem_((bytes + 15) / 16) {}
  unsigned char* shared() const { return reinterpret_cast<unsigned char*>(smem_.data()); }
  int thread() const { return 0; }
  int threads() const { return 1; }
  int warp() const { return 0; }
  int warps() const { return 1; }
  int lane() const { return 0; }
  int lanes() const { return 1; }
  float warp_max(float x) const { return x; }
  float warp_sum(float x) const { return x; }
  void warp_sync() const {}
  void sync() const {}

  static constexpr int kWarps = 1;
  struct Acc {
    float v[256];
  };
  void acc_zero(Acc& c) const { std::fill(c.v, c.v + 256, 0.0f); }
  void acc_load(Acc& c, const float* p, int ld) const {
    for (int i = 0; i < 16; ++i) std::copy(p + size_t(i) * ld, p + size_t(i) * ld + 16, c.v + i * 16);
  }
  void acc_store(float* p, int ld, const Acc& c) const {
    for (int i = 0; i < 16; ++i) std::copy(c.v + i * 16, c.v + i * 16 + 16, p + size_t(i) * ld);
  }
  template <bool ACol, bool BCol>
  void mma(Acc& c, const bf16* a, int lda, const bf16* b, int ldb, int K) const {
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        float sum = c.v[i * 16 + j];
        for (int k = 0; k < K; ++k) {
          const float x = to_float(ACol ? a[i + size_t(k) * lda] : a[size_t(i) * lda + k]);
          const float y = to_float(BCol ? b[k + size_t(j) * ldb] : b[size_t(k) * ldb + j]);
          sum += x * y;
        }
        c.v[i * 16 + j] = sum;
      }
    }
  }

 private:
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  mutable std::vector<Chunk> smem_;
};

// Calls f(tile, slice) for every slice [0, count) that slice_at makes, a thread's share of them
// at a time.
template <typename SliceAt, typename F>
void each_slice(flash::Pass pass, int count, int HS, SliceAt&& slice_at, F&& f) {
  detail::parallel_for(size_t(count), 1, std::min(count, num_threads()), [&](size_t first, size_t last) {
    const SerialTile tile(flash::layout(pass, HS).bytes);
    for (size_t i = first; i < last; ++i) f(tile, slice_at(int(i)));
  });
}

// Every (sequence, query head).
template <typename F>
void each_head(flash::Pass pass, int B, int T, int NH, int HS, int NKV, F&& f) {
  assert(B >= 0 && T > 0 && NH > 0 && NKV > 0 && NH % NKV == 0 && flash::takes_head(HS));
  each_slice(pass, B * NH, HS, [&](int bh) { return flash::slice_of(T, NH, HS, NKV, bh); }, f);
}

int tiles(int T) { return (T + flash::kRows - 1) / flash::kRows; }

}  // namespace

void flash_attention_tiled_forward(float* out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV) {
  // out (B, T, NH*HS), lse (B, NH, T), qkv (B, T, (NH + 2*NKV)*HS)
  each_head(flash::Pass::kForward, B, T, NH, HS, NKV, [&](const SerialTile& tile, const flash::Slice& s) {
    for (int q = 0; q < tiles(T); ++q) flash::forward_tile(tile, out, lse, qkv, s, q);
  });
}

void flash_attention_tiled_backward(float* dqkv, float* delta, const float* dout, const bf16* qkv, const float* out, const float* lse,
                                    int B, int T, int NH, int HS, int NKV) {
  // dqkv (B, T, (NH + 2*NKV)*HS), delta (B, NH, T), dout (B, T, NH*HS), qkv (B, T, (NH + 2*NKV)*HS),
  // out (B, T, NH*HS), lse (B, NH, T)
  // delta = dO . O per row, with dO rounded to bf16 as dP = dO V^T takes it (so that each row's dS
  // sums to zero, as softmax's gradient does), as the CUDA delta kernel computes it.
  const size_t rows = size_t(B) * NH * T;
  for (size_t i = 0; i < rows; ++i) {
    const size_t bh = i / T, t = i % T, b = bh / NH, h = bh % NH;
    const size_t at = (b * T + t) * NH * HS + h * HS;
    delta[i] = flash::row_delta(dout + at, out + at, HS, true);
  }
  // dK and dV per (sequence, key/value head), each summing over its group's query heads.
  assert(NKV > 0 && NH % NKV == 0);
  each_slice(flash::Pass::kKeyGrads, B * NKV, HS, [&](int bkv) { return flash::key_slice_of(T, NH, HS, NKV, bkv); },
             [&](const SerialTile& tile, const flash::Slice& s) {
               for (int k = 0; k < tiles(T); ++k) flash::key_grads_tile(tile, dqkv, qkv, dout, lse, delta, s, k);
             });
  each_head(flash::Pass::kQueryGrads, B, T, NH, HS, NKV, [&](const SerialTile& tile, const flash::Slice& s) {
    for (int q = 0; q < tiles(T); ++q) flash::query_grads_tile(tile, dqkv, qkv, dout, lse, delta, s, q);
  });
}

}  // namespace stagecraft::runtime::cpu
