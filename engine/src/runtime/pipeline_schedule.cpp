// Pipeline schedules. See pipeline_schedule.h.
#include "stagecraft/runtime/pipeline_schedule.h"

#include <algorithm>

namespace stagecraft::runtime {

using Kind = PipeOp::Kind;

std::vector<PipeOp> pipeline_schedule(config::Schedule schedule, int pp, int pp_rank, int virtual_stages, int micro_batches) {
  std::vector<PipeOp> ops;
  const int m = micro_batches, p = pp, r = pp_rank;
  switch (schedule) {
    case config::Schedule::kGpipe:
      for (int i = 0; i < m; ++i) ops.push_back({Kind::kForward, i, r});
      for (int i = 0; i < m; ++i) ops.push_back({Kind::kBackward, i, r});
      break;
    case config::Schedule::k1f1b: {
      const int warmup = std::min(p - r - 1, m);
      int f = 0, b = 0;
      for (; f < warmup; ++f) ops.push_back({Kind::kForward, f, r});
      for (; f < m; ++f, ++b) {
        ops.push_back({Kind::kForward, f, r});
        ops.push_back({Kind::kBackward, b, r});
      }
      for (; b < m; ++b) ops.push_back({Kind::kBackward, b, r});
      break;
    }
    case config::Schedule::kInterleaved: {
      const int v = virtual_stages;
      const int total = m * v;
      const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
      auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
      auto forward = [&](int k) { return PipeOp{Kind::kForward, micro(k), ((k / p) % v) * p + r}; };
      auto backward = [&](int k) { return PipeOp{Kind::kBackward, micro(k), (v - 1 - (k / p) % v) * p + r}; };
      int k = 0;
      for (; k < warmup; ++k) ops.push_back(forward(k));
      const int steady = total - warmup;
      for (int i = 0; i < steady; ++i) {
        ops.push_back(forward(warmup + i));
        ops.push_back(backward(i));
      }
      for (int i = steady; i < total; ++i) ops.push_back(backward(i));
      break;
    }
  }
  return ops;
}

}  // namespace stagecraft::runtime
