// Device: where a backend's tensors live, how bytes move to and from it, and the backend's
// kernels — the seam between the layer code and a backend.
//
// What this is: the one virtual interface of the runtime, for memory (allocate, release, copy,
// zero), ordering (synchronize), arithmetic (ops(): the backend's kernel table, ops.h) and the
// device's own clock where it has one (make_clock, for profiled_device.h), plus Buffer<T>, an
// owned allocation on a device. Kernels are free functions per backend, with the
// same names, argument order and contracts in each:
//
//   runtime::cpu::   kernels.h                   host pointers, float/double, own threads + OpenBLAS
//   runtime::cuda::  src/runtime/cuda/cuda_kernels.h   device pointers, float, cuBLAS + own kernels
//
// The layer code (gpt_stage.cpp) and the trainer call them through Device::ops(), so they are one
// piece over every backend; they never dereference a Buffer's memory unless the device is
// host_accessible(), and otherwise move bytes with the Device's copies. The CUDA device
// (src/runtime/cuda/cuda_device.cpp) runs everything on one stream per process; make_device
// returns it in a build with STAGECRAFT_WITH_CUDA.
//
// Thread safety: a Device may be used from several threads (the CPU device is stateless; the
// CUDA device orders everything on its stream).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime {

// The run's `backend` key names the device: one enum, config::Backend ("cpu", "cuda";
// config::to_string spells it).
using config::Backend;

// Marks on a device's own clock, for timing the work queued between them without the host's
// launches and waits: mark() queues a mark behind the work queued so far and returns its number
// (0, 1, ... since the last read), or -1 where it could not; read() waits until the device has
// passed every mark queued and returns each one's time in seconds after mark 0 (empty where they
// could not be read), then starts the numbering over.
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  virtual int mark() = 0;
  virtual std::vector<double> read() = 0;
};

// What decides which kernels a run takes for each kind of work (Device::kernel_paths): the run
// configuration's keys as the trainer applies them. KernelShape::of reads them from a config.
struct KernelShape {
  config::Precision precision = config::Precision::kFp32;  // train.precision
  bool tf32 = false;           // train.tf32, which the trainer sets for fp32 GEMMs only
  config::Attention attention = config::Attention::kStandard;  // train.attention
  int head_size = 0;           // the model's head size (model.head_dim, or hidden / heads)
  int hidden = 0;              // the width of the rows the norms work on
  bool rmsnorm = false;        // Llama's RMSNorm rather than GPT-2's LayerNorm
  bool cp_ring = false;        // parallel.cp > 1 with cp_comm ring: attention by the ring's blocks
  config::KernelConfig kernels;  // train.kernels: the paths asked for (auto: the device chooses)

  static KernelShape of(const config::RunConfig& config);
};

// One kind of work ("gemm", "attention", ...) and the kernel path it takes, in plain words
// ("cuBLAS, bf16 tensor cores", "flash, fp32 cores"): what a run records in its workers' start
// events (docs/runs.md).
struct KernelPath {
  std::string work;
  std::string path;
  bool operator==(const KernelPath&) const = default;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual Backend backend() const = 0;
  virtual std::string name() const = 0;  // "cpu (16 threads)", "cuda:0 NVIDIA H100 ..."

  // `bytes` uninitialised bytes, aligned to at least 64. Zero bytes gives nullptr. Fails
  // (unavailable) when the device is out of memory.
  virtual Result<void*> allocate(size_t bytes) = 0;
  // Frees what allocate returned; nullptr is ignored.
  virtual void release(void* ptr) = 0;

  // Copies `bytes` bytes. Ranges must not overlap. On an asynchronous device the copy is ordered
  // after the kernels already issued; copy_to_host returns when the host bytes are written.
  virtual Status copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual Status copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  virtual Status fill_zero(void* dst, size_t bytes) = 0;

  // Waits for every kernel and copy issued so far (a no-op on the CPU), and reports the first
  // failure of one of them (a kernel that could not launch, a fault) as a Status.
  virtual Status synchronize() = 0;

