// Fused causal attention for the CUDA backend (`train.attention: flash`), after FlashAttention-2
// (Dao, 2023): the T x T scores never reach global memory. Per (sequence, head):
//
//   forward   each thread owns one query row; key/value tiles of kTile rows are staged in shared
//             memory, the row's scores for a tile are computed, and the running maximum m, the
//             running sum l and the output accumulator are rescaled once per tile (online
//             softmax). Writes out = acc / l and the row's log-sum-exp L = m + log l, (B, NH, T).
//   backward  D_i = dO_i . O_i per query row; then one kernel with a thread per key row j that
//             walks the query tiles i >= j, recomputes P_ij = exp(s_ij - L_i) and accumulates
//             dV_j += P_ij dO_i and dK_j += scale dS_ij q_i; and one with a thread per query row i
//             that walks the key tiles j <= i and accumulates dQ_i += scale dS_ij k_j, with
//             dS_ij = P_ij (dO_i . v_j - D_i). Two passes instead of atomics on dQ: every gradient
//             is summed in a fixed order.
//
// Memory per layer: L (B, NH, T) instead of the probabilities (B, NH, T, T). fp32 arithmetic; O is
// written (and read back by the backward) in fp32 or bf16 (ops.h's ActOut);
// head sizes up to kMaxHead (the loops are unrolled to it, guarded by the real size, so the
// per-thread rows stay in registers).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/element_math.h"

namespace stagecraft::runtime::cuda {

namespace {

constexpr int kRows = 64;   // threads per block: query (or key) rows per block
constexpr int kTile = 32;   // key (or query) rows staged in shared memory at a time

// The block's threads copy key and value rows j0 .. j0 + kTile - 1 of head h (zeros past T and
// past the head size) from the sequence's qkv rows into shared memory.
template <int D, typename In>
__device__ __forceinline__ void stage_kv_tile(float (*ks)[D], float (*vs)[D], const In* base, int j0, int T, int Cl, int h, int hs) {
  const int C3 = 3 * Cl;
  for (int e = threadIdx.x; e < kTile * D; e += kRows) {
    const int j = e / D, d = e % D;
    const bool in = j0 + j < T && d < hs;
    ks[j][d] = in ? element::load(base + size_t(j0 + j) * C3 + Cl + h * hs + d) : 0.0f;
    vs[j][d] = in ? element::load(base + size_t(j0 + j) * C3 + 2 * Cl + h * hs + d) : 0.0f;
  }
}

template <int D, typename Out, typename In>
__global__ void flash_forward_kernel(Out* out, float* lse, const In* qkv, int T, int NH, int hs, float scale) {
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int Cl = NH * hs, C3 = 3 * Cl;
  const int row = blockIdx.x * kRows + threadIdx.x;
  const In* base = qkv + size_t(b) * T * C3;
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  float q[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    q[d] = (row < T && d < hs) ? element::load(base + size_t(row) * C3 + h * hs + d) * scale : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last_row = min(T - 1, blockIdx.x * kRows + kRows - 1);  // causal: no key beyond it
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    stage_kv_tile<D>(ks, vs, base, j0, T, Cl, h, hs);
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
    Out* o = out + (size_t(b) * T + row) * Cl + h * hs;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (d < hs) element::store(o + d, acc[d] * inv);
    }
    lse[size_t(bh) * T + row] = m + logf(l);
  }
}

// delta (B, NH, T) = dO . O per query row and head.
template <typename In>
__global__ void flash_delta_kernel(float* delta, const In* out, const float* dout, int T, int NH, int hs, size_t rows) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= rows) return;
  const size_t bh = i / T, t = i % T, b = bh / NH, h = bh % NH;
  const size_t at = (b * T + t) * NH * hs + h * hs;
  float s = 0.0f;
  for (int d = 0; d < hs; ++d) s += dout[at + d] * element::load(out + at + d);
  delta[i] = s;
}

