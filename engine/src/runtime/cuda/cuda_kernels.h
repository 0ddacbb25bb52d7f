// The CUDA backend's kernels: runtime::cuda::cuda_ops() is the Ops table (ops.h) of the CUDA
// device, with the contracts of kernels.h on device pointers (cuda_kernels.cu); the fused
// attention of `train.attention: flash` is flash_attention.cu.
//
// Not part of the engine's API; included by src/runtime/cuda only.
#pragma once

#include "stagecraft/config/run_config.h"
#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime::cuda {

// bf16 or fp16: the GEMMs take 16-bit inputs (a bf16 activation as it is, anything else as a
// 16-bit copy) and accumulate and write fp32 (train.precision: bf16 or fp16); every other kernel
// is the same fp32 one. Every table takes fp32 and bf16 activations (ops.h).
const Ops& cuda_ops(config::Precision precision = config::Precision::kFp32);

// Calls f with an activation's typed pointer (float* or bf16*, const for an ActIn; Act is ActIn
// or ActOut), so that one launch site instantiates a kernel template for either element type.
template <typename Act, typename F>
void with_typed(Act x, F&& f) {
  if (x.low()) {
    f(x.low());
  } else {
    f(x.f32());
  }
}

// The largest head size the fused attention takes.
inline constexpr int kMaxHead = 128;

// Whether the fused attention of q, k, v in bf16 (or fp32), with head size HS, runs on tensor
// cores (flash_attention.cu says when).
bool flash_tensor_cores(bool bf16_qkv, int HS);

// Whether those tensor cores are Hopper's warpgroup products (flash_wgmma.cu) for head size HS:
// in a build with them (STAGECRAFT_FLASH_WGMMA), on a GPU of compute capability 9.0, at head
// sizes padded to 64 or 128, and while they wait for a GPU run that checks them against the tile
// program, only where STAGECRAFT_FLASH_WGMMA=1 asks for them. mma.sync runs everywhere else.
bool flash_warpgroup(int HS);

// Whether layernorm's backward runs in blocks of 8 warps (rows up to 1536 wide) instead of 4:
// only where STAGECRAFT_LAYERNORM_BACKWARD_WARPS=8 asks for it, while it waits for a GPU run
// (cuda_kernels.cu says why it might be faster).
bool layernorm_backward_eight_warps();
// The warps of a block of layernorm's backward over rows of C floats: 8 or 4 in the row kernels
// (8 where layernorm_backward_eight_warps asks and rows are at most 1536 wide), 0 where rows of C
// take the scalar kernels, a warp a row (as do rows not 16-byte aligned, which the stage's are).
int layernorm_backward_warps(int C);

// out (B, T, NH*HS) and lse (B, NH, T) from qkv (B, T, (NH + 2*NKV)*HS), causal, query head h
// reading K/V head h / (NH / NKV); see Ops.
void flash_attention_forward(ActOut out, float* lse, ActIn qkv, int B, int T, int NH, int HS, int NKV);
// dqkv (B, T, (NH + 2*NKV)*HS) overwritten, a K/V head's gradient summed over its query heads;
// delta (B, NH, T) scratch. dqkv and dout both fp32, or both bf16 where the tensor cores run: what
// flash_backward_takes says; CudaOps stages any other mix.
bool flash_backward_takes(ActOut dqkv, ActIn dout, ActIn qkv, int HS);
void flash_attention_backward(ActOut dqkv, float* delta, ActIn dout, ActIn qkv, ActIn out, const float* lse, int B, int T,
                              int NH, int HS, int NKV);

}  // namespace stagecraft::runtime::cuda
