// ProfiledDevice: a Device that forwards everything to another one and times every kernel of
// its Ops table, for a kernel-time breakdown of a training step (tests/bench/bench_gpu_train
// --breakdown, bench_train on the CPU). Calls are grouped by kernel and shape; a GEMM's group,
// and the fused attention's, also has its floating-point operations, hence its TFLOP/s.
//
// It times in one of two ways (Timing):
// - kAlone: around each kernel call it waits for the device (synchronize), makes the call and
//   waits again, so that nothing else of the device's is in that call's time. Where the device
//   has a clock of its own (Device::make_clock: CUDA events), a call's time is the device's
//   between a mark queued before the call's work and one after it: the kernels' own time,
//   without the host's waits and with only the first launch's latency (the idle device passes
//   the first mark at once, then waits some microseconds for the first kernel), where the host's
//   clock also sees every launch and the wake from each wait, most of a ten-microsecond kernel's
//   time. The host's time of each call is kept beside it, and the table gives the difference as
//   one line. Work the device does between kernels (copies, a communicator's transfers on its
//   stream) is waited for at the next kernel's start and counted as "between kernels". The waits
//   serialise host and device, so a profiled step is slower than a plain one.
// - kInStep: no waits: a mark before and after each call on the device's clock, read back every
//   4096 calls and when asked (kernels(), format(), reset()), so the step runs as a plain one
//   does, kernels back to back, and each call's time is what it took there (a clock held down
//   under load, or a GPU idle while the host launches, shows in it). "Between kernels" is the
//   device's time from one call's end mark to the next call's start mark: copies, transfers, and
//   the device waiting for work. Without a device clock (the CPU, whose kernels finish before the
//   call returns) it is kAlone without the waits.
// Without a device clock the host's steady clock times each call.
//
// Thread-safe (ranks that are threads of one process may share one; one call is timed at a time).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/observed_ops.h"

namespace stagecraft::runtime {

// The calls of one kernel at one shape.
struct KernelTime {
  std::string name, shape;
  long long calls = 0;
  double seconds = 0;       // on the device's clock where it has one, else the host's
  double host_seconds = 0;  // on the host's clock: kAlone with the waits around each call, kInStep the launches alone
  double flops = 0;         // all calls' (GEMMs and the fused attention only)
};

class ProfiledDevice final : public Device {
 public:
  enum class Timing { kAlone, kInStep };
  explicit ProfiledDevice(Device& inner, Timing timing = Timing::kAlone)
      : inner_(inner), timing_(timing), ops_(*this), clock_(inner.make_clock()) {}

  Backend backend() const override { return inner_.backend(); }
  std::string name() const override { return inner_.name(); }
  Result<void*> allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void release(void* ptr) override { inner_.release(ptr); }
  Status copy_from_host(void* dst, const void* src, size_t bytes) override { return inner_.copy_from_host(dst, src, bytes); }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override { return inner_.copy_to_host(dst, src, bytes); }
  Status copy(void* dst, const void* src, size_t bytes) override { return inner_.copy(dst, src, bytes); }
  Status fill_zero(void* dst, size_t bytes) override { return inner_.fill_zero(dst, bytes); }
  Status synchronize() override { return inner_.synchronize(); }
  const Ops& ops() const override { return ops_; }
  Status set_precision(config::Precision precision) override { return inner_.set_precision(precision); }
  Status set_tf32(bool on) override { return inner_.set_tf32(on); }
  Status set_kernels(const KernelShape& shape) override { return inner_.set_kernels(shape); }
  bool host_accessible() const override { return inner_.host_accessible(); }
  int ordinal() const override { return inner_.ordinal(); }
  void* native_stream() const override { return inner_.native_stream(); }
  size_t peak_bytes() const override { return inner_.peak_bytes(); }
  void reset_peak() override { inner_.reset_peak(); }
  std::unique_ptr<DeviceClock> make_clock() override { return inner_.make_clock(); }
  std::vector<KernelPath> kernel_paths(const KernelShape& shape) const override { return inner_.kernel_paths(shape); }

  // Whether the calls so far were timed on the device's clock (the inner device has one).
  bool device_clock() const;
  // The groups so far, the most time first, and the device time spent between kernels.
  std::vector<KernelTime> kernels() const;
  double between_kernels_seconds() const;
  // Forgets everything measured so far (say, after warm-up steps).
  void reset();
  // A table of kernels(): per group its calls, total and per-call milliseconds, share of the
  // kernels' total, and TFLOP/s for GEMMs; then totals per kernel name, the time between
  // kernels, and, kAlone on a device clock, the launches and waits the host saw beyond the
  // kernels' time. `steps` divides the totals (0 or 1: as measured).
  std::string format(int steps = 1) const;

 private:
  class Timer final : public ObservedOps {
   public:
    explicit Timer(ProfiledDevice& d) : d_(d) {}

   protected:
    const Ops& base() const override { return d_.inner_.ops(); }
    void enter(const KernelCall& call) const override;
    void leave(const KernelCall& call) const override;

   private:
    ProfiledDevice& d_;
  };
  using Clock = std::chrono::steady_clock;
  using Key = std::pair<std::string, std::string>;  // kernel, shape

  // A kInStep call whose marks are not read yet.
  struct Pending {
    KernelTime* group;
    int begin, end;       // its marks
    double host_seconds;  // the host's time of the call (its launches), taken where the marks cannot be read
  };

  KernelTime& group(const KernelCall& call);  // with mu_ held
  void read_marks() const;                    // kInStep: the pending calls' times; with mu_ held

  Device& inner_;
  const Timing timing_;
  Timer ops_;
  mutable std::mutex mu_;  // held from a call's enter to its leave: one timed kernel at a time
  Clock::time_point started_{};
  int begin_mark_ = -1;  // the call's first mark
  bool any_ = false;
  const std::unique_ptr<DeviceClock> clock_;  // the inner device's, or nullptr
  mutable bool clock_used_ = false;           // some call's time came from clock_
  std::map<Key, KernelTime> groups_;
  mutable std::vector<Pending> pending_;
  mutable double between_s_ = 0;
};

}  // namespace stagecraft::runtime
