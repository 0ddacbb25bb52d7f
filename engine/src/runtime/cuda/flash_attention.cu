// Fused causal attention for the CUDA backend (`train.attention: flash`), after FlashAttention-2
// (Dao, 2023): the T x T scores never reach global memory. Two implementations:
//
// Tensor cores, where q, k, v are bf16 (train.precision: bf16), the head size is a multiple of 16
// up to 128, the GPU is sm_80 or later and its shared memory holds a pass's tiles (every sm_80
// GPU's does): the program of runtime/flash_mma.h (its comment gives the algorithm), a block of
// four warps per 64-row tile, S, P, dP, dS and the accumulators in mma.sync m16n8k16 fragments,
// the walked tiles double-buffered through cp.async. Its arithmetic is the tile program's
// (runtime/flash_tiles.h, which the CPU runs: cpu/flash_tiles.cpp); the suites run flash_mma.h
// itself on the CPU under a warp emulator (tests/engine/tst_flash_mma.cpp) and on a GPU against
// the tile program (tests/gpu/tst_cuda.cpp). train.kernels.flash: cuda_cores turns it off.
// On compute capability 9.0 the same program can take its products as Hopper's warpgroup products
// instead (runtime/flash_wgmma.h, compiled apart for sm_90a: flash_wgmma.cu), where
// train.kernels.flash: wgmma asks for them (cuda_kernels.h's flash_path says when). The kernels
// and launches of both are flash_kernels.cuh.
//
// fp32 cores, otherwise:
//   forward   each thread owns one query row; key/value tiles of kTile rows are staged in shared
//             memory, the row's scores for a tile are computed, and the running maximum m, the
//             running sum l and the output accumulator are rescaled once per tile (online
//             softmax). Writes out = acc / l and the row's log-sum-exp L = m + log l, (B, NH, T).
//   backward  D_i = dO_i . O_i per query row; then one kernel with a thread per key row j that
//             walks the query tiles i >= j, recomputes P_ij = exp(s_ij - L_i) and accumulates
//             dV_j += P_ij dO_i and dK_j += scale dS_ij q_i (per key/value head: the walk takes
//             the query heads of its group one after the other); and one with a thread per query row i
//             that walks the key tiles j <= i and accumulates dQ_i += scale dS_ij k_j, with
//             dS_ij = P_ij (dO_i . v_j - D_i). Two passes instead of atomics on dQ: every gradient
//             is summed in a fixed order.
//
// Grouped-query attention (NKV key/value heads under NH query heads): query head h reads K/V head
// h / (NH / NKV) where it lies in qkv (B, T, (NH + 2 NKV) HS), q | k | v.
//
// Memory per layer: L (B, NH, T) instead of the probabilities (B, NH, T, T). fp32 arithmetic; O is
// written (and read back by the backward) in fp32 or bf16 (ops.h's ActOut);
// head sizes up to kMaxHead (the loops are unrolled to it, guarded by the real size, so the
// per-thread rows stay in registers).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/flash_kernels.cuh"
#include "runtime/element_math.h"
#include "runtime/flash_mma.h"
#include "runtime/flash_tiles.h"

