// Plan: a RunConfig made concrete — the rank topology, the stage of every layer, the warnings a
// careful engineer would raise — and its JSON and text renderings.
//
// make_plan() validates the config (config::validate) and fails with every broken rule, one per
// line, when it is not plannable. It estimates the plan's cost (estimate.h); `balanced`
// partitions split by the cost model's per-layer times. It is pure and fast (1024 x 8 GPUs in a few milliseconds), so
// front ends re-plan on every edit.
//
// Stages: with non-interleaved schedules stage s is pp rank s. With the interleaved schedule the
// model is cut into pp x virtual_stages chunks and "stage" is the chunk index c, run by pp rank
// c mod pp. Stage 0 also holds the embedding, the last stage the final norm, head and loss.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/core/status.h"
#include "stagecraft/config/device.h"
#include "stagecraft/plan/estimate.h"
#include "stagecraft/plan/partition.h"
#include "stagecraft/plan/topology.h"

namespace stagecraft::plan {

struct StagePlan {
  int stage = 0;               // model chunk index
  int pp_rank = 0;             // the pp coordinate of the ranks that run it
  int first_layer = 0;         // layers [first_layer, first_layer + num_layers)
  int num_layers = 0;
  bool has_embedding = false;  // token and position embeddings
  bool has_head = false;       // final LayerNorm, LM head, loss
  double relative_cost = 0.0;  // forward + backward work over the average stage's (1.0 = average)
};

struct Plan {
  config::RunConfig config;   // as given, with dp still possibly auto
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int virtual_stages = 1;
  int micro_batches = 1;      // m = global_batch / (dp x micro_batch)
  Topology topology;
  std::vector<int> layer_stage;  // stage (chunk) id of every layer
  std::vector<StagePlan> stages;
  std::vector<std::string> warnings;
  config::DeviceSpec device;             // cluster.device with its overrides
  Estimate estimate;             // memory, step time, throughput (estimate.h)

  int num_stages() const { return static_cast<int>(stages.size()); }
  // Fraction of a step the pipeline idles: (pp - 1) / m, or (pp - 1) / (v m) interleaved.
  double bubble_fraction() const;
};

// The cost model's input for this plan: its sizes, stage split and where its groups sit.
EstimateInput estimate_input(const Plan& plan);

// Per-layer costs for balancing, in FLOPs per sample: every layer its forward + backward FLOPs
// (3x forward), the head's logits GEMM and loss on the last stage. The embedding is a lookup with
// no matrix product, negligible next to a layer, so the first stage's extra cost is 0; its
// weights still count in the memory tie-break. The cost model replaces these with times.
StageCostModel flops_cost_model(const config::RunConfig& config);
// Bytes per layer for the balanced tie-break: weights, grads and optimizer state per TP shard,
// activations per micro-batch, micro-batches in flight per stage by schedule.
StageMemoryModel simple_memory_model(const config::RunConfig& config, int stages);

Result<Plan> make_plan(const config::RunConfig& config);
// The same with the per-layer costs that `pipeline.costs: run:ID` stands for (a run's measured
// times: launch/run_measurement.h measured_layer_costs reads them from the history). make_plan
// without them refuses a balanced partition by a run's costs, naming where to resolve it;
// launch::resolve_pipeline_costs writes the split into the config as an explicit partition, so
// workers and exports plan the same stages without the history.
Result<Plan> make_plan(const config::RunConfig& config, const StageCostModel* measured_costs);

// The JSON document of `stagecraft-cli plan --json` (keys in the CLI's documentation).
Json plan_to_json(const Plan& plan);
// Readable tables: summary, groups (long lists shortened), stages, warnings.
// `tokens` > 0: the estimate also says how many days that many tokens take.
std::string plan_to_text(const Plan& plan, double tokens = 0);

}  // namespace stagecraft::plan
