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

// train.kernels: the choices the kernels below take from now on, unchecked (Device::set_kernels
// checks them against the GPU and a run's shape first; the GPU suites set an entry's choices).
// Nothing before the context opens.
void use_kernels(const config::KernelConfig& kernels);

// The fused attention's kernel paths: fp32 CUDA cores, or tensor cores through mma.sync or
// Hopper's warpgroup products (flash_wgmma.cu).
enum class FlashPath { kCudaCores, kMmaSync, kWgmma };

// Whether the tensor-core kernels can take q, k, v in bf16 with head size HS on this GPU: compute
// capability 8.0 or later, kernels built for it, each pass's tiles within its shared memory
// (flash_attention.cu). False before the context opens.
bool flash_tensor_cores_fit(int HS);
// Whether Hopper's warpgroup kernels can: a build with them (STAGECRAFT_FLASH_WGMMA), a GPU of
// compute capability 9.0, head sizes padded to 64 or 128 (flash_wgmma.cu).
bool flash_warpgroup_fit(int HS);

// The path the fused attention of q, k, v in bf16 (or fp32) with head size HS takes under
// train.kernels.flash = `choice`: fp32 q, k, v and cuda_cores take the CUDA cores; auto and
// mma_sync take mma.sync where it fits (auto keeps mma.sync until the warpgroup kernels have been
// checked and timed on a GPU; docs/gpus.md), wgmma the warpgroup products where they fit; each
// falls back in that order where its kernels do not fit (Device::set_kernels refuses a choice
// that would).
FlashPath flash_path(bool bf16_qkv, int HS, config::FlashKernels choice);
// The same under the choice the context holds (the last set_kernels'): the kernels' path now.
FlashPath flash_path(bool bf16_qkv, int HS);
inline bool flash_tensor_cores(bool bf16_qkv, int HS) { return flash_path(bf16_qkv, HS) != FlashPath::kCudaCores; }
inline bool flash_warpgroup(int HS) { return flash_path(true, HS) == FlashPath::kWgmma; }

// The warps of a block of layernorm's backward over rows of C floats under
// train.kernels.layernorm_backward_warps = `choice`: 8 where it asks for 8 and rows are at most
// 1536 wide, else 4 in the row kernels (auto keeps 4 until the 8-warp blocks have been timed on a
// GPU; cuda_kernels.cu says why they might be faster); 0 where rows of C take the scalar
// kernels, a warp a row (as do rows not 16-byte aligned, which the stage's are).
int layernorm_backward_warps(int C, config::NormWarps choice);
// The same under the context's choice: what the kernel launches now.
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
