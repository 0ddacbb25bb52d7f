// flash_wgmma.h's Exec on a GPU (WgmmaExec): flash_kernels.cuh's MmaExec with the block's shared
// memory from its first 1024-byte boundary, and Hopper's warpgroup products (wgmma, PTX ISA 8.0).
// Included by the files compiled for sm_90a alone: cuda/flash_wgmma.cu, which runs the fused
// attention's Wgmma kernels, and tests/gpu/wgmma_probe.cu, which runs single products of the Core
// on the GPU against plain ones. Everything here has internal linkage.
//
// Not part of the engine's API; included by src/runtime/cuda and the GPU suites only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/flash_kernels.cuh"
#include "runtime/flash_wgmma.h"

namespace stagecraft::runtime::cuda {

namespace {

template <int N>
struct Tag {};

// The accumulators of an m64nNk16 product, N / 2 floats a thread at d: their asm operands, and
// the placeholders that name them (%0 on).
#define STAGECRAFT_ACC8(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
#define STAGECRAFT_ACC16 STAGECRAFT_ACC8(0), STAGECRAFT_ACC8(8)
#define STAGECRAFT_ACC32 STAGECRAFT_ACC16, STAGECRAFT_ACC8(16), STAGECRAFT_ACC8(24)
#define STAGECRAFT_ACC64 STAGECRAFT_ACC32, STAGECRAFT_ACC8(32), STAGECRAFT_ACC8(40), STAGECRAFT_ACC8(48), STAGECRAFT_ACC8(56)
#define STAGECRAFT_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define STAGECRAFT_REGS32 STAGECRAFT_REGS16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define STAGECRAFT_REGS64 STAGECRAFT_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
// wgmma with A and B K-major in shared memory (descriptors a, b); A, B and SCALE the placeholders
// of a, b and the scale-d flag (1: accumulate).
#define STAGECRAFT_WGMMA_SS(N, REGS, ACC, A, B, SCALE)                                                             \
  __device__ static void ss(Tag<N>, float* d, uint64_t a, uint64_t b) {                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, " A ", " B ", p, 1, 1, 0, 0;\n}\n" \
                 : ACC                                                                                            \
                 : "l"(a), "l"(b), "n"(1));                                                                       \
  }
// wgmma with A this warp's fragment in registers and B in shared memory, MN-major where TransB.
#define STAGECRAFT_WGMMA_RS(N, REGS, ACC, A, B, SCALE, TRANS)                                                      \
  template <int TransB>                                                                                           \
  __device__ static void rs(Tag<N>, float* d, const uint32_t(&a)[4], uint64_t b) {                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, {" A "}, " B ", p, 1, 1, " TRANS  \
                 ";\n}\n"                                                                                         \
                 : ACC                                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1), "n"(TransB));                      \
  }

// flash_wgmma.h's Exec on a GPU: MmaExec's instructions, the block's shared memory from its first
// 1024-byte boundary (the swizzle's pattern; bytes<D, Wgmma> has the kSlack for it), and wgmma.
struct WgmmaExec : MmaExec {
  __device__ static WgmmaExec at(unsigned char* block_shared) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(block_shared));
    const uint32_t up = (a + flash_mma::kSwizzleGroup - 1) / flash_mma::kSwizzleGroup * flash_mma::kSwizzleGroup;
    return WgmmaExec{{block_shared + (up - a)}};
  }
  __device__ uint32_t shared_address(const void* p) const { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __device__ void wgmma_fence() const { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
  __device__ void wgmma_commit() const { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
  template <int N>
  __device__ void wgmma_wait() const {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
  }
  // Copies (cp.async, stores) into shared memory before it, seen by wgmma after the barrier.
  __device__ void async_fence() const { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
  __device__ void hold(float& x) const { asm volatile("" : "+f"(x)::"memory"); }
  __device__ void hold(uint32_t& x) const { asm volatile("" : "+r"(x)::"memory"); }
  template <int N>
  __device__ void wgmma_ss(float (&acc)[N / 8][4], uint64_t a, uint64_t b) const {
    ss(Tag<N>{}, &acc[0][0], a, b);
  }
  template <int N, int TransB>
  __device__ void wgmma_rs(float (&acc)[N / 8][4], const uint32_t (&a)[4], uint64_t b) const {
    rs<TransB>(Tag<N>{}, &acc[0][0], a, b);
  }

  // The products, one per shape the Core takes (m64nNk16, bf16 in, fp32 accumulators): the N / 2
  // accumulators of this thread are the asm's first operands, then the rest in order.
  STAGECRAFT_WGMMA_SS(32, STAGECRAFT_REGS16, STAGECRAFT_ACC16, "%16", "%17", "%18")
  STAGECRAFT_WGMMA_SS(64, STAGECRAFT_REGS32, STAGECRAFT_ACC32, "%32", "%33", "%34")
  STAGECRAFT_WGMMA_RS(64, STAGECRAFT_REGS32, STAGECRAFT_ACC32, "%32, %33, %34, %35", "%36", "%37", "%38")
  STAGECRAFT_WGMMA_RS(128, STAGECRAFT_REGS64, STAGECRAFT_ACC64, "%64, %65, %66, %67", "%68", "%69", "%70")
#else
  // Never run: the file is compiled for sm_90a alone, and the host pass sees these only.
  __device__ void wgmma_fence() const {}
  __device__ void wgmma_commit() const {}
  template <int N>
  __device__ void wgmma_wait() const {}
  __device__ void async_fence() const {}
  template <typename T>
  __device__ void hold(T&) const {}
  template <int N>
  __device__ void wgmma_ss(float (&)[N / 8][4], uint64_t, uint64_t) const {}
  template <int N, int TransB>
  __device__ void wgmma_rs(float (&)[N / 8][4], const uint32_t (&)[4], uint64_t) const {}
#endif
};

template <>
struct ExecOf<flash_mma::Wgmma> {
  using type = WgmmaExec;
};

}  // namespace

}  // namespace stagecraft::runtime::cuda
