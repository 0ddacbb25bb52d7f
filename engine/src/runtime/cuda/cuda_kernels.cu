// CUDA kernels: the float layer math of GPT-2 and Llama training on one GPU, with the contracts of
// kernels.h (outputs first; parameter gradients accumulate; input gradients overwrite except
// layernorm's and the residual's), behind the Ops table (ops.h).
//
// GEMMs are cuBLAS's in fp32 (no TF32: cuBLAS's default math mode); the 16-bit ones with a bias go
// through cuBLASLt with the bias in the GEMM's epilogue (lt_gemm.h). Row-major buffers are passed as
// their column-major transposes: a row-major (R, K) matrix with leading dimension ld is the
// column-major (K, R) matrix with the same ld, so C = A B (row-major) is C^T = B^T A^T
// (column-major) with the operands swapped. Attention (`standard`) is per sequence: batched GEMMs
// over the heads for the scores and the weighted values, a causal softmax kernel between them;
// with grouped-query attention the products of the query heads that share a K/V head read it where
// it is (a batch stride over the groups), and the K/V gradients add up over the group in the
// products' accumulators. The per-element formulas (GELU, layernorm's and RMSNorm's gradients,
// SwiGLU, rotary positions, AdamW) are element_math.h's, shared with
// the CPU kernels. Reductions that come back to the host (the loss, the sum of squares) are two-
// pass in a fixed order, so they do not depend on scheduling (the sum of squares over a segment
// list in one launch: its last block adds the blocks' partials in order); so are the embedding,
// bias and layernorm parameter gradients (no atomics), so that a run repeats to the bit. The
// cross-entropy reads each row of logits for its loss and gradient together, through
// element_math.h's online softmax. The segment calls find each element's segment with
// element_math.h's segment_of.
//
// Every launch goes to the context's stream (cuda_context.h); launch failures are recorded
// there and reported by the next Device::synchronize().
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/lt_gemm.h"
#include "runtime/element_math.h"
#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

Context& ctx() { return *context(); }
cudaStream_t stream() { return ctx().stream; }

// Blocks for n elements at kThreads each, capped (the kernels loop with a grid stride).
unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}



