// The CUDA device: one GPU per process, its memory through cudaMallocAsync on the context's
// stream (the stream-ordered pool, so buffers come and go per micro-batch without a device-wide
// synchronisation), copies on the same stream, and the process-wide context (cuda_context.h).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/lt_gemm.h"
#include "stagecraft/runtime/device.h"

namespace stagecraft::runtime::cuda {


namespace {

Context* g_context = nullptr;
std::mutex g_open_mutex;

std::string mib(size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

// Events on the context's stream, one a mark, made as needed and kept for the next marks: the
// device's time between them at the events' resolution (about half a microsecond). A failing
// event call gives -1 or an empty read (the caller falls back to its own clock); its error stays
// where check() finds it, as any other call's (most likely it is an earlier kernel's fault).
class CudaClock final : public DeviceClock {
 public:
  explicit CudaClock(int ordinal) : ordinal_(ordinal) {}
  ~CudaClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  int mark() override {
    if (marks_ == events_.size()) {
      cudaEvent_t e = nullptr;
      if (cudaSetDevice(ordinal_) != cudaSuccess || cudaEventCreate(&e) != cudaSuccess) return -1;
      events_.push_back(e);
    }
    if (cudaEventRecord(events_[marks_], context()->stream) != cudaSuccess) return -1;
    return int(marks_++);
  }
  std::vector<double> read() override {
    const size_t n = marks_;
    marks_ = 0;
    std::vector<double> at(n, 0.0);
    if (n == 0 || cudaEventSynchronize(events_[n - 1]) != cudaSuccess) return {};
    for (size_t i = 1; i < n; ++i) {  // from the mark before, so that a float's milliseconds stay fine-grained
      float ms = 0;
      if (cudaEventElapsedTime(&ms, events_[i - 1], events_[i]) != cudaSuccess) return {};
      at[i] = at[i - 1] + double(ms) * 1e-3;
    }
    return at;
  }

 private:
  int ordinal_;
  std::vector<cudaEvent_t> events_;
  size_t marks_ = 0;  // queued since the last read
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) name_ = prop.name;
  }

  Backend backend() const override { return Backend::kCuda; }
  std::string name() const override { return "cuda:" + std::to_string(ordinal_) + " " + name_; }

