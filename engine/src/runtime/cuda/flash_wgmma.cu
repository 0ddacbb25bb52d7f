// Hopper's warpgroup products for the fused attention: runtime/flash_wgmma.h's Wgmma core of
// runtime/flash_mma.h's program, in flash_kernels.cuh's kernels. Compiled for sm_90a alone (wgmma
// is an sm_90a instruction; CMake builds this file apart, STAGECRAFT_FLASH_WGMMA), so its kernels
// load on GPUs of compute capability 9.0 only; flash_attention.cu asks warpgroup_ready first and
// runs MmaSync everywhere else.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/flash_kernels.cuh"
#include "runtime/flash_wgmma.h"

namespace stagecraft::runtime::cuda {

namespace {

template <int N>
struct Tag {};

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

  // m64n32k16: A and B K-major in shared memory.
  __device__ static void ss(Tag<32>, float* d, uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "%16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "n"(1));
  }
  // m64n64k16: A and B K-major in shared memory.
  __device__ static void ss(Tag<64>, float* d, uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "n"(1));
  }
  // m64n64k16: A this warp's fragment in registers, B in shared memory (MN-major where TransB).
  template <int TransB>
  __device__ static void rs(Tag<64>, float* d, const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1), "n"(TransB));
  }

  // m64n128k16: A this warp's fragment in registers, B in shared memory (MN-major where TransB).
  template <int TransB>
  __device__ static void rs(Tag<128>, float* d, const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
          "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1), "n"(TransB));
  }
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

bool warpgroup_ready(int HS) {
  const int D = flash_mma::padded_head(HS);
  if (D != 64 && D != 128) return false;
  struct Gpu {
    int major = 0, minor = 0, optin = 0;
    bool loads = false;
  };
  static const Gpu gpu = [] {
    Gpu g;
    cudaDeviceGetAttribute(&g.major, cudaDevAttrComputeCapabilityMajor, context()->ordinal);
    cudaDeviceGetAttribute(&g.minor, cudaDevAttrComputeCapabilityMinor, context()->ordinal);
    cudaDeviceGetAttribute(&g.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, context()->ordinal);
    // The sm_90a image loads on compute capability 9.0 alone; elsewhere this fails.
    cudaFuncAttributes a{};
    g.loads = cudaFuncGetAttributes(&a, tensor_forward_kernel<flash_mma::Wgmma, 64, float>) == cudaSuccess;
    cudaGetLastError();
    return g;
  }();
  if (gpu.major != 9 || gpu.minor != 0 || !gpu.loads) return false;
  for (const flash::Pass pass : {flash::Pass::kForward, flash::Pass::kKeyGrads, flash::Pass::kQueryGrads}) {
    if (flash_mma::bytes_for_head<flash_mma::Wgmma>(pass, HS) > size_t(gpu.optin)) return false;
  }
  return true;
}

void warpgroup_forward(ActOut out, float* lse, const bf16* qkv, int B, int T, int NH, int HS) {
  launch_tensor_forward<flash_mma::Wgmma>(out, lse, qkv, B, T, NH, HS);
}

void warpgroup_grads(ActOut dqkv, const void* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH, int HS) {
  launch_tensor_grads<flash_mma::Wgmma>(dqkv, dout, qkv, lse, delta, B, T, NH, HS);
}

}  // namespace stagecraft::runtime::cuda