__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A block of kThreads threads' warp results (v: this warp's, the same in every lane) combined in
// the order of the warps; every thread gets the result.
template <typename T, typename Combine>
__device__ T across_warps(T v, Combine combine) {
  __shared__ T shared[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = shared[0];
  for (int w = 1; w < kThreads / kWarp; ++w) r = combine(r, shared[w]);
  return r;
}

// Sum (or max) over a block of kThreads threads; every thread gets the result.
template <typename T, bool kMax>
__device__ T block_reduce(T v) {
  v = kMax ? static_cast<T>(warp_max(static_cast<float>(v))) : warp_sum(v);
  return across_warps(v, [](T r, T w) { return kMax ? (w > r ? w : r) : r + w; });
}

#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

// ---- element-wise ------------------------------------------------------------------------------

// W consecutive elements from p as floats, or stored to p: W 1 (scalar), 4 or 8, in one to two
// 8- or 16-byte accesses, p then aligned to 4 W bytes for floats, 2 W for bf16 (at least 8).
template <int W>
__device__ __forceinline__ void load_vec(float (&v)[W], const float* p) {
  if constexpr (W == 1) {
    v[0] = *p;
  } else {
#pragma unroll
    for (int i = 0; i < W; i += 4) {
      const float4 f = *reinterpret_cast<const float4*>(p + i);
      v[i] = f.x, v[i + 1] = f.y, v[i + 2] = f.z, v[i + 3] = f.w;
    }
  }
}
__device__ __forceinline__ float low_half(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float high_half(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
template <int W>
__device__ __forceinline__ void load_vec(float (&v)[W], const bf16* p) {
  if constexpr (W == 1) {
    v[0] = to_float(*p);
  } else {
#pragma unroll
    for (int i = 0; i < W; i += 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(p + i);
      v[i] = low_half(u.x), v[i + 1] = high_half(u.x), v[i + 2] = low_half(u.y), v[i + 3] = high_half(u.y);
    }
  }
}
template <int W>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[W]) {
  if constexpr (W == 1) {
    *p = v[0];
  } else {
#pragma unroll
    for (int i = 0; i < W; i += 4) *reinterpret_cast<float4*>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  }
}
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  return uint32_t(to_bf16(lo).bits) | (uint32_t(to_bf16(hi).bits) << 16);
}
template <int W>
__device__ __forceinline__ void store_vec(bf16* p, const float (&v)[W]) {
  if constexpr (W == 1) {
    *p = to_bf16(v[0]);
  } else {
#pragma unroll
    for (int i = 0; i < W; i += 4) *reinterpret_cast<uint2*>(p + i) = make_uint2(bf16_pair(v[i], v[i + 1]), bf16_pair(v[i + 2], v[i + 3]));
  }
}

// Whether every pointer is 16-byte aligned: the element-wise kernels then take 8 elements a
// thread (kVecElements) in 16-byte accesses, else one.
constexpr int kVecElements = 8;
template <typename... P>
bool aligned16(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// launch.template operator()<W>(blocks) for an element-wise kernel over n elements: W `Wide`
// (kVecElements unless given) where `wide` (its pointers aligned, aligned16), else 1, with the
// blocks that W a thread takes.
template <int Wide = kVecElements, typename Launch>
void elementwise_launch(size_t n, bool wide, Launch&& launch) {
  if (wide) {
    launch.template operator()<Wide>(blocks_for(n / Wide));
  } else {
    launch.template operator()<1>(blocks_for(n));
  }
}

// An element-wise kernel's grid stride over n elements, W a thread: at(i) for elements i .. i + W - 1
// (at.template operator()<W>), then the tail past a multiple of W one element a thread
// (operator()<1>).
template <int W, typename At>
__device__ __forceinline__ void vec_stride(size_t n, At&& at) {
  GRID_STRIDE(v, n / W) at.template operator()<W>(v * W);
  if constexpr (W > 1) {
    const size_t i = n / W * W + blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i < n) at.template operator()<1>(i);
  }
}

template <int W, typename Out, typename In>
__device__ __forceinline__ void gelu_forward_at(Out* out, const In* inp, size_t i) {
  float x[W], y[W];
  load_vec<W>(x, inp + i);
#pragma unroll
  for (int j = 0; j < W; ++j) y[j] = element::gelu_value(x[j], sigmoid(element::gelu_arg(x[j])));
  store_vec<W>(out + i, y);
}

template <int W, typename Out, typename In>
__global__ void gelu_forward_kernel(Out* out, const In* inp, size_t n) {
  vec_stride<W>(n, [&]<int K>(size_t i) { gelu_forward_at<K>(out, inp, i); });
}

// dinp may be dout: each thread reads its elements before it writes them.
template <int W, typename Out, typename In, typename Dy>
__device__ __forceinline__ void gelu_backward_at(Out* dinp, const In* inp, const Dy* dout, size_t i) {
  float x[W], dy[W], d[W];
  load_vec<W>(x, inp + i);
  load_vec<W>(dy, dout + i);
#pragma unroll
  for (int j = 0; j < W; ++j) d[j] = dy[j] * element::gelu_slope(x[j], sigmoid(element::gelu_arg(x[j])));
  store_vec<W>(dinp + i, d);
}

template <int W, typename Out, typename In, typename Dy>
__global__ void gelu_backward_kernel(Out* dinp, const In* inp, const Dy* dout, size_t n) {
  vec_stride<W>(n, [&]<int K>(size_t i) { gelu_backward_at<K>(dinp, inp, dout, i); });
}

// SwiGLU: out (rows, F) = silu(gate) up, inp (rows, 2F) = gate | up per row; n = rows F.
template <typename Out, typename In>
__global__ void swiglu_forward_kernel(Out* out, const In* inp, int F, size_t n) {
  GRID_STRIDE(i, n) {
    const In* x = inp + (i / F) * 2 * size_t(F) + i % F;  // this element's gate; its up is F further
    const float gate = element::load(x), up = element::load(x + F);
    element::store(out + i, element::silu_value(gate, sigmoid(gate)) * up);
  }
}

// dinp (rows, 2F) = d gate | d up from dout (rows, F); dinp aliases neither inp nor dout.
template <typename Out, typename In, typename Dy>
__global__ void swiglu_backward_kernel(Out* dinp, const In* inp, const Dy* dout, int F, size_t n) {
  GRID_STRIDE(i, n) {
    const size_t at = (i / F) * 2 * size_t(F) + i % F;  // the gate's place in inp and dinp
    const float gate = element::load(inp + at), up = element::load(inp + at + F), dy = element::load(dout + i), s = sigmoid(gate);
    element::store(dinp + at, dy * up * element::silu_slope(gate, s));
    element::store(dinp + at + F, dy * element::silu_value(gate, s));
  }
}

// Rotary positions in place on qkv (B T rows of (NH + 2 NKV) HS): a thread per rotated pair, n =
// B T (NH + NKV) HS/2 of them, pair p = ((row (NH + NKV)) + head) HS/2 + i for the q heads (head <
// NH) and then the k heads, which lie side by side at the start of a row. `sign` 1 rotates by the
// angle (forward), -1 back (backward). The angle, its cosine and its sine in double, rounded to
// float, as the CPU's (element_math.h's rope_angle). Each thread reads both elements of its pair
// before it writes them, and no two threads share an element.
template <typename Real>
__global__ void rope_kernel(Real* qkv, int T, int NH, int NKV, int HS, float theta, float sign, size_t n, int first) {
  const int half = HS / 2, heads = NH + NKV;
  const size_t row_elements = size_t(NH + 2 * NKV) * HS;
  GRID_STRIDE(p, n) {
    const int i = int(p % half);
    const size_t row_head = p / half, row = row_head / heads;
    const int head = int(row_head % heads), t = first + int(row % T);
    double sn, cs;
    sincos(element::rope_angle(t, i, HS, theta), &sn, &cs);
    Real* x = qkv + row * row_elements + size_t(head) * HS + i;
    float x0 = element::load(x), x1 = element::load(x + half);
    element::rope_rotate(x0, x1, float(cs), sign * float(sn));
    element::store(x, x0);
    element::store(x + half, x1);
  }
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float* acc, const float* x, size_t n) {
  GRID_STRIDE(i, n) acc[i] += x[i];
}

__global__ void scale_kernel(float* x, size_t n, float s) {
  GRID_STRIDE(i, n) x[i] *= s;
}

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, size_t n, element::AdamWStep<float> st) {
  GRID_STRIDE(i, n) {
    float p = params[i], mi = m[i], vi = v[i];
    element::adamw(p, mi, vi, grads[i], st);
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

// out (rows, OC) += bias broadcast over rows.
template <typename Bias>
__global__ void add_bias_kernel(float* out, const Bias* bias, size_t rows, int OC) {
  GRID_STRIDE(i, rows * OC) out[i] += element::load(bias + i % OC);
}

// Column sums without atomics, so that a gradient has the same bits on every run, and over the
// whole GPU, so that a few columns (a bias or a layernorm of C) still fill it: the rows are cut
// into chunks of at least kChunkRows (at most kMaxChunks of them); block (g, k) of a first launch
// sums chunk k of columns kSumLanes g .. kSumLanes g + kSumLanes - 1 — thread (x, y) rows y, y +
// kSumRows, ... of its chunk in column x, then the kSumRows partials added in order of y — into
// partials[k][column]; a second launch adds each column's chunk partials onto the gradient, in the
// same way over the chunks. The order depends on the sizes only. What a row adds to a column is a Terms type's:
// kSums sums at once, add(s, r, c).
constexpr int kSumLanes = 32, kSumRows = 8, kChunkRows = 256, kMaxChunks = 256;

template <typename Terms>
__global__ void column_partials_kernel(float* partials, Terms terms, int rows, int cols, int chunk_rows) {
  constexpr int K = Terms::kSums;
  __shared__ float part[K][kSumRows][kSumLanes + 1];
  const int c = blockIdx.x * kSumLanes + threadIdx.x;
  const int r0 = blockIdx.y * chunk_rows, r1 = min(rows, r0 + chunk_rows);
  float s[K] = {};
  if (c < cols) {
#pragma unroll 4
    for (int r = r0 + threadIdx.y; r < r1; r += kSumRows) terms.add(s, r, c);
  }
  for (int k = 0; k < K; ++k) part[k][threadIdx.y][threadIdx.x] = s[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int k = 0; k < K; ++k) {
    float t = 0.0f;
    for (int y = 0; y < kSumRows; ++y) t += part[k][y][threadIdx.x];
    partials[(size_t(k) * gridDim.y + blockIdx.y) * cols + c] = t;
  }
}

// The gradients the sums go onto (acc[k] += sum k), nullptr where one is not wanted.
struct SumTargets {
  float* acc[2];
};

// acc[k][c] += the sum over chunks of partials[k][chunk][c]: block (g, k) takes columns kSumLanes g
// .., thread (x, y) chunks y, y + kSumRows, ... of column x, the kSumRows partials then added in
// order of y (a fixed order for the sizes, as column_partials_kernel's).
__global__ void add_column_partials_kernel(SumTargets to, const float* partials, int chunks, int cols) {
  __shared__ float part[kSumRows][kSumLanes + 1];
  const int c = blockIdx.x * kSumLanes + threadIdx.x, k = blockIdx.y;
  float* acc = to.acc[k];
  if (!acc) return;  // the whole block
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 8
    for (int q = threadIdx.y; q < chunks; q += kSumRows) s += partials[(size_t(k) * chunks + q) * cols + c];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float t = 0.0f;
  for (int y = 0; y < kSumRows; ++y) t += part[y][threadIdx.x];
  acc[c] += t;
}

// Launches add_column_partials_kernel for K sums.
void add_column_partials(SumTargets to, int K, const float* partials, int chunks, int cols, cudaStream_t stream) {
  const dim3 grid(unsigned((cols + kSumLanes - 1) / kSumLanes), unsigned(K)), block(kSumLanes, kSumRows);
  add_column_partials_kernel<<<grid, block, 0, stream>>>(to, partials, chunks, cols);
}

// A bias gradient: column c of x (rows, cols).
template <typename In>
struct ColumnTerms {
  static constexpr int kSums = 1;
  const In* x;
  int cols;
  __device__ void add(float (&s)[1], int r, int c) const { s[0] += element::load(x + size_t(r) * cols + c); }
};

template <typename In>
ColumnTerms<In> column_terms(const In* x, int cols) {
  return {x, cols};
}

// Layernorm's parameter gradients: dweight += dy * norm, dbias += dy.
struct LayernormParamTerms {
  static constexpr int kSums = 2;
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ void add(float (&s)[2], int r, int c) const {
    const size_t i = size_t(r) * C + c;
    const float dy = dout[i];
    s[0] += dy * (inp[i] - mean[r]) * rstd[r];
    s[1] += dy;
  }
};

// RMSNorm's weight gradient: dweight += dy * norm, norm = x rstd.
struct RmsnormParamTerms {
  static constexpr int kSums = 1;
  const float *dout, *inp, *rstd;
  int C;
  __device__ void add(float (&s)[1], int r, int c) const {
    const size_t i = size_t(r) * C + c;
    s[0] += dout[i] * (inp[i] * rstd[r]);
  }
};

// p with room for `bytes` (its contents undefined), grown on the stream where it is smaller;
// nullptr where it could not grow (recorded).
void* grown(void*& p, size_t& cap, size_t bytes) {
  if (cap < bytes) {
    if (p) STAGECRAFT_CUDA_OK(cudaFreeAsync(p, stream()));
    context()->let_go(cap);  // counted in the device's memory (cuda_context.h)
    p = nullptr;
    cap = 0;
    if (const cudaError_t e = pool_malloc(&p, bytes); e != cudaSuccess) {
      record_error("growing the kernels' scratch to " + std::to_string(bytes >> 20) + " MiB: " + cudaGetErrorString(e));
      return nullptr;
    }
    cap = bytes;
    context()->hold(bytes);
  }
  return p;
}

// The chunk partials' scratch: one call at a time holds it, from its first launch to its second
// (ranks that are threads of one process share the stream).
struct SumScratch {
  std::mutex mutex;
  void* p = nullptr;
  size_t cap = 0;  // bytes
};
SumScratch g_sums;

template <typename Terms>
void sum_columns(SumTargets to, const Terms& terms, int rows, int cols, const char* what) {
  if (rows <= 0 || cols <= 0) return;
  const int chunk_rows = std::max(kChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
  const int chunks = (rows + chunk_rows - 1) / chunk_rows;
  std::lock_guard<std::mutex> lock(g_sums.mutex);
  float* partials = static_cast<float*>(grown(g_sums.p, g_sums.cap, size_t(Terms::kSums) * chunks * cols * sizeof(float)));
  if (!partials) return;  // recorded
  const dim3 grid(unsigned((cols + kSumLanes - 1) / kSumLanes), unsigned(chunks)), block(kSumLanes, kSumRows);
  column_partials_kernel<<<grid, block, 0, stream()>>>(partials, terms, rows, cols, chunk_rows);
  add_column_partials(to, Terms::kSums, partials, chunks, cols, stream());
  launched(what);
}

// acc (cols) += column sums of x (rows, cols).
void column_sums(float* acc, ActIn x, int rows, int cols) {
  with_typed(x, [&](const auto* in) { sum_columns(SumTargets{{acc, nullptr}}, column_terms(in, cols), rows, cols, "column_sums"); });
}

// ---- attention over blocks of a sequence (context parallelism) ---------------------------------
// Plain kernels, a thread per query row (forward, merge, dq) or per key row (dk, dv), each
// computing its row's sums in order: the CPU's formulas (kernels.h), no tiling, no atomics.

// A thread per (b, h, i): the online softmax over the keys the query sees, into its out row.
__global__ void attention_block_forward_kernel(float* out, float* lse, const float* q, const float* kv, const int32_t* q_pos,
                                               const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV, float scale) {
  const size_t n = size_t(B) * NH * Tq;
  GRID_STRIDE(r, n) {  // r = (b NH + h) Tq + i
    const int i = int(r % size_t(Tq)), h = int((r / size_t(Tq)) % size_t(NH)), b = int(r / (size_t(Tq) * NH));
    const int g = h / (NH / NKV);
    const size_t qrow = size_t(NH) * HS, kvrow = size_t(2) * NKV * HS;
    const float* qi = q + (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
    float* oi = out + (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
    const float* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
    const float* vb = kb + size_t(NKV) * HS;
    for (int d = 0; d < HS; ++d) oi[d] = 0.0f;
    float m = -INFINITY, sum = 0.0f;
    for (int j = 0; j < Tk; ++j) {
      if (k_pos[j] > q_pos[i]) continue;
      const float* kj = kb + size_t(j) * kvrow;
      float sc = 0.0f;
      for (int d = 0; d < HS; ++d) sc += qi[d] * kj[d];
      sc *= scale;
      const float m2 = fmaxf(m, sc), c = expf(m - m2), p = expf(sc - m2);
      const float* vj = vb + size_t(j) * kvrow;
      for (int d = 0; d < HS; ++d) oi[d] = oi[d] * c + p * vj[d];
      sum = sum * c + p;
      m = m2;
    }
    if (sum > 0.0f) {
      for (int d = 0; d < HS; ++d) oi[d] /= sum;
      lse[r] = m + logf(sum);
    } else {
      lse[r] = -INFINITY;
    }
  }
}

// A thread per (b, h, t): one row's merge.
__global__ void attention_block_merge_kernel(float* acc, float* acc_lse, const float* out, const float* lse, int B, int T, int NH, int HS) {
  const size_t n = size_t(B) * NH * T;
  GRID_STRIDE(r, n) {
    const size_t t = r % size_t(T), h = (r / size_t(T)) % size_t(NH), b = r / (size_t(T) * NH);
    const float a = acc_lse[r], l = lse[r];
    if (l == -INFINITY) continue;
    float* o = acc + (b * T + t) * size_t(NH) * HS + h * HS;
    const float* x = out + (b * T + t) * size_t(NH) * HS + h * HS;
    if (a == -INFINITY) {
      for (int d = 0; d < HS; ++d) o[d] = x[d];
      acc_lse[r] = l;
      continue;
    }
    const float m = fmaxf(a, l), merged = m + logf(expf(a - m) + expf(l - m));
    const float wa = expf(a - merged), wl = expf(l - merged);
    for (int d = 0; d < HS; ++d) o[d] = o[d] * wa + x[d] * wl;
    acc_lse[r] = merged;
  }
}

// A thread per (b, h, i): dq[i] += scale sum_j P_ij (dO_i . v_j - dO_i . O_i) k_j.
__global__ void attention_block_dq_kernel(float* dq, const float* dout, const float* q, const float* kv, const float* out, const float* lse,
                                          const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV,
                                          float scale) {
  const size_t n = size_t(B) * NH * Tq;
  GRID_STRIDE(r, n) {
    const int i = int(r % size_t(Tq)), h = int((r / size_t(Tq)) % size_t(NH)), b = int(r / (size_t(Tq) * NH));
    const float l = lse[r];
    if (l == -INFINITY) continue;
    const int g = h / (NH / NKV);
    const size_t qrow = size_t(NH) * HS, kvrow = size_t(2) * NKV * HS, at = (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
    const float* kb = kv + size_t(b) * Tk * kvrow + size_t(g) * HS;
    const float* vb = kb + size_t(NKV) * HS;
    float delta = 0.0f;
    for (int d = 0; d < HS; ++d) delta += dout[at + d] * out[at + d];
    for (int j = 0; j < Tk; ++j) {
      if (k_pos[j] > q_pos[i]) continue;
      const float *kj = kb + size_t(j) * kvrow, *vj = vb + size_t(j) * kvrow;
      float sc = 0.0f, dp = 0.0f;
      for (int d = 0; d < HS; ++d) {
        sc += q[at + d] * kj[d];
        dp += dout[at + d] * vj[d];
      }
      const float p = expf(sc * scale - l), ds = p * (dp - delta) * scale;
      for (int d = 0; d < HS; ++d) dq[at + d] += ds * kj[d];
    }
  }
}

// A thread per (b, g, j): dk[j] += scale sum_{h of g, i} dS_ij q_i, dv[j] += sum P_ij dO_i.
__global__ void attention_block_dkv_kernel(float* dkv, const float* dout, const float* q, const float* kv, const float* out, const float* lse,
                                           const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS, int NKV,
                                           float scale) {
  const size_t n = size_t(B) * NKV * Tk;
  GRID_STRIDE(r, n) {
    const int j = int(r % size_t(Tk)), g = int((r / size_t(Tk)) % size_t(NKV)), b = int(r / (size_t(Tk) * NKV));
    const int group = NH / NKV;
    const size_t qrow = size_t(NH) * HS, kvrow = size_t(2) * NKV * HS;
    const float* kj = kv + (size_t(b) * Tk + j) * kvrow + size_t(g) * HS;
    const float* vj = kj + size_t(NKV) * HS;
    float* dkj = dkv + (size_t(b) * Tk + j) * kvrow + size_t(g) * HS;
    float* dvj = dkj + size_t(NKV) * HS;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      for (int i = 0; i < Tq; ++i) {
        if (k_pos[j] > q_pos[i]) continue;
        const float l = lse[(size_t(b) * NH + h) * Tq + i];
        if (l == -INFINITY) continue;
        const size_t at = (size_t(b) * Tq + i) * qrow + size_t(h) * HS;
        float sc = 0.0f, dp = 0.0f, delta = 0.0f;
        for (int d = 0; d < HS; ++d) {
          sc += q[at + d] * kj[d];
          dp += dout[at + d] * vj[d];
          delta += dout[at + d] * out[at + d];
        }
        const float p = expf(sc * scale - l), ds = p * (dp - delta) * scale;
        for (int d = 0; d < HS; ++d) {
          dvj[d] += p * dout[at + d];
          dkj[d] += ds * q[at + d];
        }
      }
    }
  }
}

// dst (rows, ld_dst)[:, :width] = src (rows, ld_src)[:, :width], converted on the way.
template <typename Out, typename In>
__global__ void copy_columns_kernel(Out* dst, int ld_dst, const In* src, int ld_src, int width, size_t n) {
  GRID_STRIDE(e, n) {
    const size_t r = e / size_t(width), c = e % size_t(width);
    element::store(dst + r * ld_dst + c, element::load(src + r * ld_src + c));
  }
}

// ---- mixture of experts: moving token rows (kernels.h's contracts) -----------------------------

// out (R, C) row r = weight[r] * inp[index[r]] (weight nullptr: 1); a negative index gives zeros.
__global__ void gather_rows_kernel(float* out, const float* inp, const int32_t* index, const float* weight, int C, size_t n) {
  GRID_STRIDE(e, n) {
    const size_t r = e / size_t(C), c = e % size_t(C);
    const int32_t i = index[r];
    out[e] = i < 0 ? 0.0f : (weight ? weight[r] : 1.0f) * inp[size_t(i) * C + c];
  }
}

// out (N, C) row t += its K source rows in order, each times its weight: every output element one
// thread's sum, in the CPU's order, so no atomics and the same sum every run.
__global__ void scatter_add_rows_kernel(float* out, const float* inp, const int32_t* index, const float* weight, int K, int C, size_t n) {
  GRID_STRIDE(e, n) {
    const size_t t = e / size_t(C), c = e % size_t(C);
    float acc = out[e];
    for (int j = 0; j < K; ++j) {
      const size_t s = t * K + size_t(j);
      const int32_t i = index[s];
      if (i >= 0) acc += (weight ? weight[s] : 1.0f) * inp[size_t(i) * C + c];
    }
    out[e] = acc;
  }
}

// out (R) = the dot product of rows r of a and b (R, C): one warp per row, summed in double as the
// CPU sums it (lanes in a fixed order: the same bits every run).
__global__ void row_dot_kernel(float* out, const float* a, const float* b, int R, int C) {
  const size_t lane = threadIdx.x % kWarp;
  for (size_t r = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / kWarp; r < size_t(R); r += size_t(gridDim.x) * blockDim.x / kWarp) {
    const float* x = a + r * C;
    const float* y = b + r * C;
    double s = 0;
    for (size_t c = lane; c < size_t(C); c += kWarp) s += double(x[c]) * double(y[c]);
    for (int off = kWarp / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) out[r] = float(s);
  }
}

// ---- embeddings --------------------------------------------------------------------------------

// wpe nullptr: no learned positions (Llama), out = wte[token].
__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe, int T, int C,
                                       size_t n) {
  GRID_STRIDE(i, n) {
    const size_t row = i / C, c = i % C;
    const float w = wte[size_t(tokens[row]) * C + c];
    out[i] = wpe ? w + wpe[(row % T) * C + c] : w;
  }
}

// The embeddings' gradients add the rows of dout in ascending order onto the existing gradient, as
// the CPU's encoder_backward does, so the two give the same bits, and no atomics.
//
// links[row] for the token gradient (element_math.h: token_link): one thread per row scans the
// tokens through shared memory, N^2 comparisons (16.8M at 4096 rows).
__global__ void token_links_kernel(int32_t* links, const int32_t* tokens, int N) {
  __shared__ int32_t tile[kThreads];
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  const int32_t t = row < N ? tokens[row] : -1;
  int next = -1;
  bool earlier = false;
  for (int j0 = 0; j0 < N; j0 += kThreads) {
    __syncthreads();
    if (j0 + int(threadIdx.x) < N) tile[threadIdx.x] = tokens[j0 + threadIdx.x];
    __syncthreads();
    element::scan_token_links(tile, min(kThreads, N - j0), j0, row, t, next, earlier);
  }
  if (row < N) links[row] = element::token_link(next, earlier);
}

// dwte (V, C) += dout rows by token: thread (row, c) of a token's first row walks its chain.
__global__ void encoder_token_grads_kernel(float* dwte, const float* dout, const int32_t* tokens, const int32_t* links, int C, size_t n) {
  GRID_STRIDE(i, n) {
    const int row = int(i / C), c = int(i % C);
    if (element::link_has_earlier(links[row])) continue;
    float* w = dwte + size_t(tokens[row]) * C + c;
    *w = element::token_chain_sum(*w, dout, links, C, row, c);
  }
}

// dwpe (>= T, C) += dout rows by position: thread (t, c) adds sequences 0 .. B - 1 in order.
__global__ void encoder_position_grads_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  GRID_STRIDE(i, size_t(T) * C) {
    float s = dwpe[i];
    for (int b = 0; b < B; ++b) s += dout[size_t(b) * T * C + i];
    dwpe[i] = s;
  }
}

// ---- layernorm: one warp per row ---------------------------------------------------------------

template <typename Out>
__global__ void layernorm_forward_kernel(Out* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                         int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += kWarp) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += kWarp) v += (x[c] - m) * (x[c] - m);
  const float r = element::layernorm_rstd(warp_sum(v) / C);
  Out* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += kWarp) element::store(o + c, (x[c] - m) * r * weight[c] + bias[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp accumulates; dinp_low, where given, gets the sum rounded to bf16.
__global__ void layernorm_dinp_kernel(float* dinp, bf16* dinp_low, const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* dy = dout + size_t(row) * C;
  float* dx = dinp + size_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float a = 0, b = 0;
  for (int c = lane; c < C; c += kWarp) {
    const float dn = dy[c] * weight[c];
    a += dn;
    b += dn * (x[c] - m) * r;
  }
  a = warp_sum(a) / C;
  b = warp_sum(b) / C;
  bf16* low = dinp_low ? dinp_low + size_t(row) * C : nullptr;
  for (int c = lane; c < C; c += kWarp) {
    const float v = dx[c] + element::layernorm_dx(dy[c], weight[c], (x[c] - m) * r, r, a, b);
    dx[c] = v;
    if (low) low[c] = to_bf16(v);
  }
}

// Rows of C = 4 m floats, m <= 32 kVec, held in registers: one warp a row, lane l holding the
// float4s l, l + 32, ... of it, so that every element is read from memory once (layernorm_rows).
// Rows whose C is no multiple of 4, wider than 2048, or not 16-byte aligned take the kernels above.
constexpr int kRowWarps = 4;  // warps of a block of the row kernels
template <int kVec>
struct RowVecs {
  float4 v[kVec];
};
template <int kVec>
__device__ __forceinline__ void load_row(RowVecs<kVec>& r, const float* row, int n4) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int i = lane + k * kWarp;
    r.v[k] = i < n4 ? reinterpret_cast<const float4*>(row)[i] : make_float4(0, 0, 0, 0);
  }
}
__device__ __forceinline__ float4 ldg4(const float* p, int i) { return __ldg(reinterpret_cast<const float4*>(p) + i); }
__device__ __forceinline__ float& at(float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }
__device__ __forceinline__ float at(const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

template <int kVec, typename Out>
__global__ void __launch_bounds__(kRowWarps * kWarp) layernorm_forward_vec_kernel(Out* out, float* mean, float* rstd, const float* inp,
                                                                                   const float* weight, const float* bias, int N, int C) {
  const int row = blockIdx.x * kRowWarps + threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n4 = C / 4;
  if (row >= N) return;
  RowVecs<kVec> x;
  load_row(x, inp + size_t(row) * C, n4);
  float s = 0;
#pragma unroll
  for (int k = 0; k < kVec; ++k) s += (x.v[k].x + x.v[k].y) + (x.v[k].z + x.v[k].w);  // zeros past the row
  const float m = warp_sum(s) / C;
  float v = 0;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (lane + k * kWarp >= n4) break;
#pragma unroll
    for (int j = 0; j < 4; ++j) v += (at(x.v[k], j) - m) * (at(x.v[k], j) - m);
  }
  const float r = element::layernorm_rstd(warp_sum(v) / C);
  Out* o = out + size_t(row) * C;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int i = lane + k * kWarp;
    if (i >= n4) break;
    const float4 w = ldg4(weight, i), b = ldg4(bias, i);
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) y[j] = (at(x.v[k], j) - m) * r * at(w, j) + at(b, j);
    store_vec<4>(o + 4 * i, y);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// Layernorm's backward over rows held in registers, kWarps warps a block. Block b takes rows
// b chunk_rows .. (b + 1) chunk_rows - 1, its warp w every kWarps-th of them from w. With dinp,
// it accumulates the input gradient (and its bf16 copy into dinp_low, where given); with
// partials, it also sums the parameter gradients' terms, dy norm and dy, per column: each warp
// over its rows in order in shared memory, then the warps in order into partials[k][b][column]
// (k 0: dweight, 1: dbias), which add_column_partials_kernel adds over the blocks. So dout and
// inp are read once for both, and the sums' order depends on the sizes (and kWarps) only.
template <int kVec, int kWarps>
__global__ void __launch_bounds__(kWarps * kWarp, kWarps == 8 ? 2 : 0)
    layernorm_backward_vec_kernel(float* dinp, bf16* dinp_low, float* partials, const float* dout, const float* inp, const float* weight,
                                  const float* mean, const float* rstd, int N, int C, int chunk_rows) {
  extern __shared__ float4 sums[];  // with partials: [warp][2][C / 4]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n4 = C / 4;
  float4* my = sums + size_t(warp) * 2 * n4;
  if (partials) {
    for (int i = lane; i < 2 * n4; i += kWarp) my[i] = make_float4(0, 0, 0, 0);
  }
  const int r0 = blockIdx.x * chunk_rows, r1 = min(N, r0 + chunk_rows);
  for (int row = r0 + warp; row < r1; row += kWarps) {
    RowVecs<kVec> dy, x;
    load_row(dy, dout + size_t(row) * C, n4);
    load_row(x, inp + size_t(row) * C, n4);
    const float m = mean[row], r = rstd[row];
    float a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = lane + k * kWarp;
      if (i >= n4) break;
      const float4 w = ldg4(weight, i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float dn = at(dy.v[k], j) * at(w, j), norm = (at(x.v[k], j) - m) * r;
        a += dn;
        b += dn * norm;
        at(x.v[k], j) = norm;  // x is not needed past here
      }
      if (partials) {
        float4 &dw = my[i], &db = my[n4 + i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          at(dw, j) += at(dy.v[k], j) * at(x.v[k], j);
          at(db, j) += at(dy.v[k], j);
        }
      }
    }
    if (!dinp) continue;
    a = warp_sum(a) / C;
    b = warp_sum(b) / C;
    float* dx = dinp + size_t(row) * C;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = lane + k * kWarp;
      if (i >= n4) break;
      const float4 w = ldg4(weight, i);
      float4 d = reinterpret_cast<const float4*>(dx)[i];
#pragma unroll
      for (int j = 0; j < 4; ++j) at(d, j) += element::layernorm_dx(at(dy.v[k], j), at(w, j), at(x.v[k], j), r, a, b);
      reinterpret_cast<float4*>(dx)[i] = d;
      if (dinp_low) {
        const float v[4] = {d.x, d.y, d.z, d.w};
        store_vec<4>(dinp_low + size_t(row) * C + 4 * i, v);
      }
    }
  }
  if (!partials) return;
  __syncthreads();
  const float* all = reinterpret_cast<const float*>(sums);
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {  // c: column c % C of sum c / C
    float t = 0;
    for (int w = 0; w < kWarps; ++w) t += all[size_t(w) * 2 * C + c];
    partials[(size_t(c / C) * gridDim.x + blockIdx.x) * C + c % C] = t;
  }
}

