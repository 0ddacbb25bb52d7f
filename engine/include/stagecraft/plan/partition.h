// Partition: which transformer layers sit on which pipeline stage.
//
// A partition of L layers into S stages is a list of S layer counts (stages hold contiguous
// layers, in order) or, equivalently, one stage id per layer (LiBai's custom_pipeline_stage_id).
// Every stage holds at least one layer. With interleaved schedules S is the number of model
// chunks, pp x virtual_stages, and chunk c runs on pp rank c mod pp (Megatron: pp=4, v=2,
// 16 layers -> pp rank 0 holds layers 0-1 and 8-9).
//
// Three ways to choose it:
//  - uniform_counts(): floor(L/S) layers each; the r = L mod S extra layers go to the r middle
//    stages, because the first stage also holds the embedding and the last the head and loss.
//    Exactly: with q = floor(L/S), stages [lo, lo + r) hold q + 1 where lo = floor((S - r) / 2),
//    so of the S - r shorter stages the end gets at least as many as the front. Examples:
//    L=26,S=4 -> [6,7,7,6];  L=24,S=4 -> [6,6,6,6];  L=10,S=4 -> [2,3,3,2];
//    L=7,S=4 -> [2,2,2,1] (r=3: lo=0, the last stage stays short); L=25,S=4 -> [6,7,6,6].
//  - explicit stage ids, validated by config::validate().
//  - balanced_counts(): the contiguous split that minimises the slowest stage (the pipeline's
//    throughput is set by its bottleneck), with `first` added to stage 0 and `last` to stage
//    S-1. Optimal, not greedy: a bisection over the bottleneck whose probes jump to the next
//    attainable value, each probe a greedy sweep with binary searches over prefix sums,
//    O(S log L) per probe. Among splits with the optimal bottleneck (within 1e-9 relative),
//    the one with the smallest memory peak is chosen when a memory model is given.
//    DeepSpeed's partition_balanced minimises max - min instead, which can leave a worse
//    bottleneck.
// All functions are pure and thread-safe.
#pragma once

#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::plan {

// Costs for balancing, in any one unit (seconds or FLOPs).
struct StageCostModel {
  std::vector<double> layer;  // each layer's forward + backward cost; all >= 0
  double first = 0.0;         // extra work of stage 0 (embedding)
  double last = 0.0;          // extra work of the last stage (final norm, LM head, loss)
};

// Memory for the tie-break, in bytes: stage k of a split holds
//   first (k = 0) + last (k = S-1) + sum over its layers of (layer_static + inflight[k] x layer_activation).
struct StageMemoryModel {
  std::vector<double> layer_static;      // weights, grads, optimizer state of each layer
  std::vector<double> layer_activation;  // activations of one micro-batch in each layer
  std::vector<double> inflight;          // per stage: micro-batches whose activations it holds
  double first = 0.0;
  double last = 0.0;
};

std::vector<int> uniform_counts(int layers, int stages);

// Fails when there are fewer layers than stages or the models' sizes disagree.
Result<std::vector<int>> balanced_counts(const StageCostModel& cost, int stages,
                                         const StageMemoryModel* memory = nullptr);

std::vector<int> counts_to_stage_ids(const std::vector<int>& counts);
std::vector<int> stage_ids_to_counts(const std::vector<int>& stage_ids, int stages);

// Per-stage cost and memory of a split under the models above.
std::vector<double> stage_costs(const StageCostModel& cost, const std::vector<int>& counts);
std::vector<double> stage_memory(const StageMemoryModel& memory, const std::vector<int>& counts);

}  // namespace stagecraft::plan
