// OffHostDevice: a test Device whose memory the trainer must treat as a GPU's — it says it is not
// host_accessible(), so the runtime moves bytes with the Device's copies and hands its groups the
// buffers a GPU run would. The memory is host memory underneath and the kernels are the CPU's,
// so a CPU suite runs the GPU code paths of the trainer and the stage (staging through the host
// for Gloo-like groups, device pointers straight to NCCL-like groups) and checks their results
// against the plain CPU run. Every allocation is listed in a MemoryMap, which the test
// communicators (thread_comm.h) consult to refuse a pointer in the wrong memory.
//
// Not a device to time anything with: its clock (use_clock) is scripted, for the profiler's suites.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "stagecraft/runtime/device.h"

namespace stagecraft::testing {

// The address ranges handed out by OffHostDevices. Thread-safe.
class MemoryMap {
 public:
  void add(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_[addr(p)] = bytes;
  }
  void remove(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.erase(addr(p));
  }
  // Whether [p, p + bytes) lies inside one allocation.
  bool contains(const void* p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranges_.upper_bound(addr(p));
    if (it == ranges_.begin()) return false;
    --it;
    return addr(p) + bytes <= it->first + it->second;
  }

 private:
  static uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> ranges_;  // start -> bytes
};

// A device clock whose marks are `seconds` apart (negative: a clock whose reads fail), counting
// marks and reads, so a suite knows what a profiler should have measured.
struct ScriptedClock {
  double seconds = 0;
  std::atomic<int> marks{0}, reads{0};
};

class OffHostDevice final : public runtime::Device {
 public:
  // ops: the kernel table it hands out, the CPU's unless given.
  explicit OffHostDevice(MemoryMap& map, const runtime::Ops* ops = nullptr) : map_(map), ops_(ops) {}

  runtime::Backend backend() const override { return runtime::Backend::kCpu; }
  std::string name() const override { return "off-host test device"; }
  Result<void*> allocate(size_t bytes) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) return Status::unavailable("off-host test device: out of memory");
    map_.add(p, bytes);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    map_.remove(p);
    std::free(p);
  }
  Status copy_from_host(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
    return Status::OK();
  }
  Status fill_zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
    return Status::OK();
  }
  Status synchronize() override { return Status::OK(); }
  const runtime::Ops& ops() const override { return ops_ ? *ops_ : runtime::host_device().ops(); }
  bool host_accessible() const override { return false; }
  // bf16 as a GPU trains it: the trainer then keeps the GEMMs' inputs in bf16 (gpt_stage.h), and
  // the CPU kernels compute on them in fp32 (cpu_ops.cpp). fp16 is refused, as on the CPU.
  Status set_precision(config::Precision precision) override {
    if (precision == config::Precision::kBf16) return Status::OK();
    return Device::set_precision(precision);
  }
  // make_clock hands out clocks reading `clock` (none without one).
  void use_clock(ScriptedClock* clock) { clock_ = clock; }
  std::unique_ptr<runtime::DeviceClock> make_clock() override {
    if (!clock_) return nullptr;
    class Reader final : public runtime::DeviceClock {
     public:
      explicit Reader(ScriptedClock& c) : c_(c) {}
      int mark() override {
        ++c_.marks;
        return n_++;
      }
      std::vector<double> read() override {
        ++c_.reads;
        std::vector<double> at;
        for (int i = 0; i < n_ && c_.seconds >= 0; ++i) at.push_back(i * c_.seconds);
        n_ = 0;
        return at;
      }

     private:
      ScriptedClock& c_;
      int n_ = 0;
    };
    return std::make_unique<Reader>(*clock_);
  }

 private:
  MemoryMap& map_;
  const runtime::Ops* ops_;
  ScriptedClock* clock_ = nullptr;
};

}  // namespace stagecraft::testing