// ---- RMSNorm: one warp per row -----------------------------------------------------------------

// out (N, C) = x rstd w, rstd (N) = 1 / sqrt(mean(x^2) + eps) saved.
template <typename Out>
__global__ void rmsnorm_forward_kernel(Out* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;  // the whole warp: a row is a warp's
  const float* x = inp + size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += kWarp) s += x[c] * x[c];
  const float r = element::rmsnorm_rstd(warp_sum(s) / C, eps);
  Out* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += kWarp) element::store(o + c, x[c] * r * weight[c]);
  if (lane == 0) rstd[row] = r;
}

// dinp (N, C) += the input gradient; dinp_low, where given, gets the sum rounded to bf16.
__global__ void rmsnorm_dinp_kernel(float* dinp, bf16* dinp_low, const float* dout, const float* inp, const float* weight,
                                    const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* dy = dout + size_t(row) * C;
  float* dx = dinp + size_t(row) * C;
  const float r = rstd[row];
  float b = 0;
  for (int c = lane; c < C; c += kWarp) b += dy[c] * weight[c] * (x[c] * r);
  b = warp_sum(b) / C;
  bf16* low = dinp_low ? dinp_low + size_t(row) * C : nullptr;
  for (int c = lane; c < C; c += kWarp) {
    const float v = dx[c] + element::rmsnorm_dx(dy[c], weight[c], x[c] * r, r, b);
    dx[c] = v;
    if (low) low[c] = to_bf16(v);
  }
}

