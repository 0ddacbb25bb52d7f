// The CPU device (host memory, 64-byte aligned), and OpenBLAS kept single-threaded.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "runtime/cpu/cpu_math.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime {

namespace {

class CpuDevice final : public Device {
 public:
  Backend backend() const override { return Backend::kCpu; }
  std::string name() const override {
    return "cpu (" + std::to_string(cpu::num_threads()) + " threads)";
  }

  Result<void*> allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    const size_t kAlign = 64;  // a cache line, and the widest vector (AVX-512)
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (p == nullptr) {
      return Status::unavailable("cpu: out of memory allocating " + std::to_string(bytes) + " bytes");
    }
    return p;
  }
  void release(void* ptr) override { std::free(ptr); }

  Status copy_from_host(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return Status::OK();
  }
  Status fill_zero(void* dst, size_t bytes) override {
    if (bytes != 0) std::memset(dst, 0, bytes);
    return Status::OK();
  }
  Status synchronize() override { return Status::OK(); }
  const Ops& ops() const override { return cpu_ops(); }
  bool host_accessible() const override { return true; }

  // Every precision computes in fp32 here (the trainer sets no other), every GEMM is cut into
  // single-threaded OpenBLAS calls over the engine's threads (matmul.cpp), and attention is
  // attention.cpp's whichever train.attention asks: the CPU's ops have no fused kernel, so the
  // trainer runs the same math unfused. Context parallelism's ring computes by blocks.
  std::vector<KernelPath> kernel_paths(const KernelShape& shape) const override {
    const int threads = cpu::num_threads();
    std::vector<KernelPath> paths;
    paths.push_back({"gemm", "OpenBLAS sgemm (" + std::to_string(threads) + (threads == 1 ? " thread)" : " threads)")});
    paths.push_back({"attention", shape.cp_ring                                   ? "context-parallel ring, OpenBLAS blocks"
                                  : shape.attention == config::Attention::kFlash ? "standard (no fused attention on the CPU)"
                                                                                 : "standard, causal blocks of OpenBLAS"});
    return paths;
  }
};

}  // namespace

KernelShape KernelShape::of(const config::RunConfig& config) {
  KernelShape s;
  s.precision = config.train.precision;
  s.tf32 = config.train.tf32 && config.train.precision == config::Precision::kFp32;
  s.attention = config.train.attention;
  s.head_size = config.model.head_size();
  s.hidden = config.model.hidden;
  s.rmsnorm = config.model.llama();
  s.cp_ring = config.parallel.cp > 1 && config.parallel.cp_comm == config::CpComm::kRing;
  s.kernels = config.train.kernels;
  return s;
}

Device& host_device() {
  static CpuDevice device;
  return device;
}

#if defined(STAGECRAFT_WITH_CUDA)
namespace cuda {
Result<std::unique_ptr<Device>> make_cuda_device(int ordinal);  // src/runtime/cuda/cuda_device.cpp
int device_count();
}  // namespace cuda
bool cuda_built() { return true; }
int cuda_device_count() { return cuda::device_count(); }
#else
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
#endif

Result<std::unique_ptr<Device>> make_device(Backend backend, int ordinal) {
  switch (backend) {
    case Backend::kCpu:
      return std::unique_ptr<Device>(std::make_unique<CpuDevice>());
    case Backend::kCuda:
#if defined(STAGECRAFT_WITH_CUDA)
      return cuda::make_cuda_device(ordinal);
#else
      return Status::unavailable("cuda:" + std::to_string(ordinal) +
                                 ": this build of Stagecraft has no CUDA backend; rebuild with -DSTAGECRAFT_WITH_CUDA=ON");
#endif
  }
  return Status::internal("make_device: unknown backend");
}

namespace cpu {

namespace detail {

void ensure_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace detail
}  // namespace cpu
}  // namespace stagecraft::runtime
