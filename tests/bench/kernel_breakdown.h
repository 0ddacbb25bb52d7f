// The kernel-time breakdown of a training step (runtime/profiled_device.h), as the training
// benchmarks print it with --breakdown: a fresh trainer of the same plan on a ProfiledDevice
// over `device`, one warm-up step, then `steps` steps timed kernel by kernel, printed per step;
// each kernel timed alone, then, on a GPU, again as the kernels run in the step.
#pragma once

#include <cstdio>

#include "stagecraft/config/run_config.h"
#include "stagecraft/runtime/profiled_device.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::bench {

// One breakdown: `steps` steps after a warm-up on a ProfiledDevice timing as `timing` says.
inline bool print_one_breakdown(const config::RunConfig& config, const runtime::RankLayout& layout, runtime::TrainerGroups groups,
                                const runtime::TokenData& data, runtime::Device& device, int steps, runtime::ProfiledDevice::Timing timing) {
  runtime::ProfiledDevice prof(device, timing);
  auto t = runtime::Trainer::create(config, layout, groups, &data, &prof);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().message().c_str());
    return false;
  }
  if (Status s = t.value()->start(); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return false;
  }
  if (auto st = t.value()->train_step(); !st.ok()) {  // warm-up
    std::fprintf(stderr, "%s\n", st.status().message().c_str());
    return false;
  }
  prof.reset();
  for (int i = 0; i < steps; ++i) {
    if (auto st = t.value()->train_step(); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.status().message().c_str());
      return false;
    }
  }
  const char* how = timing == runtime::ProfiledDevice::Timing::kAlone ? "each kernel timed alone, between two waits for the device"
                                                                      : "as the kernels run in the step, back to back with no waits";
  std::printf("kernel time per step (mean of %d; %s, on %s):\n%s\n", steps, how,
              prof.device_clock() ? "the device's clock" : "the host's clock", prof.format(steps).c_str());
  std::fflush(stdout);
  return true;
}

// Each kernel timed alone; then, where the device has a clock of its own (a GPU), the kernels as
// they run in the step, whose sum and time between kernels make up the step's time.
inline bool print_kernel_breakdown(const config::RunConfig& config, const runtime::RankLayout& layout, runtime::TrainerGroups groups,
                                   const runtime::TokenData& data, runtime::Device& device, int steps) {
  if (!print_one_breakdown(config, layout, groups, data, device, steps, runtime::ProfiledDevice::Timing::kAlone)) return false;
  if (!device.make_clock()) return true;  // the CPU: its kernels run in the step as they do alone
  return print_one_breakdown(config, layout, groups, data, device, steps, runtime::ProfiledDevice::Timing::kInStep);
}

}  // namespace stagecraft::bench