// ---- softmax rows ------------------------------------------------------------------------------

// Causal attention rows: att (rows = B*NH*T, T) holds scale * q.k; row t of each (b, h) becomes
// softmax over j <= t, and 0 above the diagonal. One warp per row.
__global__ void causal_softmax_kernel(float* att, int rows, int T) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = row % T;
  float* a = att + size_t(row) * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += kWarp) mx = fmaxf(mx, a[j]);
  mx = warp_max(mx);
  float s = 0;
  for (int j = lane; j <= t; j += kWarp) {
    const float e = expf(a[j] - mx);
    a[j] = e;
    s += e;
  }
  const float inv = 1.0f / warp_sum(s);
  for (int j = lane; j < T; j += kWarp) a[j] = j <= t ? a[j] * inv : 0.0f;
}

// ds (rows, T): on entry dP, on exit dS = scale P (dP - rowsum(P dP)), 0 above the diagonal.
__global__ void causal_softmax_backward_kernel(float* ds, const float* p, int rows, int T, float scale) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = row % T;
  float* d = ds + size_t(row) * T;
  const float* pr = p + size_t(row) * T;
  float dot = 0;
  for (int j = lane; j <= t; j += kWarp) dot += pr[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += kWarp) d[j] = j <= t ? scale * pr[j] * (d[j] - dot) : 0.0f;
}

// Cross-entropy over the vocabulary, one block per row: losses[i] = lse - logit[target];
// probs = softmax(logits) (may alias logits: every thread reads the target logit and the row's
// statistics before any thread writes).
__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits, const int32_t* targets, int V) {
  const size_t row = blockIdx.x;
  const float* x = logits + row * V;
  float* p = probs + row * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_reduce<float, true>(mx);
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - mx);
  s = block_reduce<float, false>(s);
  const float target_logit = x[targets[row]];
  __syncthreads();  // the target logit is read before probs (maybe logits) are written
  const float lse = logf(s) + mx;
  const float inv = 1.0f / s;
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = expf(x[j] - mx) * inv;
  if (threadIdx.x == 0) losses[row] = lse - target_logit;
}

template <typename Out>
__global__ void crossentropy_backward_kernel(Out* dlogits, const float* probs, const int32_t* targets, float dloss, int V, size_t n) {
  GRID_STRIDE(i, n) {
    const size_t row = i / V;
    const int j = int(i % V);
    element::store(dlogits + i, dloss * probs[i] - (j == targets[row] ? dloss : 0.0f));
  }
}

// expf as element_math.h's online softmax takes the exponential.
struct Expf {
  __host__ __device__ float operator()(float x) const { return expf(x); }
};

// A block's online-softmax runs merged into one, in a fixed order (across a warp by shuffles, then
// the warps in order); every thread gets the same run.
__device__ element::SoftmaxRun block_softmax(element::SoftmaxRun r) {
  const auto merge = [](element::SoftmaxRun a, element::SoftmaxRun b) { return element::softmax_merge(a, b, Expf{}); };
  for (int o = kWarp / 2; o > 0; o /= 2) {
    r = merge(r, {__shfl_xor_sync(0xffffffffu, r.m, o), __shfl_xor_sync(0xffffffffu, r.s, o)});  // the same in both lanes: max and + commute
  }
  return across_warps(r, merge);
}

// Cross-entropy and its gradient in one pass over the logits, one block a row: the row's online
// softmax (element_math.h) in one read, then dlogits = dloss (exp(x - m) / s - onehot) in a second,
// and losses[row] = m + log s - logit[target]. No probabilities are kept. dlogits may alias logits:
// each element is read before it is written, by the same thread, and every thread reads the target
// logit before the block's merge, whose barriers come before any write.
template <typename Out>
__global__ void crossentropy_fused_kernel(float* losses, Out* dlogits, const float* logits, const int32_t* targets, float dloss, int V) {
  constexpr int kUnroll = 4;  // loads in flight per thread
  const size_t row = blockIdx.x;
  const float* x = logits + row * V;
  Out* d = dlogits + row * V;
  element::SoftmaxRun run = element::softmax_empty();
  for (int j0 = threadIdx.x; j0 < V; j0 += kUnroll * kThreads) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = j0 + u * kThreads < V ? x[j0 + u * kThreads] : -INFINITY;  // -inf adds nothing
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) element::softmax_add(run, v[u], Expf{});
  }
  const int target = targets[row];
  const float target_logit = x[target];
  run = block_softmax(run);
  const float inv = 1.0f / run.s;
  for (int j = threadIdx.x; j < V; j += kThreads) {
    element::store(d + j, dloss * (expf(x[j] - run.m) * inv) - (j == target ? dloss : 0.0f));
  }
  if (threadIdx.x == 0) losses[row] = run.m + logf(run.s) - target_logit;
}

// ---- one launch over a segment list (ops.h: SegmentList) ---------------------------------------

// adamw_update over every segment of segs (nsegs, laid out; `total` elements): element i of the
// concatenation is element i - first of its segment, at begin in params and grads and at moment
// in m and v. W elements a thread at a time: 4 (16-byte accesses) where the list is in quads
// (ops.h: SegmentList::quads, so that W consecutive elements of the concatenation lie in one
// segment, aligned there) and the four buffers are 16-byte aligned, else 1.
template <int W>
__global__ void adamw_segments_kernel(float* params, float* m, float* v, const float* grads, const Segment* segs, size_t nsegs,
                                      size_t total, element::AdamWStep<float> plain, element::AdamWStep<float> decayed) {
  size_t k = 0;
  GRID_STRIDE(q, total / W) {
    const size_t i = q * W;
    k = element::segment_of(segs, nsegs, i, k);
    const Segment& s = segs[k];
    const size_t off = i - s.first, pi = s.begin + off, mi = s.moment + off;
    float p[W], mk[W], vk[W], g[W];
    load_vec<W>(p, params + pi);
    load_vec<W>(mk, m + mi);
    load_vec<W>(vk, v + mi);
    load_vec<W>(g, grads + pi);
    const element::AdamWStep<float>& st = s.decay ? decayed : plain;
#pragma unroll
    for (int j = 0; j < W; ++j) element::adamw(p[j], mk[j], vk[j], g[j], st);
    store_vec<W>(params + pi, p);
    store_vec<W>(m + mi, mk);
    store_vec<W>(v + mi, vk);
  }
}

// *out = the sum of x^2 over the segments, in double, in one launch whose result does not depend
// on scheduling: block b sums its grid-stride elements (fixed by the grid and total) and writes
// partials[b]; the block that finishes last (the atomic count after each block's fence says which)
// adds partials[0, gridDim.x) in block order and resets the count for the next launch.
__global__ void sum_of_squares_segments_kernel(double* out, double* partials, unsigned* blocks_done, const float* x,
                                               const Segment* segs, size_t nsegs, size_t total) {
  double s = 0;
  size_t k = 0;
  GRID_STRIDE(i, total) {
    k = element::segment_of(segs, nsegs, i, k);
    const double v = x[segs[k].begin + (i - segs[k].first)];
    s += v * v;
  }
  s = block_reduce<double, false>(s);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = s;
    __threadfence();  // this partial reaches every block before the count does
    last = atomicAdd(blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    double t = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) t += __ldcg(partials + b);  // from L2, where the other blocks wrote
    *out = t;
    *blocks_done = 0;
  }
}

// ---- deterministic reductions to the host ------------------------------------------------------

