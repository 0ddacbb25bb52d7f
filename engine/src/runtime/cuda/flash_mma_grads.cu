// The fused attention's two gradient passes on tensor cores (mma.sync, sm_80 or later):
// flash_kernels.cuh's kernels over runtime/flash_mma.h's MmaSync core, for every head size and
// gradient type they take. A translation unit of its own (flash_kernels.cuh says why);
// flash_attention.cu calls it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/flash_kernels.cuh"
#include "runtime/flash_mma.h"

namespace stagecraft::runtime::cuda {

void mma_sync_grads(ActOut dqkv, const void* dout, const bf16* qkv, const float* lse, const float* delta, int B, int T, int NH, int HS,
                    int NKV) {
  launch_tensor_grads<flash_mma::MmaSync>(dqkv, dout, qkv, lse, delta, B, T, NH, HS, NKV);
}

}  // namespace stagecraft::runtime::cuda
