// A step's `step` and `timing` events (worker_events.h) from what the trainer reports of it
// (runtime/trainer.h StepStats): the one translation, used by the worker for its event lines
// (app/worker) and by measured_run.h for steps taken in-process (the training benchmarks).
//
// Header-only, so that the worker, which links worker_protocol and runtime but not launch,
// shares it without linking launch (docs/ARCHITECTURE.md §1).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>
#include <utility>
#include <string>

#include "stagecraft/launch/worker_events.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::launch {

// The step's metrics; with fp16 its loss scale (and skipped); with experts both losses and, when
// `with_moe_load`, the experts' load. The load is the world's (summed over the ranks that route)
// on every rank, so only one rank reports it (the worker: rank 0), for a reader summing the
// ranks' counts (the Runs view's Experts tab) to count each token once.
inline StepEvent step_event(const runtime::StepStats& st, bool with_moe_load) {
  StepEvent e{.step = st.step,
              .loss = st.loss,
              .lr = st.lr,
              .grad_norm = st.grad_norm,
              .tokens_per_s = st.tokens_per_s,
              .step_ms = st.step_ms,
              .mem_bytes = static_cast<int64_t>(st.mem_bytes),
              .loss_scale = st.loss_scale > 0 ? st.loss_scale : NAN,
              .skipped = st.skipped};
  if (!st.moe_layers.empty()) {  // a mixture of experts: both losses, and the experts' load
    e.lm_loss = st.lm_loss;
    e.aux_loss = st.aux_loss;
    if (with_moe_load) {
      e.moe_layers = st.moe_layers;
      e.moe_load = st.moe_load;
      e.moe_dropped = st.moe_dropped;
    }
  }
  return e;
}

// Where the step went (docs/ARCHITECTURE.md §8): its parts every step, its forwards and
// backwards on the steps has_timeline picks of a run of `steps` steps.
inline TimingEvent timing_event(const runtime::StepStats& st, int64_t steps) {
  const runtime::StepTiming& t = st.timing;
  TimingEvent e{.step = st.step,
                .start = t.start_unix_s,
                .step_ms = st.step_ms,
                .forward_ms = t.forward_ms,
                .backward_ms = t.backward_ms,
                .recompute_ms = t.recompute_ms,
                .tp_ms = t.tp_ms,
                .pp_wait_ms = t.pp_wait_ms,
                .pp_send_ms = t.pp_send_ms,
                .dp_ms = t.dp_ms,
                .optimizer_ms = t.optimizer_ms,
                .sync_ms = t.sync_ms,
                .cp_ms = t.cp_ms,
                .ep_ms = t.ep_ms,
                .ops = {}};
  if (has_timeline(st.step, steps)) {
    e.ops.reserve(t.ops.size());
    for (const auto& op : t.ops) e.ops.push_back({op.backward, op.chunk, op.micro_batch, op.start_ms, op.end_ms});
  }
  return e;
}

// Which kernel each kind of work of `config` takes on `device` (runtime::Device::kernel_paths,
// from the predicates the kernels ask), as a start event carries them.
inline std::vector<std::pair<std::string, std::string>> kernel_paths_of(const runtime::Device& device, const config::RunConfig& config) {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& k : device.kernel_paths(runtime::KernelShape::of(config))) out.emplace_back(std::move(k.work), std::move(k.path));
  return out;
}

}  // namespace stagecraft::launch