// partials[b] = sum over this block's grid-stride elements of f(x[i]) (x^2 or x), in double.
template <bool kSquare>
__global__ void partial_sums_kernel(double* partials, const float* x, size_t n) {
  double s = 0;
  GRID_STRIDE(i, n) {
    const double v = x[i];
    s += kSquare ? v * v : v;
  }
  s = block_reduce<double, false>(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(double* out, const double* partials, int count) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    double s = 0;
    for (int i = 0; i < count; ++i) s += partials[i];
    *out = s;
  }
}

// sum of x (or x^2) over n, on the host: waits for the stream.
// The scratch is the context's, so one reduction runs at a time (ranks that are threads of one
// process may share the GPU).
std::mutex g_reduce_mutex;

// The double at the scratch's last slot, where a reduction left it, on the host: waits for the
// stream. NaN when the copy or the wait failed (recorded for the next check()).
double result_to_host(Context& c) {
  if (!STAGECRAFT_CUDA_OK(cudaMemcpyAsync(c.host_result, c.partials + Context::kMaxPartials - 1, sizeof(double),
                                          cudaMemcpyDeviceToHost, c.stream)) ||
      !STAGECRAFT_CUDA_OK(cudaStreamSynchronize(c.stream))) {
    return NAN;
  }
  return *c.host_result;
}

template <bool kSquare>
double reduce_to_host(const float* x, size_t n) {
  Context& c = ctx();
  if (n == 0) return 0.0;
  std::lock_guard<std::mutex> lock(g_reduce_mutex);
  const unsigned blocks = std::min<unsigned>(blocks_for(n), Context::kMaxPartials);
  partial_sums_kernel<kSquare><<<blocks, kThreads, 0, c.stream>>>(c.partials, x, n);
  sum_partials_kernel<<<1, 1, 0, c.stream>>>(c.partials + Context::kMaxPartials - 1, c.partials, static_cast<int>(blocks));
  launched("reduce");
  return result_to_host(c);
}

// The sum of squares over a segment list on the host: one launch, one wait. The grid leaves the
// scratch's last slot to the result.
double sum_of_squares_segments_to_host(const float* x, const SegmentList& segs) {
  Context& c = ctx();
  if (segs.elements == 0) return 0.0;
  std::lock_guard<std::mutex> lock(g_reduce_mutex);
  const unsigned blocks = std::min<unsigned>(blocks_for(segs.elements), Context::kMaxPartials - 1);
  sum_of_squares_segments_kernel<<<blocks, kThreads, 0, c.stream>>>(c.partials + Context::kMaxPartials - 1, c.partials, c.blocks_done, x,
                                                                     segs.segments, segs.count, segs.elements);
  launched("sum_of_squares_segments");
  return result_to_host(c);
}

// ---- GEMMs (cuBLAS, column-major views of row-major buffers) -----------------------------------

void sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  if (m <= 0 || n <= 0) return;
  STAGECRAFT_CUDA_OK(cublasSgemm(ctx().cublas, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
}

void sgemm_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* A, int lda,
                   long long sa, const float* B, int ldb, long long sb, float beta, float* C, int ldc, long long sc, int batch) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  STAGECRAFT_CUDA_OK(
      cublasSgemmStridedBatched(ctx().cublas, ta, tb, m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc, batch));
}

constexpr cublasOperation_t N_ = CUBLAS_OP_N, T_ = CUBLAS_OP_T;

// ---- 16-bit GEMMs (train.precision: bf16 or fp16): 16-bit inputs, fp32 accumulation and output --
// `Low` is __nv_bfloat16 or __half. An fp16 copy of a value beyond 65504 is infinite: with fp16
// the trainer's loss scaler (runtime/loss_scaler.h) sees the overflow and skips the step.

template <typename To>
__device__ To from_float(float x);
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __ushort_as_bfloat16(to_bf16(x).bits); }  // bf16.h's rounding
template <>
__device__ __half from_float<__half>(float x) { return __float2half(x); }
template <>
__device__ float from_float<float>(float x) { return x; }
template <>
__device__ bf16 from_float<bf16>(float x) { return to_bf16(x); }

template <typename Low>
constexpr cudaDataType_t cuda_type() {
  return std::is_same_v<Low, __half> ? CUDA_R_16F : CUDA_R_16BF;
}

// out (n) = in (n) in another type: a 16-bit GEMM operand, a widened bf16 activation, a rounded one.
template <typename To, typename From>
__global__ void convert_kernel(To* out, const From* in, size_t n) {
  GRID_STRIDE(i, n) out[i] = from_float<To>(element::load(in + i));
}

template <typename To, typename From>
void convert(To* out, const From* in, size_t n) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out, in, n);
  launched("convert");
}

// Four growing scratch slots: copies of a GEMM's operands in another type (16-bit copies of fp32
// ones, fp32 copies of bf16 activations) in 0 to 2, and in slot 2 (or 3, where 2 holds an
// operand at the time) the fp32 result of a kernel whose output is bf16 (staged). One kernel at a
// time holds them (ranks that are threads of one process share the stream): the lock keeps each
// GEMM's casts and its call adjacent on the stream.
struct LowScratch {
  std::mutex mutex;
  void* p[4] = {nullptr, nullptr, nullptr, nullptr};
  size_t cap[4] = {0, 0, 0, 0};  // bytes
};
LowScratch g_low;

// Scratch slot k with room for n elements of T (its contents undefined), or nullptr when it could
// not grow (recorded). The caller holds g_low.mutex.
template <typename T>
T* scratch_slot(int k, size_t n) {
  return static_cast<T*>(grown(g_low.p[k], g_low.cap[k], n * sizeof(T)));
}

// x (n elements of From) as To in scratch slot k, or nullptr (recorded).
template <typename To, typename From>
const To* converted(int k, const From* x, size_t n) {
  To* out = scratch_slot<To>(k, n);
  if (out) convert(out, x, n);
  return out;
}

// The cuBLAS type of a GEMM's output: fp32, or the inputs' 16-bit type (cublasGemmEx and its
// batched form take bf16 A and B with a bf16 C in fp32 arithmetic, and fp16 likewise).
template <typename Out>
constexpr cudaDataType_t out_type() {
  return std::is_same_v<Out, float> ? CUDA_R_32F : cuda_type<Out>();
}

// C (fp32, or of the inputs' type) = A B + beta C in fp32 arithmetic.
template <typename Low, typename Out>
void gemm_low(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const Low* A, int lda, const Low* B, int ldb, float beta,
              Out* C, int ldc) {
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, Low>);
  if (m <= 0 || n <= 0 || !A || !B) return;
  const float alpha = 1.0f;
  STAGECRAFT_CUDA_OK(cublasGemmEx(ctx().cublas, ta, tb, m, n, k, &alpha, A, cuda_type<Low>(), lda, B, cuda_type<Low>(), ldb, &beta, C,
                                  out_type<Out>(), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <typename Low, typename Out>
void sgemm_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const Low* A, int lda, long long sa,
                   const Low* B, int ldb, long long sb, float beta, Out* C, int ldc, long long sc, int batch) {
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, Low>);
  if (m <= 0 || n <= 0 || batch <= 0 || !A || !B) return;
  STAGECRAFT_CUDA_OK(cublasGemmStridedBatchedEx(ctx().cublas, ta, tb, m, n, k, &alpha, A, cuda_type<Low>(), lda, sa, B, cuda_type<Low>(),
                                                ldb, sb, &beta, C, out_type<Out>(), ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
}

// Where a kernel writes a bf16 output's fp32 values (scratch slot `slot`, 2 unless an operand
// holds it; the caller holds g_low.mutex), or the fp32 output itself; nullptr when the scratch
// could not grow (recorded). settle rounds them into place.
float* staged(ActOut out, size_t n, int slot = 2) { return out.low() ? scratch_slot<float>(slot, n) : out.f32(); }
void settle(ActOut out, const float* staged_values, size_t n) {
  if (out.low()) convert(out.low(), staged_values, n);
}

// A GEMM operand of type In from an activation of n elements: the buffer itself where its type is
// In, else its copy as In in scratch slot `slot` (the caller holds g_low.mutex then).
template <typename In>
const In* operand(int slot, ActIn x, size_t n) {
  if (const bf16* low = x.low()) {
    if constexpr (std::is_same_v<In, __nv_bfloat16>) {
      return reinterpret_cast<const __nv_bfloat16*>(low);
    } else {
      return converted<In>(slot, low, n);
    }
  }
  if constexpr (std::is_same_v<In, float>) {
    return x.f32();
  } else {
    return converted<In>(slot, x.f32(), n);
  }
}

// Whether rows of C floats go through the row kernels (layernorm_forward_vec_kernel and
// layernorm_backward_vec_kernel): a multiple of 4, at most 2048.
bool takes_row_vecs(int C) { return C > 0 && C % 4 == 0 && C <= 16 * 4 * kWarp; }

// Calls f.template operator()<kVec>() with the float4s a lane holds of a row of C floats; false,
// calling nothing, where C takes the scalar kernels.
template <typename F>
bool with_row_vecs(int C, F&& f) {
  if (!takes_row_vecs(C)) return false;
  const int per_lane = (C / 4 + kWarp - 1) / kWarp;
  if (per_lane <= 4) {
    f.template operator()<4>();
  } else if (per_lane <= 8) {
    f.template operator()<8>();
  } else if (per_lane <= 12) {
    f.template operator()<12>();
  } else {
    f.template operator()<16>();
  }
  return true;
}

// Blocks of the row kernels for N rows, a row a warp.
unsigned row_blocks(int N) { return static_cast<unsigned>((N + kRowWarps - 1) / kRowWarps); }

}  // namespace

// With the parameter sums, layernorm's backward runs at most 256 blocks (chunks), so
// blocks of 4 warps keep some 8 warps an SM busy, each over 4 rows in turn at 774M (N 4096),
// with two waits on memory a row. Blocks of 8 warps hold twice the rows in flight for the same
// partials: 2 blocks an SM fit by registers (ptxas -v at sm_90: 128 a thread up to C 1536, no
// spill) and by shared memory (96 KB a block at C 1536). Rows wider than 1536 (167 registers)
// keep 4 warps. train.kernels.layernorm_backward_warps: 8 asks for them; auto keeps 4 until a
// GPU run has timed both.
// The widest rows, in float4s a lane, whose backward may take blocks of 8 warps (C 1536; wider
// ones keep 4, above). One constant for the launch below and for what a run records.
constexpr int kEightWarpsMaxVec = 12;

int layernorm_backward_warps(int C, config::NormWarps choice) {
  bool eight = false;
  if (!with_row_vecs(C, [&]<int V>() { eight = V <= kEightWarpsMaxVec && choice == config::NormWarps::kEight; })) return 0;
  return eight ? 8 : 4;
}

int layernorm_backward_warps(int C) {
  return layernorm_backward_warps(C, context() ? context()->kernels.layernorm_backward_warps : config::NormWarps::kAuto);
}

namespace {

// Layernorm's backward through layernorm_backward_vec_kernel, its parameter sums in the same
// pass; false, launching nothing, where the rows take the scalar kernels. The parameter sums cut
// the rows into at most 256 chunks (as sum_columns does) of at least 16 rows, a block each.
bool layernorm_backward_vec(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                            const float* mean, const float* rstd, int N, int C, bf16* dinp_low) {
  if (!takes_row_vecs(C) || !aligned16(dout, inp, weight, dinp, dinp_low)) return false;
  const bool sums = dweight || dbias;
  auto launch = [&]<int V, int W>() {
    const int chunk_rows = sums ? std::max(16, (N + 255) / 256) : W;
    const int chunks = (N + chunk_rows - 1) / chunk_rows;
    const size_t shared = sums ? size_t(W) * 2 * C * sizeof(float) : 0;
    std::unique_lock<std::mutex> lock(g_sums.mutex, std::defer_lock);
    float* partials = nullptr;
    if (sums) {
      lock.lock();
      partials = static_cast<float*>(grown(g_sums.p, g_sums.cap, size_t(2) * chunks * C * sizeof(float)));
      if (!partials) return;  // recorded
    }
    auto kernel = layernorm_backward_vec_kernel<V, W>;
    if (shared > 48 * 1024 &&
        !STAGECRAFT_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)))) {
      return;
    }
    kernel<<<unsigned(chunks), W * kWarp, shared, stream()>>>(dinp, dinp_low, partials, dout, inp, weight, mean, rstd, N, C, chunk_rows);
    if (sums) add_column_partials(SumTargets{{dweight, dbias}}, 2, partials, chunks, C, stream());
    launched("layernorm_backward");
  };
  const bool eight = layernorm_backward_warps(C) == 8;
  return with_row_vecs(C, [&]<int V>() {
    if constexpr (V <= kEightWarpsMaxVec) {
      if (eight) return launch.template operator()<V, 8>();
    }
    launch.template operator()<V, 4>();
  });
}