  Result<void*> allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    void* p = nullptr;
    Context& c = *context();
    if (const cudaError_t e = pool_malloc(&p, bytes); e != cudaSuccess) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      return Status::unavailable("cuda:" + std::to_string(ordinal_) + ": out of memory allocating " + mib(bytes) + " (" +
                                 mib(c.held_bytes.load()) + " held by this rank, " + mib(free_bytes) + " free of " + mib(total) +
                                 "): " + cudaGetErrorString(e));
    }
    sizes_add(p, bytes);
    return p;
  }
  void release(void* ptr) override {
    if (ptr == nullptr) return;
    sizes_remove(ptr);
    STAGECRAFT_CUDA_OK(cudaFreeAsync(ptr, context()->stream));
  }

  Status copy_from_host(void* dst, const void* src, size_t bytes) override {
    return copy_kind(dst, src, bytes, cudaMemcpyHostToDevice, false);
  }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    return copy_kind(dst, src, bytes, cudaMemcpyDeviceToHost, true);
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return copy_kind(dst, src, bytes, cudaMemcpyDeviceToDevice, false);
  }
  Status fill_zero(void* dst, size_t bytes) override {
    if (bytes != 0) STAGECRAFT_CUDA_OK(cudaMemsetAsync(dst, 0, bytes, context()->stream));
    return check();
  }
  Status synchronize() override {
    STAGECRAFT_CUDA_OK(cudaStreamSynchronize(context()->stream));
    return check();
  }
  const Ops& ops() const override { return cuda_ops(precision_); }
  // fp32, bf16 or fp16 GEMM inputs (cuda_kernels.h); fp16's loss scaling is the trainer's.
  Status set_precision(config::Precision precision) override {
    precision_ = precision;
    return Status::OK();
  }
  // cuBLAS's math mode on the device's handle: every fp32 GEMM (the layers' and attention's
  // batched ones) on TF32 tensor cores, or in full fp32.
  Status set_tf32(bool on) override {
    if (cublasStatus_t s = cublasSetMathMode(context()->cublas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        s != CUBLAS_STATUS_SUCCESS) {
      return Status::internal(name() + ": cublasSetMathMode: " + cublasGetStatusString(s));
    }
    return Status::OK();
  }
  bool host_accessible() const override { return false; }
  int ordinal() const override { return ordinal_; }
  void* native_stream() const override { return context()->stream; }
  // The process's GPU memory as the context counts it (cuda_context.h): this device's allocations
  // and the kernels' scratch and workspace besides.
  size_t peak_bytes() const override { return context()->peak_bytes.load(); }
  void reset_peak() override { context()->peak_bytes.store(context()->held_bytes.load()); }
  std::unique_ptr<DeviceClock> make_clock() override { return std::make_unique<CudaClock>(ordinal_); }

  // Checks each path train.kernels asks for against this GPU and the shape (what the config's
  // own rules cannot know), then hands the choices to the kernels (the context's).
  Status set_kernels(const KernelShape& shape) override {
    const config::KernelConfig& k = shape.kernels;
    const auto refuse = [&](const char* key, std::string_view value, const std::string& why) {
      return Status::invalid_input(std::string("train.kernels.") + key + "=" + std::string(value) + ": " + why);
    };
    if (k.flash != config::FlashKernels::kAuto && shape.attention == config::Attention::kFlash && !shape.cp_ring) {
      const FlashPath want = k.flash == config::FlashKernels::kWgmma     ? FlashPath::kWgmma
                             : k.flash == config::FlashKernels::kMmaSync ? FlashPath::kMmaSync
                                                                         : FlashPath::kCudaCores;
      if (flash_path(shape.precision == config::Precision::kBf16, shape.head_size, k.flash) != want) {
        const std::string head = "head size " + std::to_string(shape.head_size);
        if (want == FlashPath::kWgmma) {
          return refuse("flash", "wgmma",
                        "Hopper's warpgroup attention runs on compute capability 9.0 in builds with it (CMAKE_CUDA_ARCHITECTURES with 90a), "
                        "at head sizes 48 to 128 in multiples of 16; " + name() + " is " + capability() + " with " + head + "; set auto or mma_sync");
        }
        return refuse("flash", config::to_string(k.flash),
                      "the tensor-core attention needs compute capability 8.0, kernels built for it and its tiles in shared memory at "
                      "head sizes that are multiples of 16 up to 128; " + name() + " is " + capability() + " with " + head + "; set auto or cuda_cores");
      }
    }
    if (k.layernorm_backward_warps != config::NormWarps::kAuto && !shape.rmsnorm) {
      const int want = k.layernorm_backward_warps == config::NormWarps::kEight ? 8 : 4;
      const int warps = layernorm_backward_warps(shape.hidden, k.layernorm_backward_warps);
      if (warps != want) {
        return refuse("layernorm_backward_warps", config::to_string(k.layernorm_backward_warps),
                      warps == 0 ? "rows of model.hidden " + std::to_string(shape.hidden) +
                                       " floats take the scalar kernels, a warp a row (the block kernels take multiples of 4 up to 2048); remove the key"
                                 : "blocks of 8 warps take rows of at most 1536 floats and model.hidden is " + std::to_string(shape.hidden) +
                                       "; set auto or 4");
      }
    }
    if (k.gemm_bias == config::GemmBias::kCublasLt && !context()->cublaslt) {
      return refuse("gemm_bias", "cublaslt", "cuBLASLt did not open on " + name() + "; set auto or separate");
    }
    use_kernels(k);
    return Status::OK();
  }

  // The predicates the kernels ask, for the shape and its choices: cuda_ops(precision) picks the
  // GEMMs (16-bit inputs through cublasGemmEx, else cublasSgemm in the math mode set_tf32 sets),
  // lt_gemm.h the bias epilogues (where cuBLASLt has an algorithm for a GEMM's shape; else the
  // bias is a kernel of its own), flash_attention.cu the fused attention's cores (q, k, v in bf16
  // with bf16 activations, the trainer's rule on a GPU), and cuda_kernels.cu layernorm's backward.
  std::vector<KernelPath> kernel_paths(const KernelShape& shape) const override {
    using config::Precision;
    const bool low = shape.precision != Precision::kFp32;
    const bool tf32 = shape.tf32 && !low;
    std::vector<KernelPath> paths;
    paths.push_back({"gemm", shape.precision == Precision::kBf16   ? "cuBLAS, bf16 tensor cores"
                             : shape.precision == Precision::kFp16 ? "cuBLAS, fp16 tensor cores"
                             : tf32                                ? "cuBLAS, TF32 tensor cores"
                                                                   : "cuBLAS, fp32 cores"});
    paths.push_back({"gemm bias", !low || !lt_enabled(shape.kernels.gemm_bias) ? "cuBLAS, then a bias kernel"
                                  : shape.precision == Precision::kBf16        ? "cuBLASLt epilogue (bias, GELU)"
                                                                               : "cuBLASLt epilogue (bias)"});
    std::string attention = "standard";
    if (shape.cp_ring) {
      attention = "context-parallel ring, fp32 block kernels";
    } else if (shape.attention == config::Attention::kFlash) {
      switch (flash_path(shape.precision == Precision::kBf16, shape.head_size, shape.kernels.flash)) {
        case FlashPath::kCudaCores: attention = "flash, fp32 cores"; break;
        case FlashPath::kMmaSync: attention = "flash, tensor cores (mma.sync)"; break;
        case FlashPath::kWgmma: attention = "flash, tensor cores (wgmma)"; break;
      }
    }
    paths.push_back({"attention", attention});
    if (!shape.rmsnorm) {
      const int warps = layernorm_backward_warps(shape.hidden, shape.kernels.layernorm_backward_warps);
      paths.push_back({"layernorm backward", warps == 0 ? "a warp a row" : std::to_string(warps) + " warps a block"});
    }
    return paths;
  }

 private:
  // "compute capability 9.0"
  std::string capability() const {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal_);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal_);
    return "compute capability " + std::to_string(major) + "." + std::to_string(minor);
  }
  Status copy_kind(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, bool wait) {
    if (bytes == 0) return Status::OK();
    // Host memory is pageable here: cudaMemcpyAsync from it returns once the source is staged,
    // and to it once the bytes have landed, so the caller may reuse its buffer either way.
    STAGECRAFT_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, context()->stream));
    if (wait) STAGECRAFT_CUDA_OK(cudaStreamSynchronize(context()->stream));
    return check();
  }
  void sizes_add(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(sizes_mutex_);
    sizes_[p] = bytes;
    context()->hold(bytes);
  }
  void sizes_remove(void* p) {
    std::lock_guard<std::mutex> lock(sizes_mutex_);
    auto it = sizes_.find(p);
    if (it == sizes_.end()) return;
    context()->let_go(it->second);
    sizes_.erase(it);
  }

  int ordinal_;
  config::Precision precision_ = config::Precision::kFp32;
  std::string name_ = "GPU";
  std::mutex sizes_mutex_;
  std::map<void*, size_t> sizes_;
};

}  // namespace

