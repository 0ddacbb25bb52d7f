// The CUDA backend's per-process state: the GPU this process drives, its one stream, the cuBLAS
// handle and a little scratch for reductions — and the first failure of anything issued on them.
//
// One GPU per process (a rank's worker drives the GPU its LOCAL_RANK picks), so the state is
// process-wide: the CudaDevice (cuda_device.cpp) opens it, and the kernels (cuda_kernels.cu) use
// it. Kernels are launched in order on the stream; a failure to launch, a cuBLAS error or a fault
// is recorded where it is seen and reported by the next Device::synchronize() as a Status, so
// that no failure passes unseen and no exception leaves the engine.
//
// Not part of the engine's API; included by src/runtime/cuda only.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"

namespace stagecraft::runtime::cuda {

struct Context {
  int ordinal = -1;
  cudaStream_t stream = nullptr;
  // The device's default pool, which cudaMallocAsync draws on. It keeps what is freed (release
  // threshold: all of it) rather than giving it back to the driver at every synchronisation, which
  // the loss's copy to the host makes once a micro-batch, so the next micro-batch's activations
  // are not mapped again (docs/benchmarks.md has what that saves). An allocation that fails trims
  // the pool and tries once more (cuda_device.cpp).
  cudaMemPool_t pool = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;  // the 16-bit GEMMs with a bias epilogue (lt_gemm.h)
  void* lt_workspace = nullptr;         // device, 256-byte aligned: cuBLASLt's workspace
  size_t lt_workspace_bytes = 0;        // 32 MiB from Hopper on, 4 MiB before (the cuBLAS docs' advice)
  double* partials = nullptr;      // device: kMaxPartials doubles for two-pass reductions
  double* host_result = nullptr;   // pinned host: where a reduction's result lands
  unsigned* blocks_done = nullptr;  // device: blocks of a one-launch reduction done so far (0 between launches)
  static constexpr int kMaxPartials = 1024;

  // train.kernels as the last Device::set_kernels took them: which path each kernel with more than
  // one takes (cuda_kernels.h). Every auto until a run sets them.
  config::KernelConfig kernels;

  std::mutex error_mutex;
  std::string first_error;  // empty while all is well

  // GPU memory this process's engine holds, and its high-water mark since Device::reset_peak:
  // the device's allocations, the kernels' scratch (the 16-bit copies of GEMM operands, the
  // column partials; cuda_kernels.cu) and cuBLASLt's workspace. A step event's mem_bytes.
  std::atomic<size_t> held_bytes{0}, peak_bytes{0};
  void hold(size_t bytes) {
    const size_t now = held_bytes.fetch_add(bytes) + bytes;
    size_t peak = peak_bytes.load();
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
    }
  }
  void let_go(size_t bytes) { held_bytes.fetch_sub(bytes); }
};

// The process's context; null before open_context succeeds.
Context* context();

// Opens the context on GPU `ordinal` (once per process; a second call with another ordinal fails).
Status open_context(int ordinal);

// cudaMallocAsync from the context's pool on its stream; where the GPU is out of memory, the pool
// (which keeps what is freed) gives back what it holds unused, once the stream's frees are done,
// and it tries once more. The failure, if any, is returned and left out of CUDA's last error.
cudaError_t pool_malloc(void** p, size_t bytes);

// Records a failure (the first one wins) for the next check().
void record_error(const std::string& what);

// Records a CUDA or cuBLAS error, naming the call and where it was made; returns whether it was OK.
bool ok(cudaError_t e, const char* call, const char* file, int line);
bool ok(cublasStatus_t s, const char* call, const char* file, int line);
#define STAGECRAFT_CUDA_OK(call) ::stagecraft::runtime::cuda::ok((call), #call, __FILE__, __LINE__)

// Records a kernel that failed to launch (a bad configuration, a context that faulted before);
// called after each launch.
inline void launched(const char* kernel) {
  const cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess) record_error(std::string("cuda kernel ") + kernel + ": " + cudaGetErrorString(e));
}

// The first failure recorded so far, and the launch state of the stream, as a Status (the
// recorded failure is kept: a CUDA context that faulted stays unusable).
Status check();

}  // namespace stagecraft::runtime::cuda
