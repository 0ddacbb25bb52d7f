// RankLayout: what one rank's trainer must know about the run's layout — the parallel sizes, its
// own (dp, tp, pp, cp) coordinates, every pipeline chunk's layers, and which ranks hold replica 0
// (dp 0, cp 0).
// A plain value that the runtime owns, so that the trainer needs no planner: comm/process_groups.h
// derives it from a plan (rank_layout_of), tests may write one by hand.
//
// It is not the topology: no nodes, no axis order, no groups (comm/process_groups.h builds those).
//
// Worked example, 8 ranks dp = tp = pp = 2, order tp-dp-pp, 4 layers in 2 chunks, rank 5:
//     dp_rank 0, tp_rank 1, pp_rank 1 (rank = tp_rank + 2 dp_rank + 4 pp_rank)
//     chunks {{0, 2}, {2, 2}}: chunk c runs on pp rank c mod pp, so rank 5 holds chunk 1
//     replica0_ranks [0, 1, 4, 5]: (dp 0, tp t, pp p) at index p * tp + t
#pragma once

#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::runtime {

// A contiguous run of transformer layers: [first, first + count).
struct LayerRange {
  int first = 0;
  int count = 0;
  bool operator==(const LayerRange&) const = default;
};

struct RankLayout {
  int rank = 0;                 // global rank
  int dp = 1, tp = 1, pp = 1;   // sizes of the axes
  int cp = 1;                   // context parallel: each sequence split over cp ranks
  int virtual_stages = 1;       // chunks per pipeline rank (interleaved schedules)
  int micro_batches = 1;        // per step and DP replica
  int dp_rank = 0, tp_rank = 0, pp_rank = 0, cp_rank = 0;
  int ep = 1, ep_rank = 0;      // expert parallel (model.moe): ep_rank holds experts [ep_rank E / ep, ...)
  int expert_dp_rank = 0;       // its place among the ranks that hold the same experts
  std::vector<LayerRange> chunks;   // every chunk of the model, pp x virtual_stages of them
  std::vector<int> replica0_ranks;  // global rank of (dp 0, cp 0, tp t, pp p) at index p * tp + t
  // Mixture of experts: the global rank that holds ep rank e's experts of pipeline rank p with
  // expert_dp_rank 0, at index p * ep + e (checkpoints gather the experts from them). Empty means
  // ep 1: replica0_ranks' tp rank 0 of each stage.
  std::vector<int> expert_replica0_ranks;

  bool operator==(const RankLayout&) const = default;
};

// OK when the layout is consistent: positive sizes, coordinates within them, pp x virtual_stages
// chunks, dp x tp x pp x cp > rank >= 0 and tp x pp replica-0 ranks. kInvalidInput naming the field
// otherwise. Trainer::create asks.
Status check_rank_layout(const RankLayout& layout);

}  // namespace stagecraft::runtime
