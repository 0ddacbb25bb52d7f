// tests/engine/wgmma_products.h's block programs on the GPU, one block each (wgmma_probe.cu,
// compiled for sm_90a alone, where the attention's wgmma kernels are built); for tst_cuda's
// warpgroupProductsMatchPlainProducts, on compute capability 9.0 only. Each copies its operands
// to the GPU, runs, and copies c back; it answers empty, or what CUDA said.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/runtime/bf16.h"

namespace stagecraft::test {

// c (64 x N) += a (64 x D) bt^T: times_transposed_block. D 64 or 128, N 32 or 64.
std::string probe_times_transposed(int D, int N, const std::vector<runtime::bf16>& a, const std::vector<runtime::bf16>& bt,
                                   std::vector<float>& c);

// c (64 x D) += p (64 x K) v: times_block. D 64 or 128, K 32 or 64.
std::string probe_times(int D, int K, const std::vector<float>& p, const std::vector<runtime::bf16>& v, std::vector<float>& c);

}  // namespace stagecraft::test