Context* context() { return g_context; }

// Written only when it changes: ranks that share the GPU (threads of one process) each set their
// run's choices, which are the same, while the others' kernels read them.
void use_kernels(const config::KernelConfig& kernels) {
  if (!g_context) return;
  std::lock_guard<std::mutex> lock(g_context->error_mutex);
  if (!(g_context->kernels == kernels)) g_context->kernels = kernels;
}

cudaError_t pool_malloc(void** p, size_t bytes) {
  Context& c = *context();
  cudaError_t e = cudaMallocAsync(p, bytes, c.stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    cudaStreamSynchronize(c.stream);
    cudaMemPoolTrimTo(c.pool, 0);
    e = cudaMallocAsync(p, bytes, c.stream);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory is not sticky: clear it so later calls work
    *p = nullptr;
  }
  return e;
}

void record_error(const std::string& what) {
  if (!g_context) return;
  std::lock_guard<std::mutex> lock(g_context->error_mutex);
  if (g_context->first_error.empty()) g_context->first_error = what;
}

bool ok(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return true;
  record_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + cudaGetErrorString(e));
  return false;
}

bool ok(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  record_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + cublasGetStatusString(s));
  return false;
}

Status check() {
  if (!g_context) return Status::internal("cuda: the device is not open");
  const cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess) record_error(std::string("cuda: ") + cudaGetErrorString(e));
  std::lock_guard<std::mutex> lock(g_context->error_mutex);
  if (g_context->first_error.empty()) return Status::OK();
  return Status::internal("cuda:" + std::to_string(g_context->ordinal) + ": " + g_context->first_error);
}

