// wgmma_probe.h: tests/engine/wgmma_products.h's block programs with the fused attention's own
// Exec on sm_90a (runtime/cuda/wgmma_exec.cuh).
#include "wgmma_probe.h"

#include <cuda_runtime.h>

#include <string>

#include "runtime/cuda/wgmma_exec.cuh"
#include "wgmma_products.h"

namespace stagecraft::test {

namespace {

using runtime::bf16;
using runtime::cuda::WgmmaExec;
namespace wp = wgmma_products;

template <int D, int N>
__global__ void __launch_bounds__(wp::kThreads) times_transposed_kernel(float* c, const bf16* a, const bf16* bt) {
  extern __shared__ __align__(128) unsigned char shared[];
  wp::times_transposed_block<D, N>(WgmmaExec::at(shared), c, a, bt);
}

template <int D, int K>
__global__ void __launch_bounds__(wp::kThreads) times_kernel(float* c, const float* p, const bf16* v) {
  extern __shared__ __align__(128) unsigned char shared[];
  wp::times_block<D, K>(WgmmaExec::at(shared), c, p, v);
}

std::string failed(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

// Copies c, x and y to the GPU, runs kernel(c, x, y) as one block of `shared` bytes of dynamic
// shared memory, and copies c back.
template <typename Kernel, typename X, typename Y>
std::string run(Kernel kernel, size_t shared, std::vector<float>& c, const std::vector<X>& x, const std::vector<Y>& y) {
  float* dc = nullptr;
  X* dx = nullptr;
  Y* dy = nullptr;
  std::string out;
  cudaError_t e = cudaMalloc(&dc, c.size() * sizeof(float));
  if (e == cudaSuccess) e = cudaMalloc(&dx, x.size() * sizeof(X));
  if (e == cudaSuccess) e = cudaMalloc(&dy, y.size() * sizeof(Y));
  if (e == cudaSuccess) e = cudaMemcpy(dc, c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dx, x.data(), x.size() * sizeof(X), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dy, y.data(), y.size() * sizeof(Y), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    out = failed("staging the probe's operands", e);
  } else {
    kernel<<<1, wp::kThreads, shared>>>(dc, dx, dy);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) out = failed("the probe's kernel", e);
  }
  cudaFree(dc);
  cudaFree(dx);
  cudaFree(dy);
  return out;
}

}  // namespace

std::string probe_times_transposed(int D, int N, const std::vector<bf16>& a, const std::vector<bf16>& bt, std::vector<float>& c) {
  if (a.size() != size_t(wp::kTile) * D || bt.size() != size_t(N) * D || c.size() != size_t(wp::kTile) * N) return "probe: operand sizes";
  std::string out = "probe: a shape the Core does not take";
  wp::with_shape(D, N, [&]<int kD, int kN>() { out = run(times_transposed_kernel<kD, kN>, wp::kTimesTransposedBytes<kD, kN>, c, a, bt); });
  return out;
}

std::string probe_times(int D, int K, const std::vector<float>& p, const std::vector<bf16>& v, std::vector<float>& c) {
  if (p.size() != size_t(wp::kTile) * K || v.size() != size_t(K) * D || c.size() != size_t(wp::kTile) * D) return "probe: operand sizes";
  std::string out = "probe: a shape the Core does not take";
  wp::with_shape(D, K, [&]<int kD, int kK>() { out = run(times_kernel<kD, kK>, wp::kTimesBytes<kD, kK>, c, p, v); });
  return out;
}

}  // namespace stagecraft::test