  // The backend's kernels, on this device's pointers, for the precision set last.
  virtual const Ops& ops() const = 0;
  // train.precision: which kernels ops() returns. fp32 always works; a backend refuses what it
  // cannot compute with a line naming the key (the CUDA device: bf16 GEMMs; the CPU: fp32 only).
  virtual Status set_precision(config::Precision precision) {
    if (precision == config::Precision::kFp32) return Status::OK();
    return Status::invalid_input("train.precision=" + std::string(config::to_string(precision)) + ": " + name() +
                                 " computes in fp32 only; set train.precision: fp32");
  }
  // train.tf32: fp32 GEMMs on TF32 tensor cores. A device without them (the CPU) computes fp32,
  // more precisely than asked, as it does for the 16-bit precisions.
  virtual Status set_tf32(bool /*on*/) { return Status::OK(); }
  // train.kernels for a run of `shape`: the kernel paths its kernels take from now on (every auto
  // the device's own choice by its hardware and the shape). A path the device cannot take for the
  // shape is refused with a line naming the key; so is any choice on a device with one kernel for
  // each kind of work (the CPU).
  virtual Status set_kernels(const KernelShape& shape) {
    if (shape.kernels.all_auto()) return Status::OK();
    return Status::invalid_input("train.kernels: " + name() + " has one kernel for each kind of work; remove train.kernels");
  }
  // Whether the host may read and write this device's memory directly (the CPU), so that host-
  // side code such as a Gloo collective can work on a buffer in place instead of a staged copy.
  virtual bool host_accessible() const = 0;
  // The GPU this device drives (its CUDA ordinal), or -1 for the CPU.
  virtual int ordinal() const { return -1; }
  // The backend's stream, on which every kernel and copy of this device is ordered (a
  // cudaStream_t on CUDA), so that a communicator working on the device's memory (NCCL) orders
  // its transfers with them; nullptr on the CPU.
  virtual void* native_stream() const { return nullptr; }
  // The most bytes held at once since the last reset_peak: through allocate(), and on a GPU also
  // what its kernels keep for themselves (scratch, cuBLASLt's workspace). 0 where the device does
  // not count.
  virtual size_t peak_bytes() const { return 0; }
  virtual void reset_peak() {}
  // A clock on the device's timeline (CUDA events on the device's stream), or nullptr where the
  // backend has none: the CPU's kernels run in the caller's threads, so the host's clock times
  // them.
  virtual std::unique_ptr<DeviceClock> make_clock() { return nullptr; }
  // The kernel path each kind of work takes on this device for a run of `shape` (its train.kernels
  // as set_kernels takes them), in a fixed order of works, from the same predicates the kernels
  // ask (the choices, the GPU's capability, the shape), so that the record cannot disagree with
  // what runs. Empty where a device cannot say. A GPU's answer needs its context: ask once the
  // device is made.
  virtual std::vector<KernelPath> kernel_paths(const KernelShape& /*shape*/) const { return {}; }
};

// The process's CPU device: host memory, runtime::cpu's kernels.
Device& host_device();

// The device for `backend`; ordinal picks the GPU. kCpu always succeeds. kCuda is unavailable in
// a build without CUDA, or when the ordinal does not exist.
Result<std::unique_ptr<Device>> make_device(Backend backend, int ordinal = 0);

// Whether this build has the CUDA backend (STAGECRAFT_WITH_CUDA).
bool cuda_built();

// The GPUs this process can see (CUDA_VISIBLE_DEVICES applies); 0 without CUDA, a driver or a GPU.
int cuda_device_count();

// N elements of T on a device, owned. Movable, not copyable. The device must outlive the buffer.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (device_ != nullptr) device_->release(data_);
  }

  // n uninitialised elements, or zeroed with make_zeroed.
  static Result<Buffer> make(Device& device, size_t n) {
    auto p = device.allocate(n * sizeof(T));
    if (!p.ok()) return p.status();
    Buffer b;
    b.device_ = &device;
    b.data_ = static_cast<T*>(p.value());
    b.size_ = n;
    return b;
  }
  static Result<Buffer> make_zeroed(Device& device, size_t n) {
    auto b = make(device, n);
    if (!b.ok()) return b;
    if (Status s = device.fill_zero(b->data(), n * sizeof(T)); !s) return s;
    return b;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  Device* device() const { return device_; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }

  Device* device_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// buf = n elements of T on `device` (zeroed when asked); on failure buf is left as it was.
template <typename T>
Status allocate_buffer(Buffer<T>& buf, Device& device, size_t n, bool zeroed = false) {
  auto b = zeroed ? Buffer<T>::make_zeroed(device, n) : Buffer<T>::make(device, n);
  if (!b.ok()) return b.status();
  buf = std::move(b).value();
  return Status::OK();
}

}  // namespace stagecraft::runtime
