// Device: where a backend's tensors live and how bytes move to and from it — the seam between
// the layer code and a backend.
//
// What this is: the one virtual interface of the runtime, for memory (allocate, release, copy,
// zero) and ordering (synchronize), plus Buffer<T>, an owned allocation on a device. What it is
// not: arithmetic. Kernels are free functions per backend, with the same names, argument order and
// contracts in each:
//
//   runtime::cpu::   kernels.h       host pointers, float/double, own threads + OpenBLAS (here)
//   runtime::cuda::  cuda_kernels.h  device pointers, float/bf16, cuBLAS + own kernels (to come)
//
// How a CUDA backend plugs in: (1) a CudaDevice implementing Device with cudaMalloc/cudaFree/
// cudaMemcpyAsync on its own stream, every call wrapped once into a Status with file and line;
// (2) make_device(Backend::kCuda, ordinal) returning it when built with STAGECRAFT_WITH_CUDA (until
// then: unavailable); (3) runtime::cuda:: kernels, launched on the stream of the current device,
// with the contracts of kernels.h (which gradients accumulate, what may alias, what scratch is).
// The layer code stays one piece: a block is ~20 kernel calls, so it either switches on
// Device::backend() per call or is a template over a small struct of the backend's kernels —
// both cost nothing next to the kernels themselves. Buffers hold device memory on CUDA, so the
// layer code never dereferences them; it only passes pointers to kernels and to Device copies.
//
// Thread safety: a Device may be used from several threads (the CPU device is stateless).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"

namespace stagecraft::runtime {

// The run's `backend` key names the device: one enum, config::Backend ("cpu", "cuda";
// config::to_string spells it).
using config::Backend;

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

  // Waits for every kernel and copy issued so far (a no-op on the CPU).
  virtual Status synchronize() = 0;
};

// The device for `backend`; ordinal picks the GPU. kCpu always succeeds. kCuda is unavailable in
// a build without CUDA, or when the ordinal does not exist.
Result<std::unique_ptr<Device>> make_device(Backend backend, int ordinal = 0);

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

}  // namespace stagecraft::runtime
