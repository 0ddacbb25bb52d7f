// The tensor-core kernels of the fused attention (`train.attention: flash`) and their launches,
// written once over a Core of runtime/flash_mma.h: flash_mma_forward.cu and flash_mma_grads.cu
// launch them with MmaSync (mma.sync, sm_80 or later), flash_wgmma.cu with runtime/flash_wgmma.h's Wgmma (Hopper's
// warpgroup products, compiled for sm_90a alone). Each .cu includes this header and instantiates
// what it launches; everything here has internal linkage.
//
// Not part of the engine's API; included by src/runtime/cuda only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <type_traits>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/flash_mma.h"
#include "runtime/flash_tiles.h"

namespace stagecraft::runtime::cuda {

namespace {

// Every flash kernel's grid is (B x NH, blocks of rows): blockIdx.x the (sequence, query head)
// (the key gradients' blocks: the first B x NKV take the (sequence, key/value head)),
// blockIdx.y the block's place in the order of work, the longest first over the whole launch (see
// tensor_forward_kernel). Where the last rows walk the most (the forward's, dQ's), block y takes the
// rows counted from the end.
__device__ __forceinline__ int last_first_block() { return int(gridDim.y - 1 - blockIdx.y); }

extern __shared__ __align__(128) unsigned char g_tile_smem[];

// ---- tensor cores: flash_mma.h's program, a block of four warps per 64-row tile ----

// What flash_mma.h asks of an Exec: a block of flash_mma::kWarps warps, ldmatrix,
// mma.sync.m16n8k16 (bf16 in, fp32 accumulators) and cp.async on sm_80 or later.
struct MmaExec {
  unsigned char* smem;
  __device__ static MmaExec at(unsigned char* block_shared) { return MmaExec{block_shared}; }
  __device__ unsigned char* shared() const { return smem; }
  __device__ int thread() const { return int(threadIdx.x); }
  __device__ int warp() const { return int(threadIdx.x) / 32; }
  __device__ int lane() const { return int(threadIdx.x) % 32; }
  __device__ void sync() const { __syncthreads(); }
  __device__ float shfl_xor(float x, int mask) const { return __shfl_xor_sync(0xffffffffu, x, mask); }
  // ldmatrix .x4, as flash_mma.h's ldsm (SUFFIX "") and ldsm_t (".trans") read it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define STAGECRAFT_LDMATRIX(NAME, SUFFIX)                                                        \
  __device__ void NAME(uint32_t(&r)[4], const bf16* p) const {                                  \
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));                       \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" SUFFIX ".shared.b16 {%0, %1, %2, %3}, [%4];\n" \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                \
                 : "r"(a));                                                                      \
  }
#else  // never launched below sm_80 (flash_tensor_cores checks)
#define STAGECRAFT_LDMATRIX(NAME, SUFFIX) \
  __device__ void NAME(uint32_t(&)[4], const bf16*) const { __trap(); }
#endif
  STAGECRAFT_LDMATRIX(ldsm, "")
  STAGECRAFT_LDMATRIX(ldsm_t, ".trans")
#undef STAGECRAFT_LDMATRIX
  __device__ void copy16(bf16* dst, const bf16* src, bool in) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(in ? 16 : 0));
#else
    __trap();
#endif
  }
  __device__ void copy4(float* dst, const float* src, bool in) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(in ? 4 : 0));
#else
    __trap();
#endif
  }
  __device__ void commit() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
  }
  template <int N>
  __device__ void wait() const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
  }
  __device__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
  }
};

// The Exec a Core's program runs with (flash_wgmma.cu adds Wgmma's).
template <typename Core>
struct ExecOf;
template <>
struct ExecOf<flash_mma::MmaSync> {
  using type = MmaExec;
};

// Blocks an SM must hold at once (__launch_bounds__ caps the registers to fit them).
// Forward: four at head sizes up to 64, 128 registers a thread, which ptxas at sm_90 reaches
// without spilling, and 46 KB of shared memory a block at head size 64.
// Gradients: three up to head size 64, 168 registers. Uncapped, ptxas at sm_90 gives the kernel
// 228 at head size 64 (two blocks an SM); capped, it spills 68 bytes a thread and loads 84, and
// the third block an SM more than pays for the spill (docs/benchmarks.md, "Attention kernel
// shapes"). At 128 the cap would spill some 500 bytes: uncapped.
template <int D>
inline constexpr int kForwardBlocks = D <= 64 ? 4 : 1;
template <int D>
inline constexpr int kGradsBlocks = D <= 64 ? 3 : 1;

// The grid of the tensor-core passes is (B x NH, tiles), blockIdx.x the (sequence, head) and
// blockIdx.y the tile's place in the order of work, so that blocks, which start in the order of
// their index (x first), start longest first over the whole launch: every head's tiles with the
// most walked tiles (the forward's last query tiles; in the backward, tensor_grads_kernel's), then
// the next longest, and the shortest fill in at the end. Ordered within each head only, a head's
// long tiles would start late and run on alone at the end of the launch; ordered over the whole
// launch, the longest walks overlap the shortest (docs/benchmarks.md counts both orders).
template <typename Core, int D, typename Out>
__global__ void __launch_bounds__(flash_mma::kThreads, kForwardBlocks<D>)
    tensor_forward_kernel(Out* out, float* lse, const bf16* qkv, int T, int NH, int hs, int NKV) {
  flash_mma::forward<D, Core>(ExecOf<Core>::type::at(g_tile_smem), out, lse, qkv, flash::slice_of(T, NH, hs, NKV, int(blockIdx.x)),
                              last_first_block());
}