namespace stagecraft::runtime::cuda {

namespace {

constexpr int kRows = 64;   // threads per block: query (or key) rows per block
constexpr int kTile = 32;   // key (or query) rows staged in shared memory at a time

// Blocks of rows of a sequence of T: 64-row tiles on tensor cores, kRows-row blocks on fp32 cores.
static int row_blocks(int T, bool tensor_cores) { return tensor_cores ? flash_mma::tiles(T) : int((T + kRows - 1LL) / kRows); }

// Where the heads lie in a row of qkv (NH + 2 NKV heads of hs: q | k | v) and of out (NH heads).
struct Heads {
  int NH, NKV, hs;
  __device__ int row() const { return (NH + 2 * NKV) * hs; }  // elements of a qkv row
  __device__ int out_row() const { return NH * hs; }          // of an out (or dO) row
  __device__ int q(int h) const { return h * hs; }            // query head h's columns in a qkv row (and in an out row)
  __device__ int k(int g) const { return (NH + g) * hs; }     // key/value head g's
  __device__ int v(int g) const { return (NH + NKV + g) * hs; }
  __device__ int kv_of(int h) const { return h / (NH / NKV); }  // the key/value head query head h reads
};

// The block's threads copy key and value rows j0 .. j0 + kTile - 1 of key/value head g (zeros past
// T and past the head size) from the sequence's qkv rows into shared memory.
template <int D, typename In>
__device__ __forceinline__ void stage_kv_tile(float (*ks)[D], float (*vs)[D], const In* base, int j0, int T, const Heads& H, int g) {
  for (int e = threadIdx.x; e < kTile * D; e += kRows) {
    const int j = e / D, d = e % D;
    const bool in = j0 + j < T && d < H.hs;
    const In* row = base + size_t(j0 + j) * H.row();
    ks[j][d] = in ? element::load(row + H.k(g) + d) : 0.0f;
    vs[j][d] = in ? element::load(row + H.v(g) + d) : 0.0f;
  }
}

template <int D, typename Out, typename In>
__global__ void flash_forward_kernel(Out* out, float* lse, const In* qkv, int T, Heads H, float scale) {
  const int bh = blockIdx.x, b = bh / H.NH, h = bh % H.NH, block = last_first_block();
  const int hs = H.hs;
  const int row = block * kRows + threadIdx.x;
  const In* base = qkv + size_t(b) * T * H.row();
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  float q[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    q[d] = (row < T && d < hs) ? element::load(base + size_t(row) * H.row() + H.q(h) + d) * scale : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last_row = min(T - 1, block * kRows + kRows - 1);  // causal: no key beyond it
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    stage_kv_tile<D>(ks, vs, base, j0, T, H, H.kv_of(h));
    __syncthreads();
    if (row < T && j0 <= row) {
      float s[kTile];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d) dot += q[d] * ks[j][d];
        s[j] = j0 + j <= row ? dot : -INFINITY;
        tile_max = fmaxf(tile_max, s[j]);
      }
      const float m_new = fmaxf(m, tile_max);
      const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
      l *= corr;
#pragma unroll
      for (int d = 0; d < D; ++d) acc[d] *= corr;
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        const float p = expf(s[j] - m_new);  // 0 above the diagonal
        l += p;
#pragma unroll
        for (int d = 0; d < D; ++d) acc[d] += p * vs[j][d];
      }
      m = m_new;
    }
    __syncthreads();
  }
  if (row < T) {
    const float inv = 1.0f / l;
    Out* o = out + (size_t(b) * T + row) * H.out_row() + H.q(h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (d < hs) element::store(o + d, acc[d] * inv);
    }
    lse[size_t(bh) * T + row] = m + logf(l);
  }
}

// delta (B, NH, T) = dO . O per query row and head; with RoundDout, dO rounded to bf16 first, as
// the tensor cores take it for dP (flash_tiles.h).
template <bool RoundDout, typename In, typename Dout>
__global__ void flash_delta_kernel(float* delta, const In* out, const Dout* dout, int T, int NH, int hs, size_t rows) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= rows) return;
  const size_t bh = i / T, t = i % T, b = bh / NH, h = bh % NH;
  const size_t at = (b * T + t) * NH * hs + h * hs;
  delta[i] = flash::row_delta(dout + at, out + at, hs, RoundDout);
}

