// Hopper's warpgroup products for the fused attention: runtime/flash_wgmma.h's Wgmma core of
// runtime/flash_mma.h's program, in flash_kernels.cuh's kernels. Compiled for sm_90a alone (wgmma
// is an sm_90a instruction; CMake builds this file apart, STAGECRAFT_FLASH_WGMMA), so its kernels
// load on GPUs of compute capability 9.0 only; flash_attention.cu runs them where flash_path says
// and MmaSync everywhere else.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/wgmma_exec.cuh"

namespace stagecraft::runtime::cuda {

// Whether these kernels take head size HS on this GPU: compute capability 9.0, the head size
// padded to 64 or 128, and every pass's shared memory within the GPU's.
bool flash_warpgroup_fit(int HS) {
  if (!context()) return false;
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

void warpgroup_forward(ActOut out, float* lse, const bf16* qkv, int B, int T, int NH, int HS, int NKV) {
  launch_tensor_forward<flash_mma::Wgmma>(out, lse, qkv, B, T, NH, HS, NKV);
}

void warpgroup_grads(ActOut dqkv, const void* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH, int HS,
                     int NKV) {
  launch_tensor_grads<flash_mma::Wgmma>(dqkv, dout, qkv, lse, delta, B, T, NH, HS, NKV);
}

}  // namespace stagecraft::runtime::cuda