// Both gradient passes in one launch: blockIdx.y takes flash_mma.h's grads_tile, the longest of
// either pass first, so that the two passes' tails are one (they read the same inputs and write
// disjoint parts of dqkv: dQ, and dK with dV). A query-gradient block is (sequence, query head)
// blockIdx.x of B x NH; a key-gradient block is (sequence, key/value head) blockIdx.x of B x NKV
// and walks its group's NH / NKV query heads (flash_mma.h's key_grads), and the key-gradient
// blocks past B x NKV have nothing to do. (With NKV < NH the key blocks walk NH / NKV times as
// long as grads_tile's order assumes: the order stays correct, only the passes' tails stop
// meeting.)
template <typename Core, int D, typename Grads>
__global__ void __launch_bounds__(flash_mma::kThreads, kGradsBlocks<D>)
    tensor_grads_kernel(Grads* dqkv, const bf16* qkv, const Grads* dout, const float* lse, const float* delta, int T, int NH, int hs,
                        int NKV) {
  const flash_mma::GradsTile g = flash_mma::grads_tile(int(gridDim.y) / 2, int(blockIdx.y));
  const auto e = ExecOf<Core>::type::at(g_tile_smem);
  const int x = int(blockIdx.x);
  if (g.key) {
    if (x >= int(gridDim.x) / NH * NKV) return;  // the whole block
    flash_mma::key_grads<D, Core>(e, dqkv, qkv, dout, lse, delta, flash::key_slice_of(T, NH, hs, NKV, x), g.tile);
  } else {
    flash_mma::query_grads<D, Core>(e, dqkv, qkv, dout, lse, delta, flash::slice_of(T, NH, hs, NKV, x), g.tile);
  }
}

// Lets kernel use `bytes` of dynamic shared memory (above the default 48 KiB needs the opt-in);
// false, with the error recorded, where the GPU refuses. Set once per kernel and size: a process
// drives one GPU (cuda_context.h), and a head size keeps its layout.
// (Kernels of one signature share a type, so the record is keyed by the kernel itself.)
template <typename Kernel>
bool allow_shared(Kernel kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<const void*, size_t> allowed;  // per kernel: what it was last allowed
  std::lock_guard<std::mutex> lock(mutex);
  size_t& now = allowed[reinterpret_cast<const void*>(kernel)];
  if (bytes <= now) return true;
  if (!STAGECRAFT_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)))) return false;
  now = bytes;
  return true;
}

// The forward's launch: a block of kThreads per 64-row query tile, (B x NH, tiles).
template <typename Core>
void launch_tensor_forward(ActOut out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV) {
  const dim3 grid(B * NH, flash_mma::tiles(T));
  flash_mma::with_padded_head(HS, [&]<int D>() {
    if constexpr (Core::template kTakes<D>) {
      const size_t bytes = flash_mma::bytes<D, Core>(flash::Pass::kForward);
      with_typed(out, [&](auto* o) {
        const auto kernel = tensor_forward_kernel<Core, D, std::remove_pointer_t<decltype(o)>>;
        if (allow_shared(kernel, bytes)) kernel<<<grid, flash_mma::kThreads, bytes, context()->stream>>>(o, lse, qkv, T, NH, HS, NKV);
      });
    } else {
      record_error("flash attention: a head size the tensor-core kernels were not compiled for");
    }
  });
}

// Both gradient passes' launch: (B x NH, 2 x tiles). dout has dqkv's element type.
template <typename Core>
void launch_tensor_grads(ActOut dqkv, const void* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH,
                         int HS, int NKV) {
  const dim3 grid(B * NH, 2 * flash_mma::tiles(T));  // both passes' tiles
  flash_mma::with_padded_head(HS, [&]<int D>() {
    if constexpr (Core::template kTakes<D>) {
      const size_t bytes = flash_mma::grads_bytes<D, Core>();
      with_typed(dqkv, [&](auto* d) {
        using Grads = std::remove_pointer_t<decltype(d)>;
        const auto kernel = tensor_grads_kernel<Core, D, Grads>;
        if (allow_shared(kernel, bytes))
          kernel<<<grid, flash_mma::kThreads, bytes, context()->stream>>>(d, qkv, static_cast<const Grads*>(dout), lse, delta, T, NH, HS,
                                                                          NKV);
      });
    } else {
      record_error("flash attention: a head size the tensor-core kernels were not compiled for");
    }
  });
}

}  // namespace

// flash_mma_forward.cu and flash_mma_grads.cu: the mma.sync launches, each pass in a translation
// unit of its own so that a build compiles them side by side (they are most of the CUDA code's
// compile time), as launch_tensor_forward and launch_tensor_grads take them.
void mma_sync_forward(ActOut out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV);
void mma_sync_grads(ActOut dqkv, const void* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH, int HS,
                    int NKV);

// flash_wgmma.cu, in a build with STAGECRAFT_FLASH_WGMMA: both passes' launches over its kernels,
// as launch_tensor_forward and launch_tensor_grads take them, where cuda_kernels.h's
// flash_warpgroup says they run.
void warpgroup_forward(ActOut out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV);
void warpgroup_grads(ActOut dqkv, const void* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH, int HS,
                     int NKV);

}  // namespace stagecraft::runtime::cuda