// dK, dV: a thread per key row j of key/value head g, query tiles staged in shared memory: the
// query tiles at or after the block's keys of each query head of g's group in turn, summed into the
// same registers. Grid (B x NKV, blocks of key rows).
template <int D, typename In>
__global__ void flash_backward_dkdv_kernel(float* dqkv, const In* qkv, const float* dout, const float* lse, const float* delta, int T,
                                           Heads H, float scale) {
  const int bg = blockIdx.x, b = bg / H.NKV, g = bg % H.NKV, block = int(blockIdx.y);  // the first keys walk the most queries
  const int hs = H.hs, group = H.NH / H.NKV;
  const int col = block * kRows + threadIdx.x;  // key row
  const In* base = qkv + size_t(b) * T * H.row();
  const float* dy = dout + size_t(b) * T * H.out_row();
  __shared__ float qs[kTile][D];
  __shared__ float dos[kTile][D];
  __shared__ float ls[kTile], ds_[kTile];
  float k[D], v[D], dk[D], dv[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const bool in = col < T && d < hs;
    k[d] = in ? element::load(base + size_t(col) * H.row() + H.k(g) + d) : 0.0f;
    v[d] = in ? element::load(base + size_t(col) * H.row() + H.v(g) + d) : 0.0f;
    dk[d] = 0.0f;
    dv[d] = 0.0f;
  }
  const int first_col = block * kRows;  // causal: no query before it matters
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const size_t bh = size_t(b) * H.NH + h;
    for (int i0 = (first_col / kTile) * kTile; i0 < T; i0 += kTile) {
      for (int e = threadIdx.x; e < kTile * D; e += kRows) {
        const int i = e / D, d = e % D;
        const bool in = i0 + i < T && d < hs;
        qs[i][d] = in ? element::load(base + size_t(i0 + i) * H.row() + H.q(h) + d) : 0.0f;
        dos[i][d] = in ? dy[size_t(i0 + i) * H.out_row() + H.q(h) + d] : 0.0f;
      }
      for (int i = threadIdx.x; i < kTile; i += kRows) {
        ls[i] = i0 + i < T ? lse[bh * T + i0 + i] : 0.0f;
        ds_[i] = i0 + i < T ? delta[bh * T + i0 + i] : 0.0f;
      }
      __syncthreads();
      if (col < T) {
#pragma unroll 4
        for (int i = 0; i < kTile; ++i) {
          const int qi = i0 + i;
          if (qi < col || qi >= T) continue;
          float s = 0.0f, dp = 0.0f;
#pragma unroll
          for (int d = 0; d < D; ++d) {
            s += qs[i][d] * k[d];
            dp += dos[i][d] * v[d];
          }
          const float p = expf(s * scale - ls[i]);
          const float dsc = p * (dp - ds_[i]) * scale;
#pragma unroll
          for (int d = 0; d < D; ++d) {
            dv[d] += p * dos[i][d];
            dk[d] += dsc * qs[i][d];
          }
        }
      }
      __syncthreads();
    }
  }
  if (col < T) {
    float* r = dqkv + (size_t(b) * T + col) * H.row();
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (d < hs) {
        r[H.k(g) + d] = dk[d];
        r[H.v(g) + d] = dv[d];
      }
    }
  }
}

// dQ: a thread per query row i, key tiles staged in shared memory.
template <int D, typename In>
__global__ void flash_backward_dq_kernel(float* dqkv, const In* qkv, const float* dout, const float* lse, const float* delta, int T,
                                         Heads H, float scale) {
  const int bh = blockIdx.x, b = bh / H.NH, h = bh % H.NH, block = last_first_block();
  const int hs = H.hs;
  const int row = block * kRows + threadIdx.x;
  const In* base = qkv + size_t(b) * T * H.row();
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  float q[D], dy[D], dq[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const bool in = row < T && d < hs;
    q[d] = in ? element::load(base + size_t(row) * H.row() + H.q(h) + d) : 0.0f;
    dy[d] = in ? dout[(size_t(b) * T + row) * H.out_row() + H.q(h) + d] : 0.0f;
    dq[d] = 0.0f;
  }
  const float L = row < T ? lse[size_t(bh) * T + row] : 0.0f;
  const float Di = row < T ? delta[size_t(bh) * T + row] : 0.0f;
  const int last_row = min(T - 1, block * kRows + kRows - 1);
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    stage_kv_tile<D>(ks, vs, base, j0, T, H, H.kv_of(h));
    __syncthreads();
    if (row < T) {
#pragma unroll 4
      for (int j = 0; j < kTile; ++j) {
        if (j0 + j > row) break;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < D; ++d) {
          s += q[d] * ks[j][d];
          dp += dy[d] * vs[j][d];
        }
        const float dsc = expf(s * scale - L) * (dp - Di) * scale;
#pragma unroll
        for (int d = 0; d < D; ++d) dq[d] += dsc * ks[j][d];
      }
    }
    __syncthreads();
  }
  if (row < T) {
    float* g = dqkv + (size_t(b) * T + row) * H.row() + H.q(h);
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (d < hs) g[d] = dq[d];
    }
  }
}