unsigned warp_rows_blocks(int rows) { return static_cast<unsigned>((rows + kThreads / kWarp - 1) / (kThreads / kWarp)); }

class CudaOps final : public Ops {
 public:
  explicit CudaOps(config::Precision precision) : precision_(precision) {}

  // The bias comes in the GEMM's epilogue through cuBLASLt where it can (lt_gemm.h: the bias of
  // the output's type), else it is added to an fp32 result (staged for a bf16 output) after a
  // cublasGemmEx.
  // A residual comes in as cuBLASLt's C with beta 1 there (fp32 out), else it is added after.
  template <typename Low>
  static void matmul_forward_low(ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC, Layout layout,
                                 const float* residual) {
    std::lock_guard<std::mutex> lock(g_low.mutex);
    const Low* w = operand<Low>(0, weight, size_t(C) * OC);
    const Low* x = operand<Low>(1, inp, size_t(BT) * C);
    if (!w || !x) return;
    const cublasOperation_t ta = layout == Layout::kInOut ? N_ : T_;
    const int lda = layout == Layout::kInOut ? OC : C;
    const bool bias_matches = bias.data && bias.type == out.type;
    if (bias_matches && (!residual || !out.low()) &&
        lt_gemm_bias(ta, N_, OC, BT, C, w, lda, x, C, cuda_type<Low>(), out.data, out.low() ? CUDA_R_16BF : CUDA_R_32F, OC, bias.data,
                     residual)) {
      return;
    }
    const size_t n = size_t(BT) * OC;
    float* o = staged(out, n);
    if (!o) return;
    // A residual that is the output itself comes in with beta 1, another one is added after.
    gemm_low(ta, N_, OC, BT, C, w, lda, x, C, residual && residual == o ? 1.0f : 0.0f, o, OC);
    add_bias(o, bias, BT, OC);
    if (residual != o) add_residual(o, residual, n);
    settle(out, o, n);
  }

