// Worker events: what a training rank reports to its launcher, one JSON object per line on its
// stdout. The only encoder and decoder of those lines; the worker, the supervisor, the run
// history, the CLI and the desktop application all go through them.
//
// The wire format (keys in this order; "rank" is left out when it is not known yet):
//   {"event":"start","rank":R,"world_size":W,"dp":..,"tp":..,"pp":..,"step":S,"steps":N
//    [,"kernels":{"gemm":"..","attention":"..",...}]}   (the kernel path each kind of work takes)
//   {"event":"step","rank":R,"step":N,"loss":..,"lr":..,"grad_norm":..,"tokens_per_s":..,"step_ms":..,"mem_bytes":..
//    [,"lm_loss":..,"aux_loss":..,"moe_layers":[L,...],"moe_load":[[C,...],...],"moe_dropped":D]}   (a mixture of experts)
//   {"event":"checkpoint","rank":R,"step":N,"path":"..."}
//   {"event":"timing","rank":R,"step":N,"start":UNIX_S,"step_ms":..,"forward_ms":..,"backward_ms":..,
//    "recompute_ms":..,"tp_ms":..,["cp_ms":..,]["ep_ms":..,]"pp_wait_ms":..,"pp_send_ms":..,"dp_ms":..,"optimizer_ms":..,"sync_ms":..,
//    "ops":[["f",CHUNK,MB,START_MS,END_MS],["b",...],...]}   (ops only on timeline steps)
//   {"event":"done","rank":R,"step":N,"loss":..}
//   {"event":"error","rank":R,"message":"..."}
// A number that is not finite (a diverged loss) is written as null, since JSON has no NaN, and
// read back as NaN.
//
// Decoding contract:
//   - Required: "event" (a string naming one of the six kinds); "step" for step, timing, checkpoint;
//     "path" for checkpoint; "message" for error. Every other field is optional and takes the
//     default written beside it below when absent or null.
//   - A field present with the wrong JSON type ("step":"7", "loss":"x", a fractional "rank") is
//     an error naming the field, the kind and what was expected.
//   - Unknown fields (added by a newer worker) are ignored: decoding succeeds, and they are not
//     kept, so encode_event(decode_event(line)) drops them.
//   - An unknown event kind, a line that is not a JSON object, or an object without a string
//     "event" is an error value; the supervisor then treats the line as a log line.
//   - Nothing throws; every failure is a Result holding Status::invalid_input.
// Thread safety: pure functions, safe from any thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::launch {

constexpr int kUnknownRank = -1;  // "rank" absent on the wire (an error before the rank is known)

struct StartEvent {
  int rank = kUnknownRank;
  int world_size = 0;
  int dp = 0, tp = 0, pp = 0;
  int cp = 1;         // context parallel size; written only when above 1
  int64_t step = 0;   // the step training starts from (> 0 when resumed from a checkpoint)
  int64_t steps = 0;  // the run's total (train.steps); 0 when not given
  // The kernel path each kind of work takes on this rank (runtime::Device::kernel_paths), as
  // (work, path) in the device's order; on the wire an object of strings, absent when empty (a
  // line of an older worker, another program's rank).
  std::vector<std::pair<std::string, std::string>> kernels = {};
  bool operator==(const StartEvent&) const = default;
};

struct StepEvent {
  int rank = kUnknownRank;
  int64_t step = 0;  // required
  double loss = NAN, lr = NAN, grad_norm = NAN, tokens_per_s = NAN, step_ms = NAN;  // NaN when absent
  int64_t mem_bytes = -1;  // -1 when absent
  // train.precision fp16: the dynamic loss scale after this step (NaN when absent), and whether
  // the step was skipped (a gradient overflowed: no update, the scale halved). On the wire
  // "skipped" appears only when true, "loss_scale" only when known.
  double loss_scale = NAN;
  bool skipped = false;
  // Another program's own throughput figures, where it prints them (torchtitan): TFLOP/s per GPU
  // and model FLOPs utilisation as a fraction of the GPU's peak; NaN when absent (and absent on
  // the wire).
  double tflops = NAN, mfu = NAN;
  // A mixture of experts (runtime/trainer.h StepStats): the LM loss and the load-balancing loss,
  // whose sum is `loss`; every MoE layer of the model (moe_layers, ascending) with its tokens per
  // expert over the step (moe_load: one row of E counts per entry of moe_layers, each layer's
  // (token, expert) assignments before capacity, summed over the ranks that route different
  // tokens: the whole model's, which Stagecraft's worker reports from rank 0 alone, so that a
  // reader summing every rank's counts counts each token once); and the assignments dropped for
  // capacity (moe_dropped, with the load). On the wire only with experts: NaN, empty and -1 when absent.
  double lm_loss = NAN, aux_loss = NAN;
  std::vector<int> moe_layers = {};
  std::vector<std::vector<int64_t>> moe_load = {};
  int64_t moe_dropped = -1;
};

// Where a rank's step went (runtime/trainer.h StepTiming says what each part holds). Every step
// has one; `ops`, the step's forwards and backwards, only the steps the worker keeps a timeline
// of (has_timeline). Absent numbers are 0.
struct TimingEvent {
  struct Op {
    bool backward = false;
    int chunk = 0, micro_batch = 0;
    double start_ms = 0, end_ms = 0;
    bool operator==(const Op&) const = default;
  };
  int rank = kUnknownRank;
  int64_t step = 0;  // required
  double start = 0;  // Unix seconds at the step's start
  double step_ms = 0, forward_ms = 0, backward_ms = 0, recompute_ms = 0, tp_ms = 0, pp_wait_ms = 0, pp_send_ms = 0, dp_ms = 0,
         optimizer_ms = 0, sync_ms = 0;
  double cp_ms = 0;  // context-parallel exchanges, inside forward and backward; on the wire only when not 0
  double ep_ms = 0;  // expert-parallel dispatch and combine, inside forward and backward; on the wire only when not 0
  std::vector<Op> ops;
  bool operator==(const TimingEvent&) const = default;
};

// The steps whose timing event carries the ops: the first three, every tenth and the last, so a
// long run's history holds a few timelines, not one per step.
bool has_timeline(int64_t step, int64_t steps);

struct CheckpointEvent {
  int rank = kUnknownRank;
  int64_t step = 0;  // required
  std::string path;  // required
  bool operator==(const CheckpointEvent&) const = default;
};

struct DoneEvent {
  int rank = kUnknownRank;
  int64_t step = 0;
  double loss = NAN;
};

struct ErrorEvent {
  int rank = kUnknownRank;
  std::string message;  // required: the rank's one-line reason
  bool operator==(const ErrorEvent&) const = default;
};

using WorkerEvent = std::variant<StartEvent, StepEvent, TimingEvent, CheckpointEvent, DoneEvent, ErrorEvent>;

// One JSON line, ending in '\n', in the format above. Never fails.
std::string encode_event(const WorkerEvent& event);

// The event on `line` (a trailing "\n" or "\r\n" is allowed). Errors as described above, one line
// naming what is wrong: `worker event: "step" must be an integer, got "7"`.
Result<WorkerEvent> decode_event(std::string_view line);

// "start" "step" "timing" "checkpoint" "done" "error": the "event" field of the kind held.
std::string_view event_name(const WorkerEvent& event);
// The rank the event names (kUnknownRank when it names none).
int event_rank(const WorkerEvent& event);

// Equality that counts two NaNs as equal (a round trip of a diverged loss), for tests and
// de-duplication.
bool same_event(const WorkerEvent& a, const WorkerEvent& b);

}  // namespace stagecraft::launch