// Calls f.template operator()<D>() with the smallest supported D >= hs.
template <typename F>
bool with_head_size(int hs, F&& f) {
  if (hs <= 32) return f.template operator()<32>(), true;
  if (hs <= 64) return f.template operator()<64>(), true;
  if (hs <= 96) return f.template operator()<96>(), true;
  if (hs <= kMaxHead) return f.template operator()<kMaxHead>(), true;
  return false;
}

}  // namespace

bool flash_tensor_cores_fit(int HS) {
  if (!flash::takes_head(HS) || !context()) return false;
  struct Gpu {
    int major = 0, optin = 0, kernel_arch = 0;
  };
  static const Gpu gpu = [] {
    Gpu g;
    cudaDeviceGetAttribute(&g.major, cudaDevAttrComputeCapabilityMajor, context()->ordinal);
    cudaDeviceGetAttribute(&g.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, context()->ordinal);
    // The architecture the kernels that run here were compiled for: a build without sm_80 or
    // later code (CMAKE_CUDA_ARCHITECTURES) runs older PTX, whose tensor-core products are a trap.
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, tensor_forward_kernel<flash_mma::MmaSync, 64, float>) == cudaSuccess) g.kernel_arch = a.ptxVersion;
    cudaGetLastError();
    return g;
  }();
  if (gpu.major < 8 || gpu.kernel_arch < 80) return false;
  for (const flash::Pass pass : {flash::Pass::kForward, flash::Pass::kKeyGrads, flash::Pass::kQueryGrads}) {
    if (flash_mma::bytes_for_head(pass, HS) > size_t(gpu.optin)) return false;
  }
  return true;
}

#if !defined(STAGECRAFT_FLASH_WGMMA)
// A build without the Hopper kernels: mma.sync everywhere (flash_wgmma.cu defines it otherwise).
bool flash_warpgroup_fit(int) { return false; }
#endif

FlashPath flash_path(bool bf16_qkv, int HS, config::FlashKernels choice) {
  if (!bf16_qkv || choice == config::FlashKernels::kCudaCores || !flash_tensor_cores_fit(HS)) return FlashPath::kCudaCores;
  if (choice == config::FlashKernels::kWgmma && flash_warpgroup_fit(HS)) return FlashPath::kWgmma;
  return FlashPath::kMmaSync;
}

FlashPath flash_path(bool bf16_qkv, int HS) {
  return flash_path(bf16_qkv, HS, context() ? context()->kernels.flash : config::FlashKernels::kAuto);
}

// The tensor-core kernels move bf16 in 16-byte units (flash_mma.h's cp.async copies, flash_tiles.h's
// load8 for fp32 dO): their bf16 buffers must be 16-byte aligned, as every allocation is. Null
// entries are not checked.
static bool units_aligned(ActIn a, ActIn b = nullptr, ActIn c = nullptr) {
  for (ActIn x : {a, b, c}) {
    if (x.data && !flash::aligned16(x.data)) {
      record_error("flash attention on tensor cores: a bf16 buffer is not 16-byte aligned (a pointer into the middle of an allocation?)");
      return false;
    }
  }
  return true;
}

// A launch's y dimension, which CUDA limits to 65535, takes the blocks of rows: 64-row tiles on
// tensor cores, twice over in the backward (both passes), and kRows-row blocks on fp32 cores.
static bool fits_grid(int T, bool tensor_cores) {
  const long long blocks = (tensor_cores ? 2LL : 1LL) * row_blocks(T, tensor_cores);
  if (blocks <= 65535) return true;
  record_error("flash attention: seq_len " + std::to_string(T) + " makes " + std::to_string(blocks) +
               " blocks of rows, above the 65535 a launch takes; lower model.seq_len");
  return false;
}

