// bench_step_timing: what recording a step's timing (runtime/trainer.h StepTiming) and writing its
// timing event (launch/worker_events.h) costs, against a step of the main job's tiny GPT
// (configs/tiny-gpt.yaml: 4 layers, hidden 128, seq 64; one replica's 8 samples in 2 micro-batches
// of 4, on one rank). Two figures:
//   - steps with timing on and off, alternating, 200 of each: the medians' difference;
//   - the work itself, timed alone: the clock reads and op records of one step, and encoding its
//     timing event (with its timeline, as on the steps that keep one).
// Prints a table; asserts nothing about time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "stagecraft/launch/worker_events.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/trainer.h"
#include "single_rank.h"

using namespace stagecraft;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  auto rank = bench::single_rank(
      "cluster: {nodes: 1, gpus_per_node: 1, device: cpu}\n"
      "model: {layers: 4, hidden: 128, heads: 4, seq_len: 64, vocab: 256}\n"
      "train: {global_batch: 8, micro_batch: 4, steps: 100000, lr: 2.0e-3, weight_decay: 0.1, grad_clip: 1.0}\n");
  if (!rank) return 1;
  const auto data = bench::synthetic_tokens(1 << 16, 256);
  runtime::cpu::set_num_threads(1);
  auto t = runtime::Trainer::create(rank->config, rank->layout, rank->groups.trainer_groups(), &data);
  if (!t.ok() || !t.value()->start()) return 1;
  for (int i = 0; i < 5; ++i) (void)t.value()->train_step();  // warm-up

  std::vector<double> on, off;
  runtime::StepStats last;
  for (int i = 0; i < 400; ++i) {
    const bool record = i % 2 == 0;
    t.value()->set_record_timing(record);
    auto st = t.value()->train_step();
    if (!st.ok()) return 1;
    (record ? on : off).push_back(st->step_ms);
    if (record) last = st.value();
  }
  const double step_on = median(on), step_off = median(off);

  // The recording alone: its clock reads (two per op and per group call, one per part) and op
  // records, and the event's encoding.
  const size_t ops = last.timing.ops.size();
  const int reads = static_cast<int>(2 * ops + 2 * 8 + 8);  // ops, at most 8 group calls here, parts
  const int kReps = 20000;
  auto c0 = std::chrono::steady_clock::now();
  double sink = 0;
  for (int r = 0; r < kReps; ++r) {
    for (int i = 0; i < reads; ++i) sink += std::chrono::steady_clock::now().time_since_epoch().count() & 1;
    std::vector<runtime::PipeOpTime> v;
    for (size_t i = 0; i < ops; ++i) v.push_back(runtime::PipeOpTime{false, 0, static_cast<int>(i), 1.0, 2.0});
    sink += static_cast<double>(v.size());
  }
  const double record_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count() / kReps;
  launch::TimingEvent e{.step = last.step, .start = last.timing.start_unix_s, .step_ms = last.step_ms, .forward_ms = last.timing.forward_ms,
                        .backward_ms = last.timing.backward_ms, .optimizer_ms = last.timing.optimizer_ms, .ops = {}};
  for (const auto& op : last.timing.ops) e.ops.push_back({op.backward, op.chunk, op.micro_batch, op.start_ms, op.end_ms});
  size_t bytes = 0;
  c0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kReps; ++r) bytes += launch::encode_event(e).size();
  const double encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count() / kReps;

  std::printf("Step timing's cost on the tiny GPT's step (one rank, 1 thread, %zu ops per step)\n", ops);
  std::printf("  step, timing on       %9.3f ms (median of %zu)\n", step_on, on.size());
  std::printf("  step, timing off      %9.3f ms (median of %zu)\n", step_off, off.size());
  std::printf("  difference            %+9.3f ms (%+.2f%%; noise of the medians included)\n", step_on - step_off,
              100 * (step_on - step_off) / step_off);
  std::printf("  recording, alone      %9.4f ms (%.3f%% of a step)\n", record_ms, 100 * record_ms / step_off);
  std::printf("  event encoding        %9.4f ms (%.3f%% of a step; %zu bytes with its timeline)\n", encode_ms, 100 * encode_ms / step_off,
              bytes / kReps);
  return sink < 0 ? 1 : 0;
}
