// Metrics from another program's output: the lines Megatron-LM, DeepSpeed and nanoGPT print
// while they train, and a JSON-lines form any script can print, turned into step events
// (worker_events.h) for the run history. What is not here: running the program (program.h,
// local_run.h, remote_run.h) and recording the events (supervisor.h, store/).
//
// The shapes read (every field but the step is optional; what a line lacks stays NaN / -1):
//   megatron   ` [2024-05-01 12:00:00] iteration       10/     100 | consumed samples: 80 |
//              elapsed time per iteration (ms): 123.4 | learning rate: 1.000000E-04 |
//              global batch size:     8 | lm loss: 5.123456E+00 | loss scale: 1.0 |
//              grad norm: 1.234 | number of skipped iterations:   0 |`
//              (megatron/training/training.py, training_log): step, step_ms, lr, loss (the
//              first "... loss" field, not "loss scale"), grad_norm, and samples/s as
//              global batch size / step time.
//   deepspeed  `[Rank 0] step=10, skipped=0, lr=[0.0001, 0.0001], mom=[(0.9, 0.999)]` (the
//              engine's progress report): step, lr (the first group's);
//              `steps: 10 loss: 2.3456 iter time (s): 0.123 samples/sec: 65.0` (the pipeline
//              engine): step, loss, step_ms, samples/s;
//              `epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=64.9,
//              CurrSamplesPerSec=65.1, MemAllocated=0.5GB, MaxMemAllocated=1.2GB` (the throughput
//              timer): step, samples/s, mem_bytes (MaxMemAllocated, GiB).
//   nanogpt    `iter 10: loss 3.2100, time 45.67ms, mfu 1.23%` (train.py): step, loss, step_ms.
//   torchtitan `[rank0]:[titan] 2026-08-21 10:00:00,000 - root - INFO - step:  10  loss:  7.12345
//              grad_norm:  1.2345  memory: 12.34GiB(15.60%)  tps: 12,345  tflops: 567.89  mfu: 57.42%`
//              (torchtitan/components/metrics.py, log; colour codes are dropped): step, loss,
//              grad_norm, mem_bytes (the peak reserved, GiB), tokens_per_s (its tps is per
//              device: times the run's world size; older versions print it as wps), tflops,
//              mfu ("N/A" stays unset). The step must be the line's first field after the log
//              prefix ("validate step: ..." is no training step).
//   jsonl      `{"step": 10, "loss": 3.21, "lr": 1e-4, "grad_norm": 0.9, "tokens_per_s": 1234,
//              "samples_per_s": 12, "step_ms": 45.6, "mem_bytes": 123456}`: an object with an
//              integer "step" >= 0 and numbers (or null) for the fields it has; unknown fields are
//              ignored, a known field of another type makes the line a log line, and so does an
//              "event" field other than "step" (a worker event's "done" also has a step).
// Samples per second become tokens per second with `tokens_per_sample` (the run's
// model.seq_len); 0 leaves tokens_per_s unset. A line that does not match its format (a
// different line, a partial or cut line, a number that does not read) is no event.
//
// Pure functions and a per-rank reader; thread-safe as values (one reader per rank).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/launch/worker_events.h"

namespace stagecraft::launch {

// One line in one format. `format` kAuto tries jsonl, megatron, deepspeed, nanogpt and torchtitan
// in turn (their shapes do not overlap); kNone reads nothing. The event's rank is kUnknownRank.
// `world_size`: the run's ranks (torchtitan's per-device tokens/s times it).
std::optional<StepEvent> parse_metric_line(std::string_view line, config::MetricsFormat format, double tokens_per_sample = 0,
                                           int world_size = 1);

std::optional<StepEvent> parse_megatron_line(std::string_view line, double tokens_per_sample = 0);
std::optional<StepEvent> parse_deepspeed_line(std::string_view line, double tokens_per_sample = 0);
std::optional<StepEvent> parse_nanogpt_line(std::string_view line);
std::optional<StepEvent> parse_jsonl_line(std::string_view line, double tokens_per_sample = 0);
std::optional<StepEvent> parse_torchtitan_line(std::string_view line, int world_size = 1);

// The metric lines of one rank, merged into one event per step: DeepSpeed prints a step's lr,
// throughput and loss on separate lines. A line of the step held is merged into it (fields it
// lacks are filled); the step is handed out once it has a loss, or when a line of another step
// comes, or at finish(). Formats with one line per step (megatron, nanogpt, jsonl with a loss)
// come out on the line that carries them.
class MetricLineReader {
 public:
  MetricLineReader(int rank, config::MetricsFormat format, double tokens_per_sample = 0, int world_size = 1)
      : rank_(rank), format_(format), tokens_per_sample_(tokens_per_sample), world_size_(world_size) {}

  // The events complete after this line (none, one or two), in step order. `matched` (optional)
  // says whether the line was a metric line.
  std::vector<StepEvent> feed(std::string_view line, bool* matched = nullptr);
  // The step held, if any (the rank's output ended).
  std::optional<StepEvent> finish();

 private:
  int rank_;
  config::MetricsFormat format_;
  double tokens_per_sample_;
  int world_size_;
  std::optional<StepEvent> held_;
};

}  // namespace stagecraft::launch