void flash_attention_forward(ActOut out, float* lse, ActIn qkv, int B, int T, int NH, int HS, int NKV) {
  if (B <= 0 || T <= 0) return;
  const FlashPath path = flash_path(qkv.low() != nullptr, HS);
  const bool tensor_cores = path != FlashPath::kCudaCores;
  if (!fits_grid(T, tensor_cores)) return;
  if (tensor_cores) {
    if (!units_aligned(qkv, out.low() ? ActIn(out) : ActIn(nullptr))) return;
#if defined(STAGECRAFT_FLASH_WGMMA)
    if (path == FlashPath::kWgmma) {
      warpgroup_forward(out, lse, qkv.low(), B, T, NH, HS, NKV);
      launched("flash_attention_forward (warpgroup tensor cores)");
      return;
    }
#endif
    mma_sync_forward(out, lse, qkv.low(), B, T, NH, HS, NKV);
    launched("flash_attention_forward (tensor cores)");
    return;
  }
  const dim3 grid(B * NH, row_blocks(T, false));
  const float scale = 1.0f / sqrtf(float(HS));
  const bool ok = with_head_size(HS, [&]<int D>() {
    with_typed(out, [&](auto* o) {
      with_typed(qkv, [&](const auto* x) {
        flash_forward_kernel<D><<<grid, kRows, 0, context()->stream>>>(o, lse, x, T, Heads{NH, NKV, HS}, scale);
      });
    });
  });
  if (!ok) record_error("flash attention: head size " + std::to_string(HS) + " above " + std::to_string(kMaxHead));
  launched("flash_attention_forward");
}

bool flash_backward_takes(ActOut dqkv, ActIn dout, ActIn qkv, int HS) {
  return dqkv.type == dout.type && (!dqkv.low() || flash_tensor_cores(qkv.low() != nullptr, HS));
}

void flash_attention_backward(ActOut dqkv, float* delta, ActIn dout, ActIn qkv, ActIn out, const float* lse, int B, int T, int NH,
                              int HS, int NKV) {
  if (B <= 0 || T <= 0) return;
  if (!flash_backward_takes(dqkv, dout, qkv, HS)) {
    record_error("flash attention backward: dqkv and dout in bf16 need each other and the tensor-core kernels (CudaOps stages the rest)");
    return;
  }
  const size_t rows = size_t(B) * NH * T;
  const FlashPath path = flash_path(qkv.low() != nullptr, HS);
  const bool tensor_cores = path != FlashPath::kCudaCores;
  if (!fits_grid(T, tensor_cores)) return;
  if (tensor_cores && !units_aligned(qkv, dout.low() ? dout : ActIn(nullptr), dqkv.low() ? ActIn(dqkv) : ActIn(nullptr))) return;
  with_typed(out, [&](const auto* o) {
    with_typed(dout, [&](const auto* dy) {
      const unsigned blocks = static_cast<unsigned>((rows + 255) / 256);
      if (tensor_cores) {
        flash_delta_kernel<true><<<blocks, 256, 0, context()->stream>>>(delta, o, dy, T, NH, HS, rows);
      } else {
        flash_delta_kernel<false><<<blocks, 256, 0, context()->stream>>>(delta, o, dy, T, NH, HS, rows);
      }
    });
  });
  if (tensor_cores) {
#if defined(STAGECRAFT_FLASH_WGMMA)
    if (path == FlashPath::kWgmma) {
      warpgroup_grads(dqkv, dout.data, qkv.low(), lse, delta, B, T, NH, HS, NKV);
      launched("flash_attention_backward (warpgroup tensor cores)");
      return;
    }
#endif
    mma_sync_grads(dqkv, dout.data, qkv.low(), lse, delta, B, T, NH, HS, NKV);
    launched("flash_attention_backward (tensor cores)");
    return;
  }
  const dim3 query_grid(B * NH, row_blocks(T, false)), key_grid(B * NKV, row_blocks(T, false));
  const float scale = 1.0f / sqrtf(float(HS));
  const Heads heads{NH, NKV, HS};
  float* dq = dqkv.f32();
  const float* dy = dout.f32();
  const bool ok = with_head_size(HS, [&]<int D>() {
    with_typed(qkv, [&](const auto* x) {
      flash_backward_dkdv_kernel<D><<<key_grid, kRows, 0, context()->stream>>>(dq, x, dy, lse, delta, T, heads, scale);
      flash_backward_dq_kernel<D><<<query_grid, kRows, 0, context()->stream>>>(dq, x, dy, lse, delta, T, heads, scale);
    });
  });
  if (!ok) record_error("flash attention: head size " + std::to_string(HS) + " above " + std::to_string(kMaxHead));
  launched("flash_attention_backward");
}

}  // namespace stagecraft::runtime::cuda
