// The kernel-time breakdown of a training step (runtime/profiled_device.h), as the training
// benchmarks print it with --breakdown: a fresh trainer of the same plan on a ProfiledDevice
// over `device`, one warm-up step, then `steps` steps timed kernel by kernel, printed per step.
#pragma once

#include <cstdio>

#include "stagecraft/config/run_config.h"
#include "stagecraft/runtime/profiled_device.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::bench {

inline bool print_kernel_breakdown(const config::RunConfig& config, const runtime::RankLayout& layout, runtime::TrainerGroups groups,
                                   const runtime::TokenData& data, runtime::Device& device, int steps) {
  runtime::ProfiledDevice prof(device);
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
  std::printf("kernel time per step (mean of %d; each kernel timed alone, between two waits for the device, on %s):\n%s\n", steps,
              prof.device_clock() ? "the device's clock" : "the host's clock", prof.format(steps).c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace stagecraft::bench