Status open_context(int ordinal) {
  std::lock_guard<std::mutex> lock(g_open_mutex);
  if (g_context) {
    if (g_context->ordinal == ordinal) return Status::OK();
    return Status::invalid_input("cuda:" + std::to_string(ordinal) + ": this process already drives cuda:" +
                                 std::to_string(g_context->ordinal) + " (one GPU per worker process)");
  }
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    return Status::unavailable(std::string("cuda: no GPU is visible to this process (") +
                               (ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices") +
                               "); check the driver with nvidia-smi and CUDA_VISIBLE_DEVICES");
  }
  if (ordinal < 0 || ordinal >= count) {
    return Status::unavailable("cuda:" + std::to_string(ordinal) + ": only " + std::to_string(count) +
                               " GPU(s) are visible (CUDA_VISIBLE_DEVICES picks them); run fewer ranks per node");
  }
  auto c = std::make_unique<Context>();
  c->ordinal = ordinal;
  // A step that fails gives back what the steps before it made, so that asking again (another
  // make_device) does not leave a stream, handles and buffers behind each time.
  auto fail = [&](const std::string& what, const char* why) {
    const std::string message = "cuda:" + std::to_string(ordinal) + ": " + what + ": " + why;
    if (c->blocks_done) cudaFree(c->blocks_done);
    if (c->host_result) cudaFreeHost(c->host_result);
    if (c->partials) cudaFree(c->partials);
    if (c->lt_workspace) cudaFree(c->lt_workspace);
    if (c->cublaslt) cublasLtDestroy(c->cublaslt);
    if (c->cublas) cublasDestroy(c->cublas);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();  // the failure is in the message; later calls start clean
    return Status::unavailable(message);
  };
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) return fail("cudaSetDevice", cudaGetErrorString(e));
  if (cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return fail("cudaStreamCreate", cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaDeviceGetDefaultMemPool(&c->pool, ordinal); e != cudaSuccess) {
    return fail("cudaDeviceGetDefaultMemPool", cudaGetErrorString(e));
  }
  uint64_t keep_all = UINT64_MAX;
  if (cudaError_t e = cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep_all); e != cudaSuccess) {
    return fail("cudaMemPoolSetAttribute", cudaGetErrorString(e));
  }
  if (cublasStatus_t s = cublasCreate(&c->cublas); s != CUBLAS_STATUS_SUCCESS) return fail("cublasCreate", cublasGetStatusString(s));
  cublasSetStream(c->cublas, c->stream);
  // fp32 GEMMs in fp32: no TF32 unless train.tf32 asks for it (set_tf32).
  cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH);
  if (cublasStatus_t s = cublasLtCreate(&c->cublaslt); s != CUBLAS_STATUS_SUCCESS) return fail("cublasLtCreate", cublasGetStatusString(s));
  int major = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal); e != cudaSuccess) {
    return fail("cudaDeviceGetAttribute", cudaGetErrorString(e));
  }
  c->lt_workspace_bytes = size_t(major >= 9 ? 32 : 4) << 20;
  if (cudaError_t e = cudaMalloc(&c->lt_workspace, c->lt_workspace_bytes); e != cudaSuccess) return fail("cudaMalloc", cudaGetErrorString(e));
  if (cudaError_t e = cudaMalloc(&c->partials, sizeof(double) * Context::kMaxPartials); e != cudaSuccess) {
    return fail("cudaMalloc", cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaMallocHost(&c->host_result, sizeof(double)); e != cudaSuccess) {
    return fail("cudaMallocHost", cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaMalloc(&c->blocks_done, sizeof(unsigned)); e != cudaSuccess) return fail("cudaMalloc", cudaGetErrorString(e));
  if (cudaError_t e = cudaMemset(c->blocks_done, 0, sizeof(unsigned)); e != cudaSuccess) return fail("cudaMemset", cudaGetErrorString(e));
  c->hold(c->lt_workspace_bytes + sizeof(double) * Context::kMaxPartials + sizeof(unsigned));
  g_context = c.release();  // lives as long as the process: buffers may be released at exit
  return Status::OK();
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Result<std::unique_ptr<Device>> make_cuda_device(int ordinal) {
  if (Status s = open_context(ordinal); !s) return s;
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(ordinal));
}

}  // namespace stagecraft::runtime::cuda