// dK, dV: a thread per key row j, query tiles staged in shared memory.
template <int D, typename In>
__global__ void flash_backward_dkdv_kernel(float* dqkv, const In* qkv, const float* dout, const float* lse, const float* delta, int T,
                                           int NH, int hs, float scale) {
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int Cl = NH * hs, C3 = 3 * Cl;
  const int col = blockIdx.x * kRows + threadIdx.x;  // key row
  const In* base = qkv + size_t(b) * T * C3;
  const float* dy = dout + size_t(b) * T * Cl;
  __shared__ float qs[kTile][D];
  __shared__ float dos[kTile][D];
  __shared__ float ls[kTile], ds_[kTile];
  float k[D], v[D], dk[D], dv[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const bool in = col < T && d < hs;
    k[d] = in ? element::load(base + size_t(col) * C3 + Cl + h * hs + d) : 0.0f;
    v[d] = in ? element::load(base + size_t(col) * C3 + 2 * Cl + h * hs + d) : 0.0f;
    dk[d] = 0.0f;
    dv[d] = 0.0f;
  }
  const int first_col = blockIdx.x * kRows;  // causal: no query before it matters
  for (int i0 = (first_col / kTile) * kTile; i0 < T; i0 += kTile) {
    for (int e = threadIdx.x; e < kTile * D; e += kRows) {
      const int i = e / D, d = e % D;
      const bool in = i0 + i < T && d < hs;
      qs[i][d] = in ? element::load(base + size_t(i0 + i) * C3 + h * hs + d) : 0.0f;
      dos[i][d] = in ? dy[size_t(i0 + i) * Cl + h * hs + d] : 0.0f;
    }
    for (int i = threadIdx.x; i < kTile; i += kRows) {
      ls[i] = i0 + i < T ? lse[size_t(bh) * T + i0 + i] : 0.0f;
      ds_[i] = i0 + i < T ? delta[size_t(bh) * T + i0 + i] : 0.0f;
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
  if (col < T) {
    float* g = dqkv + (size_t(b) * T + col) * C3 + h * hs;
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (d < hs) {
        g[Cl + d] = dk[d];
        g[2 * Cl + d] = dv[d];
      }
    }
  }
}

// dQ: a thread per query row i, key tiles staged in shared memory.
template <int D, typename In>
__global__ void flash_backward_dq_kernel(float* dqkv, const In* qkv, const float* dout, const float* lse, const float* delta, int T,
                                         int NH, int hs, float scale) {
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int Cl = NH * hs, C3 = 3 * Cl;
  const int row = blockIdx.x * kRows + threadIdx.x;
  const In* base = qkv + size_t(b) * T * C3;
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  float q[D], dy[D], dq[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    const bool in = row < T && d < hs;
    q[d] = in ? element::load(base + size_t(row) * C3 + h * hs + d) : 0.0f;
    dy[d] = in ? dout[(size_t(b) * T + row) * Cl + h * hs + d] : 0.0f;
    dq[d] = 0.0f;
  }
  const float L = row < T ? lse[size_t(bh) * T + row] : 0.0f;
  const float Di = row < T ? delta[size_t(bh) * T + row] : 0.0f;
  const int last_row = min(T - 1, blockIdx.x * kRows + kRows - 1);
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    stage_kv_tile<D>(ks, vs, base, j0, T, Cl, h, hs);
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
    float* g = dqkv + (size_t(b) * T + row) * C3 + h * hs;
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

void flash_attention_forward(ActOut out, float* lse, ActIn qkv, int B, int T, int NH, int HS) {
  if (B <= 0 || T <= 0) return;
  const dim3 grid((T + kRows - 1) / kRows, B * NH);
  const float scale = 1.0f / sqrtf(float(HS));
  const bool ok = with_head_size(HS, [&]<int D>() {
    with_typed(out, [&](auto* o) {
      with_typed(qkv, [&](const auto* x) { flash_forward_kernel<D><<<grid, kRows, 0, context()->stream>>>(o, lse, x, T, NH, HS, scale); });
    });
  });
  if (!ok) record_error("flash attention: head size " + std::to_string(HS) + " above " + std::to_string(kMaxHead));
  launched("flash_attention_forward");
}

void flash_attention_backward(float* dqkv, float* delta, const float* dout, ActIn qkv, ActIn out, const float* lse, int B, int T, int NH,
                              int HS) {
  if (B <= 0 || T <= 0) return;
  const size_t rows = size_t(B) * NH * T;
  with_typed(out, [&](const auto* o) {
    flash_delta_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, context()->stream>>>(delta, o, dout, T, NH, HS, rows);
  });
  const dim3 grid((T + kRows - 1) / kRows, B * NH);
  const float scale = 1.0f / sqrtf(float(HS));
  const bool ok = with_head_size(HS, [&]<int D>() {
    with_typed(qkv, [&](const auto* x) {
      flash_backward_dkdv_kernel<D><<<grid, kRows, 0, context()->stream>>>(dqkv, x, dout, lse, delta, T, NH, HS, scale);
      flash_backward_dq_kernel<D><<<grid, kRows, 0, context()->stream>>>(dqkv, x, dout, lse, delta, T, NH, HS, scale);
    });
  });
  if (!ok) record_error("flash attention: head size " + std::to_string(HS) + " above " + std::to_string(kMaxHead));
  launched("flash_attention_backward");
}

}  // namespace stagecraft::runtime::cuda