  static void add_residual(float* out, const float* residual, size_t n) {
    if (!residual || n == 0) return;
    add_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out, out, residual, n);
    launched("add_residual");
  }

  void matmul_forward(ActOut out_act, ActIn inp_act, ActIn weight_act, ActIn bias, int BT, int C, int OC, Layout layout,
                      const float* residual) const override {
    if (residual && out_act.low()) {
      record_error("matmul_forward: a residual needs an fp32 output");
      return;
    }
    if (precision_ != config::Precision::kFp32) {
      if (precision_ == config::Precision::kFp16) {
        matmul_forward_low<__half>(out_act, inp_act, weight_act, bias, BT, C, OC, layout, residual);
      } else {
        matmul_forward_low<__nv_bfloat16>(out_act, inp_act, weight_act, bias, BT, C, OC, layout, residual);
      }
      return;
    }
    std::unique_lock<std::mutex> lock(g_low.mutex, std::defer_lock);
    if (inp_act.low() || weight_act.low() || out_act.low()) lock.lock();  // widened into scratch, or a bf16 output staged there
    const float* inp = operand<float>(1, inp_act, size_t(BT) * C);
    const float* weight = operand<float>(0, weight_act, size_t(C) * OC);
    float* out = staged(out_act, size_t(BT) * OC);
    if (!inp || !weight || !out) return;
    // out^T (OC, BT) = W^T (OC, C) inp^T (C, BT); W (C, OC) row-major is W^T column-major. A
    // residual that is out itself comes in with beta 1, another one is added after.
    const float beta = residual && residual == out ? 1.0f : 0.0f;
    if (layout == Layout::kInOut) {
      sgemm(N_, N_, OC, BT, C, 1.0f, weight, OC, inp, C, beta, out, OC);
    } else {
      sgemm(T_, N_, OC, BT, C, 1.0f, weight, C, inp, C, beta, out, OC);
    }
    add_bias(out, bias, BT, OC);
    if (residual != out) add_residual(out, residual, size_t(BT) * OC);
    settle(out_act, out, size_t(BT) * OC);
  }

  // With bf16 in, out and bias, cuBLASLt's GELU epilogue where it has an algorithm (lt_gemm.h);
  // else the two kernels.
  void matmul_gelu_forward(ActOut pre, ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC,
                           Layout layout) const override {
    if (precision_ == config::Precision::kBf16 && pre.low() && out.low() && bias.low()) {
      std::unique_lock<std::mutex> lock(g_low.mutex);
      const __nv_bfloat16* w = operand<__nv_bfloat16>(0, weight, size_t(C) * OC);
      const __nv_bfloat16* x = operand<__nv_bfloat16>(1, inp, size_t(BT) * C);
      if (!w || !x) return;
      const cublasOperation_t ta = layout == Layout::kInOut ? N_ : T_;
      if (lt_gemm_bias_gelu(ta, N_, OC, BT, C, w, layout == Layout::kInOut ? OC : C, x, C, CUDA_R_16BF, out.data, CUDA_R_16BF, OC,
                            bias.data, pre.data)) {
        return;
      }
    }
    Ops::matmul_gelu_forward(pre, out, inp, weight, bias, BT, C, OC, layout);
  }

  static void add_bias(float* out, ActIn bias, int BT, int OC) {
    if (!bias.data) return;
    with_typed(bias, [&](const auto* b) { add_bias_kernel<<<blocks_for(size_t(BT) * OC), kThreads, 0, stream()>>>(out, b, size_t(BT), OC); });
    launched("add_bias");
  }

  template <typename Low>
  static void matmul_backward_low(ActOut dinp, float* dweight, ActIn dout, ActIn inp, ActIn weight, int BT, int C, int OC,
                                  Layout layout) {
    std::lock_guard<std::mutex> lock(g_low.mutex);
    const Low* dy = operand<Low>(0, dout, size_t(BT) * OC);
    if (dinp.data) {  // dinp (BT, C) = dout (BT, OC) W^T (kInOut) or dout W (kOutIn)
      const Low* w = operand<Low>(1, weight, size_t(C) * OC);
      const auto gemm = [&](auto* d) {
        if (layout == Layout::kInOut) {
          gemm_low(T_, N_, C, BT, OC, w, OC, dy, OC, 0.0f, d, C);
        } else {
          gemm_low(N_, N_, C, BT, OC, w, C, dy, OC, 0.0f, d, C);
        }
      };
      if (!dinp.low()) {
        gemm(dinp.f32());
      } else if constexpr (std::is_same_v<Low, __nv_bfloat16>) {
        gemm(reinterpret_cast<__nv_bfloat16*>(dinp.low()));  // rounded to bf16 by cuBLAS as it stores
      } else {
        // fp16 inputs with a bf16 output: fp32 staged (slot 2, which x takes only after), rounded.
        float* d = staged(dinp, size_t(BT) * C);
        if (!d) return;
        gemm(d);
        settle(dinp, d, size_t(BT) * C);
      }
    }
    if (dweight) {
      const Low* x = operand<Low>(2, inp, size_t(BT) * C);
      if (layout == Layout::kInOut) {
        gemm_low(N_, T_, OC, C, BT, dy, OC, x, C, 1.0f, dweight, OC);
      } else {
        gemm_low(N_, T_, C, OC, BT, x, C, dy, OC, 1.0f, dweight, C);
      }
    }
  }

  void matmul_backward(ActOut dinp_act, float* dweight, float* dbias, ActIn dout_act, ActIn inp_act, ActIn weight_act, int BT, int C,
                       int OC, Layout layout) const override {
    if (precision_ != config::Precision::kFp32) {
      if (precision_ == config::Precision::kFp16) {
        matmul_backward_low<__half>(dinp_act, dweight, dout_act, inp_act, weight_act, BT, C, OC, layout);
      } else {
        matmul_backward_low<__nv_bfloat16>(dinp_act, dweight, dout_act, inp_act, weight_act, BT, C, OC, layout);
      }
      if (dbias) column_sums(dbias, dout_act, BT, OC);
      return;
    }
    std::unique_lock<std::mutex> lock(g_low.mutex, std::defer_lock);
    const bool want_dinp = dinp_act.data != nullptr;
    // widened into scratch, or a bf16 dinp staged there (slot 3: 0 to 2 hold the operands)
    if ((dweight && inp_act.low()) || (want_dinp && weight_act.low()) || dout_act.low() || dinp_act.low()) lock.lock();
    const float* inp = dweight ? operand<float>(2, inp_act, size_t(BT) * C) : nullptr;
    const float* weight = want_dinp ? operand<float>(1, weight_act, size_t(C) * OC) : nullptr;
    const float* dout = operand<float>(0, dout_act, size_t(BT) * OC);
    float* dinp = want_dinp ? staged(dinp_act, size_t(BT) * C, 3) : nullptr;
    if ((dweight && !inp) || (want_dinp && (!weight || !dinp)) || !dout) return;
    if (dinp) {  // dinp (BT, C) = dout (BT, OC) W^T (kInOut) or dout W (kOutIn)
      if (layout == Layout::kInOut) {
        sgemm(T_, N_, C, BT, OC, 1.0f, weight, OC, dout, OC, 0.0f, dinp, C);
      } else {
        sgemm(N_, N_, C, BT, OC, 1.0f, weight, C, dout, OC, 0.0f, dinp, C);
      }
      settle(dinp_act, dinp, size_t(BT) * C);
    }
    if (dweight) {  // += inp^T dout (C, OC), or dout^T inp (OC, C)
      if (layout == Layout::kInOut) {
        sgemm(N_, T_, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, OC);
      } else {
        sgemm(N_, T_, C, OC, BT, 1.0f, inp, C, dout, OC, 1.0f, dweight, C);
      }
    }
    if (dbias) column_sums(dbias, dout, BT, OC);
  }

  void layernorm_forward(ActOut out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N,
                         int C) const override {
    if (N <= 0) return;
    with_typed(out, [&](auto* o) {
      const bool vec = aligned16(o, inp, weight, bias) && with_row_vecs(C, [&]<int V>() {
        layernorm_forward_vec_kernel<V><<<row_blocks(N), kRowWarps * kWarp, 0, stream()>>>(o, mean, rstd, inp, weight, bias, N, C);
      });
      if (!vec) layernorm_forward_kernel<<<warp_rows_blocks(N), kThreads, 0, stream()>>>(o, mean, rstd, inp, weight, bias, N, C);
    });
    launched("layernorm_forward");
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C, bf16* dinp_low) const override {
    if (N <= 0) return;
    if (layernorm_backward_vec(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dinp_low)) return;
    if (dinp) {
      layernorm_dinp_kernel<<<warp_rows_blocks(N), kThreads, 0, stream()>>>(dinp, dinp_low, dout, inp, weight, mean, rstd, N, C);
      launched("layernorm_backward");
    }
    if (dweight || dbias) sum_columns(SumTargets{{dweight, dbias}}, LayernormParamTerms{dout, inp, mean, rstd, C}, N, C, "layernorm_backward");
  }

  // Per sequence b: the heads of q, k, v are column blocks of qkv's rows (ld (NH + 2 NKV) HS). With
  // bf16 or fp16, the batched GEMMs take 16-bit copies of q, k, v, the probabilities and the
  // gradients; the softmax and its backward stay fp32. A bf16 output is staged.
  void attention_forward(ActOut out_act, float* att, ActIn qkv, int B, int T, int NH, int HS, int NKV) const override {
    std::unique_lock<std::mutex> lock(g_low.mutex, std::defer_lock);
    if (precision_ != config::Precision::kFp32 || out_act.low() || qkv.low()) lock.lock();
    const size_t n = size_t(B) * T * NH * HS;
    float* out = staged(out_act, n);
    if (!out) return;
    switch (precision_) {
      case config::Precision::kFp32: attention_forward_as<float>(out, att, qkv, B, T, NH, HS, NKV); break;
      case config::Precision::kFp16: attention_forward_as<__half>(out, att, qkv, B, T, NH, HS, NKV); break;
      case config::Precision::kBf16: attention_forward_as<__nv_bfloat16>(out, att, qkv, B, T, NH, HS, NKV); break;
    }
    settle(out_act, out, n);
  }

  // With bf16 GEMMs and a bf16 dqkv, the batched GEMMs write dq, dk, dv in bf16 themselves where
  // every K/V head has one query head (the group's sum would otherwise be rounded to bf16 at each
  // query head); any other bf16 dqkv is staged in fp32 (slot 3) and rounded into place.
  void attention_backward(ActOut dqkv_act, float* scratch, ActIn dout, ActIn qkv, const float* att, int B, int T, int NH, int HS,
                          int NKV) const override {
    std::unique_lock<std::mutex> lock(g_low.mutex, std::defer_lock);
    if (precision_ != config::Precision::kFp32 || qkv.low() || dout.low() || dqkv_act.low()) lock.lock();
    if (precision_ == config::Precision::kBf16 && dqkv_act.low() && NKV == NH) {
      attention_backward_as<__nv_bfloat16>(reinterpret_cast<__nv_bfloat16*>(dqkv_act.low()), scratch, dout, qkv, att, B, T, NH, HS, NKV);
      return;
    }
    const size_t n = size_t(B) * T * (NH + 2 * NKV) * HS;
    float* dqkv = staged(dqkv_act, n, 3);
    if (!dqkv) return;
    switch (precision_) {
      case config::Precision::kFp32: attention_backward_as<float>(dqkv, scratch, dout, qkv, att, B, T, NH, HS, NKV); break;
      case config::Precision::kFp16: attention_backward_as<__half>(dqkv, scratch, dout, qkv, att, B, T, NH, HS, NKV); break;
      case config::Precision::kBf16: attention_backward_as<__nv_bfloat16>(dqkv, scratch, dout, qkv, att, B, T, NH, HS, NKV); break;
    }
    settle(dqkv_act, dqkv, n);
  }

  // Grouped-query attention without copies: query head h = g G + j (G = NH / NKV query heads a
  // K/V head) reads K/V head g. For each j, one batched product over the NKV groups g: q and the
  // probabilities step by G heads a batch entry, k and v by one. With G = 1 that is one product
  // over the NH heads, as multi-head attention.
  template <typename In>
  static void attention_forward_as(float* out, float* att, ActIn qkv_f, int B, int T, int NH, int HS, int NKV) {
    const int G = NH / NKV, Cq = NH * HS, Ckv = NKV * HS, C3 = Cq + 2 * Ckv;
    const float scale = 1.0f / sqrtf(float(HS));
    const long long TT = static_cast<long long>(T) * T, GHS = static_cast<long long>(G) * HS, GTT = G * TT;
    const In* qkv = operand<In>(0, qkv_f, size_t(B) * T * C3);
    if (!qkv) return;  // its copy could not be made (recorded): no product may read from it
    for (int b = 0; b < B; ++b) {
      const In* q = qkv + size_t(b) * T * C3;  // (T, NH HS), ld C3
      const In* k = q + Cq;                    // (T, NKV HS), ld C3
      const In* v = k + Ckv;
      float* a = att + size_t(b) * NH * TT;  // (NH, T, T)
      // att_h (T, T) = scale q_h k_g^T: column-major att^T = k_g q_h^T.
      for (int j = 0; j < G; ++j) {
        sgemm_batched(T_, N_, T, T, HS, scale, k, C3, HS, q + j * HS, C3, GHS, 0.0f, a + j * TT, T, GTT, NKV);
      }
      causal_softmax_kernel<<<warp_rows_blocks(NH * T), kThreads, 0, stream()>>>(a, NH * T, T);
      launched("attention_forward");
      const In* p = operand<In>(1, a, size_t(NH) * TT);
      if (!p) return;
      // out_h (T, HS) = att_h v_g: column-major out^T = v_g^T att_h^T.
      float* o = out + size_t(b) * T * Cq;  // (T, NH HS)
      for (int j = 0; j < G; ++j) {
        sgemm_batched(N_, N_, HS, T, T, 1.0f, v, C3, HS, p + j * TT, T, GTT, 0.0f, o + j * HS, Cq, GHS, NKV);
      }
    }
  }

  // dqkv: fp32, or In (bf16 GEMMs writing bf16, where NKV = NH). dk_g and dv_g sum over the group's
  // query heads j in order: the product of j = 0 writes them (beta 0), the others add (beta 1).
  template <typename In, typename Grads>
  static void attention_backward_as(Grads* dqkv, float* scratch, ActIn dout_f, ActIn qkv_f, const float* att, int B, int T,
                                    int NH, int HS, int NKV) {
    const int G = NH / NKV, Cq = NH * HS, Ckv = NKV * HS, C3 = Cq + 2 * Ckv;
    const float scale = 1.0f / sqrtf(float(HS));
    const long long TT = static_cast<long long>(T) * T, GHS = static_cast<long long>(G) * HS, GTT = G * TT;
    const In* qkv = operand<In>(0, qkv_f, size_t(B) * T * C3);
    const In* dout = operand<In>(2, dout_f, size_t(B) * T * Cq);
    if (!qkv || !dout) return;  // a copy could not be made (recorded): no product may read from it
    for (int b = 0; b < B; ++b) {
      const In* q = qkv + size_t(b) * T * C3;
      const In* k = q + Cq;
      const In* v = k + Ckv;
      Grads* dq = dqkv + size_t(b) * T * C3;
      Grads* dk = dq + Cq;
      Grads* dv = dk + Ckv;
      const float* a = att + size_t(b) * NH * TT;
      const In* dy = dout + size_t(b) * T * Cq;
      float* ds = scratch + size_t(b) * NH * TT;
      // dP_h (T, T) = dy_h v_g^T;  dv_g (T, HS) = sum over the group of P_h^T dy_h.
      for (int j = 0; j < G; ++j) sgemm_batched(T_, N_, T, T, HS, 1.0f, v, C3, HS, dy + j * HS, Cq, GHS, 0.0f, ds + j * TT, T, GTT, NKV);
      const In* p = operand<In>(1, a, size_t(NH) * TT);
      if (!p) return;
      for (int j = 0; j < G; ++j) {
        sgemm_batched(N_, T_, HS, T, T, 1.0f, dy + j * HS, Cq, GHS, p + j * TT, T, GTT, j == 0 ? 0.0f : 1.0f, dv, C3, HS, NKV);
      }
      causal_softmax_backward_kernel<<<warp_rows_blocks(NH * T), kThreads, 0, stream()>>>(ds, a, NH * T, T, scale);
      launched("attention_backward");
      // dq_h = dS_h k_g;  dk_g = sum over the group of dS_h^T q_h.
      const In* dS = operand<In>(1, ds, size_t(NH) * TT);
      if (!dS) return;
      for (int j = 0; j < G; ++j) {
        sgemm_batched(N_, N_, HS, T, T, 1.0f, k, C3, HS, dS + j * TT, T, GTT, 0.0f, dq + j * HS, C3, GHS, NKV);
        sgemm_batched(N_, T_, HS, T, T, 1.0f, q + j * HS, C3, GHS, dS + j * TT, T, GTT, j == 0 ? 0.0f : 1.0f, dk, C3, HS, NKV);
      }
    }
  }

  bool has_flash_attention() const override { return true; }
  int max_flash_head() const override { return kMaxHead; }
  void flash_attention_forward(ActOut out, float* lse, ActIn qkv, int B, int T, int NH, int HS, int NKV) const override {
    cuda::flash_attention_forward(out, lse, qkv, B, T, NH, HS, NKV);
  }
  // The kernels take dqkv and dout both fp32, or both bf16 on tensor cores (cuda_kernels.h); any
  // other mix goes through fp32 here: dout widened, dqkv staged and rounded into place.
  void flash_attention_backward(ActOut dqkv, float* scratch, ActIn dout, ActIn qkv, ActIn out, const float* lse, int B, int T,
                                int NH, int HS, int NKV) const override {
    if (flash_backward_takes(dqkv, dout, qkv, HS)) {
      cuda::flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, NKV);
      return;
    }
    std::lock_guard<std::mutex> lock(g_low.mutex);
    const size_t n = size_t(B) * T * NH * HS, n3 = size_t(B) * T * (NH + 2 * NKV) * HS;
    const float* dy = operand<float>(0, dout, n);
    float* d = staged(dqkv, n3);
    if (!dy || !d) return;
    cuda::flash_attention_backward(d, scratch, dy, qkv, out, lse, B, T, NH, HS, NKV);
    settle(dqkv, d, n3);
  }

  // RMSNorm: a warp per row, as layernorm's scalar kernels; the weight gradient through the
  // column sums (sum_columns: fixed order, no atomics).
  void rmsnorm_forward(ActOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) const override {
    if (N <= 0) return;
    with_typed(out, [&](auto* o) {
      rmsnorm_forward_kernel<<<warp_rows_blocks(N), kThreads, 0, stream()>>>(o, rstd, inp, weight, N, C, eps);
    });
    launched("rmsnorm_forward");
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd, int N,
                        int C, bf16* dinp_low) const override {
    if (N <= 0) return;
    if (dinp) {
      rmsnorm_dinp_kernel<<<warp_rows_blocks(N), kThreads, 0, stream()>>>(dinp, dinp_low, dout, inp, weight, rstd, N, C);
      launched("rmsnorm_backward");
    }
    if (dweight) sum_columns(SumTargets{{dweight, nullptr}}, RmsnormParamTerms{dout, inp, rstd, C}, N, C, "rmsnorm_backward");
  }

  // Rotary positions in place: a thread per rotated pair (rope_kernel).
  static void rope(ActOut qkv, int B, int T, int NH, int NKV, int HS, float theta, float sign, int first) {
    const size_t n = size_t(B) * T * (NH + NKV) * (HS / 2);
    if (n == 0) return;
    with_typed(qkv, [&](auto* x) { rope_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(x, T, NH, NKV, HS, theta, sign, n, first); });
    launched("rope");
  }
  void rope_forward(ActOut qkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const override {
    rope(qkv, B, T, NH, NKV, HS, theta, 1.0f, first);
  }
  void rope_backward(ActOut dqkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const override {
    rope(dqkv, B, T, NH, NKV, HS, theta, -1.0f, first);
  }

  // Context parallelism's block attention (kernels.h): the plain kernels above, fp32.
  void attention_block_forward(float* out, float* lse, const float* q, const float* kv, const int32_t* q_pos, const int32_t* k_pos,
                               int B, int Tq, int Tk, int NH, int HS, int NKV) const override {
    const size_t n = size_t(B) * NH * Tq;
    if (n == 0) return;
    attention_block_forward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out, lse, q, kv, q_pos, k_pos, B, Tq, Tk, NH, HS, NKV,
                                                                               1.0f / sqrtf(float(HS)));
    launched("attention_block_forward");
  }
  void attention_block_merge(float* acc, float* acc_lse, const float* out, const float* lse, int B, int T, int NH,
                             int HS) const override {
    const size_t n = size_t(B) * NH * T;
    if (n == 0) return;
    attention_block_merge_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(acc, acc_lse, out, lse, B, T, NH, HS);
    launched("attention_block_merge");
  }
  void attention_block_backward(float* dq, float* dkv, const float* dout, const float* q, const float* kv, const float* out,
                                const float* lse, const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                int NKV) const override {
    const float scale = 1.0f / sqrtf(float(HS));
    const size_t nq = size_t(B) * NH * Tq, nk = size_t(B) * NKV * Tk;
    if (nq == 0 || nk == 0) return;
    attention_block_dq_kernel<<<blocks_for(nq), kThreads, 0, stream()>>>(dq, dout, q, kv, out, lse, q_pos, k_pos, B, Tq, Tk, NH, HS, NKV,
                                                                          scale);
    launched("attention_block_backward (dq)");
    attention_block_dkv_kernel<<<blocks_for(nk), kThreads, 0, stream()>>>(dkv, dout, q, kv, out, lse, q_pos, k_pos, B, Tq, Tk, NH, HS,
                                                                           NKV, scale);
    launched("attention_block_backward (dk, dv)");
  }
  void copy_columns(ActOut dst, int ld_dst, ActIn src, int ld_src, int rows, int width) const override {
    const size_t n = size_t(rows) * width;
    if (n == 0) return;
    with_typed(dst, [&](auto* d) {
      with_typed(src, [&](const auto* x) { copy_columns_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d, ld_dst, x, ld_src, width, n); });
    });
    launched("copy_columns");
  }

  void swiglu_forward(ActOut out, ActIn inp, int N, int F) const override {
    const size_t n = size_t(N) * F;
    if (n == 0) return;
    with_typed(out, [&](auto* o) {
      with_typed(inp, [&](const auto* x) { swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(o, x, F, n); });
    });
    launched("swiglu_forward");
  }
  void swiglu_backward(ActOut dinp, ActIn inp, ActIn dout, int N, int F) const override {
    const size_t n = size_t(N) * F;
    if (n == 0) return;
    with_typed(dinp, [&](auto* d) {
      with_typed(inp, [&](const auto* x) {
        with_typed(dout, [&](const auto* dy) { swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d, x, dy, F, n); });
      });
    });
    launched("swiglu_backward");
  }

  void gelu_forward(ActOut out, ActIn inp, size_t N) const override {
    if (N == 0) return;
    with_typed(out, [&](auto* o) {
      with_typed(inp, [&](const auto* x) {
        elementwise_launch(N, aligned16(o, x),
                           [&]<int W>(unsigned blocks) { gelu_forward_kernel<W><<<blocks, kThreads, 0, stream()>>>(o, x, N); });
      });
    });
    launched("gelu_forward");
  }
  // dinp may be dout (in place: each element is read before it is written, by the same thread).
  void gelu_backward(ActOut dinp, ActIn inp, ActIn dout, size_t N) const override {
    if (N == 0) return;
    with_typed(dinp, [&](auto* d) {
      with_typed(inp, [&](const auto* x) {
        with_typed(dout, [&](const auto* dy) {
          elementwise_launch(N, aligned16(d, x, dy),
                             [&]<int W>(unsigned blocks) { gelu_backward_kernel<W><<<blocks, kThreads, 0, stream()>>>(d, x, dy, N); });
        });
      });
    });
    launched("gelu_backward");
  }
  void gather_rows(float* out, const float* inp, const int32_t* index, const float* weight, int R, int C) const override {
    const size_t n = size_t(R) * C;
    if (n == 0) return;
    gather_rows_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out, inp, index, weight, C, n);
    launched("gather_rows");
  }
  void scatter_add_rows(float* out, const float* inp, const int32_t* index, const float* weight, int N, int K, int C) const override {
    const size_t n = size_t(N) * C;
    if (n == 0) return;
    scatter_add_rows_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out, inp, index, weight, K, C, n);
    launched("scatter_add_rows");
  }
  void row_dot(float* out, const float* a, const float* b, int R, int C) const override {
    if (R == 0) return;
    row_dot_kernel<<<blocks_for(size_t(R) * kWarp), kThreads, 0, stream()>>>(out, a, b, R, C);
    launched("row_dot");
  }
  void residual_forward(float* out, const float* inp1, const float* inp2, size_t N) const override {
    if (N == 0) return;
    add_kernel<<<blocks_for(N), kThreads, 0, stream()>>>(out, inp1, inp2, N);
    launched("residual_forward");
  }
  void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N) const override {
    if (N == 0) return;
    if (dinp1) accumulate_kernel<<<blocks_for(N), kThreads, 0, stream()>>>(dinp1, dout, N);
    if (dinp2) accumulate_kernel<<<blocks_for(N), kThreads, 0, stream()>>>(dinp2, dout, N);
    launched("residual_backward");
  }
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) const override {
    const size_t n = size_t(B) * T * C;
    if (n == 0) return;
    encoder_forward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out, tokens, wte, wpe, T, C, n);
    launched("encoder_forward");
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) const override {
    const size_t n = size_t(B) * T * C;
    if (n == 0 || (!dwte && !dwpe)) return;
    if (dwpe) encoder_position_grads_kernel<<<blocks_for(size_t(T) * C), kThreads, 0, stream()>>>(dwpe, dout, B, T, C);
    if (dwte) {
      std::lock_guard<std::mutex> lock(g_low.mutex);
      int32_t* links = scratch_slot<int32_t>(0, size_t(B) * T);
      if (!links) return;  // recorded
      token_links_kernel<<<unsigned((size_t(B) * T + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(links, tokens, B * T);
      encoder_token_grads_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(dwte, dout, tokens, links, C, n);
    }
    launched("encoder_backward");
  }
  double crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int N, int V) const override {
    if (N <= 0) return 0.0;
    crossentropy_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream()>>>(losses, probs, logits, targets, V);
    launched("crossentropy_forward");
    return reduce_to_host<false>(losses, size_t(N)) / N;
  }
  void crossentropy_backward(ActOut dlogits, const float* probs, const int32_t* targets, float dloss, int N, int V) const override {
    const size_t n = size_t(N) * V;
    if (n == 0) return;
    with_typed(dlogits, [&](auto* d) {
      crossentropy_backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(d, probs, targets, dloss, V, n);
    });
    launched("crossentropy_backward");
  }
  double crossentropy_forward_backward(float* losses, ActOut dlogits, float* logits, const int32_t* targets, float dloss, int N,
                                       int V) const override {
    if (N <= 0) return 0.0;
    with_typed(dlogits, [&](auto* d) {
      crossentropy_fused_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream()>>>(losses, d, logits, targets, dloss, V);
    });
    launched("crossentropy_forward_backward");
    return reduce_to_host<false>(losses, size_t(N)) / N;
  }
  void adamw_update(float* params, float* m, float* v, const float* grads, size_t N, const AdamWOptions& opt, int64_t step, bool decay,
                    float grad_scale) const override {
    if (N == 0) return;
    adamw_kernel<<<blocks_for(N), kThreads, 0, stream()>>>(params, m, v, grads, N, element::adamw_step<float>(opt, step, decay, grad_scale));
    launched("adamw_update");
  }
  double sum_of_squares(const float* x, size_t N) const override { return reduce_to_host<true>(x, N); }
  void adamw_update_segments(float* params, float* m, float* v, const float* grads, SegmentList segs, const AdamWOptions& opt,
                             int64_t step, float grad_scale) const override {
    if (segs.elements == 0) return;
    const auto plain = element::adamw_step<float>(opt, step, false, grad_scale), decayed = element::adamw_step<float>(opt, step, true, grad_scale);
    elementwise_launch<4>(segs.elements, segs.quads && aligned16(params, m, v, grads), [&]<int W>(unsigned blocks) {
      adamw_segments_kernel<W><<<blocks, kThreads, 0, stream()>>>(params, m, v, grads, segs.segments, segs.count, segs.elements, plain,
                                                                  decayed);
    });
    launched("adamw_update_segments");
  }
  double sum_of_squares_segments(const float* x, SegmentList segs) const override { return sum_of_squares_segments_to_host(x, segs); }
  void round_to_bf16(bf16* out, const float* in, size_t N) const override { convert(out, in, N); }
  void scale(float* x, size_t N, float s) const override {
    if (N == 0) return;
    scale_kernel<<<blocks_for(N), kThreads, 0, stream()>>>(x, N, s);
    launched("scale");
  }

 private:
  config::Precision precision_;
};

}  // namespace

const Ops& cuda_ops(config::Precision precision) {
  static const CudaOps fp32(config::Precision::kFp32), bf16_gemms(config::Precision::kBf16), fp16_gemms(config::Precision::kFp16);
  switch (precision) {
    case config::Precision::kBf16: return bf16_gemms;
    case config::Precision::kFp16: return fp16_gemms;
    case config::Precision::kFp32: break;
  }
  return fp32;
}

}  // namespace stagecraft::runtime::cuda
