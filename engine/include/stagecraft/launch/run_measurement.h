// What a recorded run measured, read from its history (store/run_store.h): the timing events of
// its workers (launch/worker_events.h TimingEvent) and their step metrics.
//
// measure_run() takes the steady steps (after the first ones, which warm caches, allocators and
// connections: the first max(1, n/5) of n steps are left out, at most 10) and, per rank, the
// median of each part over them. The bottleneck rank is the one with the most compute (forward,
// backward, recompute and TP): the rank whose parts the estimate's breakdown describes. Memory
// is each pp rank's largest peak over its ranks and steps.
//
// measured_timeline() lines up every rank's forwards and backwards of one step on one clock: each
// rank's ops are relative to its own step start, placed at that start's wall-clock time (exact for
// ranks on one host; across hosts, as good as their clocks agree).
//
// Reads only; thread-safe as RunStore is. Errors name the run and what is missing ("run 7 has no
// timing events (a run of another program, or one that stopped before its first step)").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/calibrate.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/run_store.h"

namespace stagecraft::launch {

// One rank's medians over the steady steps, seconds.
struct MeasuredRank {
  int rank = 0;
  int pp_rank = 0;
  double step_s = 0, forward_s = 0, backward_s = 0, recompute_s = 0, tp_s = 0, pp_wait_s = 0, pp_send_s = 0, dp_s = 0,
         optimizer_s = 0, sync_s = 0;
  double mem_bytes = 0;  // the largest over the run's steps
};

struct RunMeasurement {
  int64_t run_id = 0;
  config::RunConfig config;  // as the run recorded it
  plan::Plan plan;           // planned again from it, with the device as configured now
  int64_t first_step = 0, last_step = 0;  // the steady steps used
  int steps_used = 0;
  std::vector<MeasuredRank> ranks;  // by rank
  int bottleneck_rank = 0;
  plan::MeasuredStep step;          // the bottleneck rank's parts, the run's step time and memory
  std::vector<int64_t> timeline_steps;  // steps with a timeline, ascending
};

Result<RunMeasurement> measure_run(store::RunStore& store, int64_t run_id);

// A forward or backward of one rank, seconds from the step's earliest start over all ranks.
struct TimelineOp {
  int rank = 0;
  int pp_rank = 0;
  bool backward = false;
  int chunk = 0;
  int micro_batch = 0;
  double start_s = 0, end_s = 0;
};
struct MeasuredTimeline {
  int64_t step = 0;
  std::vector<TimelineOp> ops;   // rank by rank, each in its order
  double makespan_s = 0;         // first start to last end
  double busy_s = 0;             // sum of op lengths over the ranks
  int ranks = 0;                 // ranks with ops
  // Idle share of the ranks' time, as ScheduleTimeline's (ui/schedule) for the predicted one.
  double idle_fraction() const { return makespan_s > 0 && ranks > 0 ? 1.0 - busy_s / (ranks * makespan_s) : 0.0; }
};
// Fails (not found) when `step` has no timeline; timeline_steps lists those that do. `dp_rank`
// picks one replica of the pipeline (its ranks of tp rank 0), as the Schedule view draws one.
Result<MeasuredTimeline> measured_timeline(store::RunStore& store, int64_t run_id, int64_t step, int dp_rank = 0);

// The calibration samples of runs (their layouts and measurements), for plan::calibrate.
Result<std::vector<plan::CalibrationSample>> calibration_samples(store::RunStore& store, const std::vector<int64_t>& run_ids);

// pipeline.costs: run:ID — the per-layer times a run measured, for `balanced` splits of the same
// model in `config`: each layer's cost-model time scaled by measured / predicted of the chunk that
// ran it (that chunk's forward + backward per micro-batch, the median over the run's timeline
// steps, DP replica 0), the embedding's and the head's by their chunks likewise. So a layer, or
// the head, that ran slower than the model said weighs more. Fails (invalid input) when the run
// trained another model shape, and as measure_run does.
Result<plan::StageCostModel> measured_layer_costs(store::RunStore& store, int64_t run_id, const config::RunConfig& config);

// When config.pipeline.costs names a run and the partition is balanced: the balanced split by the
// run's measured times, written into `config` as an explicit partition (pipeline.costs stays, as
// the record of where the split came from). Otherwise leaves `config` as it is. `store` may be
// null (no history yet): then a run's costs fail naming the missing history.
Status resolve_pipeline_costs(config::RunConfig& config, store::RunStore* store);
// The second half of that for a plan already made by the run's costs (the window keeps one):
// `config` with `plan`'s split as its explicit partition when pipeline.costs names a run and the
// partition is balanced; else `config` as it is.
config::RunConfig with_measured_split(config::RunConfig config, const plan::Plan& plan);

}  // namespace stagecraft::launch
