// Topology: which GPU rank holds which coordinate on every parallel axis, and the groups that follow.
//
// One rank generator over the ordered axis list (Megatron-Core's RankGenerator): `order` lists the
// axes innermost first, the leftmost varying fastest, and a rank is the mixed-radix number of its
// coordinates. With the default tp-cp-dp-pp:
//
//     rank = tp_rank + cp_rank * tp + dp_rank * tp * cp + pp_rank * tp * cp * dp
//
// Ranks are numbered in hostfile order: rank r sits on node r / gpus_per_node with local rank
// r % gpus_per_node (DeepSpeed, torchrun). A group of axis x is the set of ranks that differ only
// in x; a group of several axes (dp x cp, which reduces gradients under context parallelism) the
// ranks that differ only in those. An axis of size 1 changes no rank, so the three-axis orders of
// older configs (tp-dp-pp, ...) give the same ranks as before. Worked example, 8 GPUs,
// dp = tp = pp = 2, order tp-dp-pp:
//     TP [0,1] [2,3] [4,5] [6,7]    DP [0,2] [1,3] [4,6] [5,7]    PP [0,4] [1,5] [2,6] [3,7]
//     pp rank 0 = ranks 0-3, pp rank 1 = ranks 4-7.
// The same sizes with order tp-pp-dp (PaddlePaddle's fixed order) give
//     TP [0,1] [2,3] [4,5] [6,7]    PP [0,2] [1,3] [4,6] [5,7]    DP [0,4] [1,5] [2,6] [3,7].
// 16 GPUs, tp = cp = dp = pp = 2, tp-cp-dp-pp:
//     TP [0,1] ...   CP [0,2] [1,3] ...   DP [0,4] [1,5] ...   PP [0,8] ...   DP x CP [0,2,4,6] [1,3,5,7] ...
//
// Colossal-AI's 2D / 2.5D / 3D tensor modes arrange the tp ranks of one TP group as a grid. With
// t the tp rank, N the grid side and d the 2.5d depth:
//     2d:   t = i + N*j           row groups vary i, column groups vary j
//     2.5d: t = i + N*(j + N*k)   row vary i, column vary j, depth vary k, xz vary (j, k)
//     3d:   t = i + N*(j + N*k)   input vary j, weight vary i, output vary k
// which is exactly how Colossal-AI's process-group initialisers number them.
//
// Expert layers (parallel.ep, parallel.expert_tp; Megatron-Core's MoE parallel folding) map the same
// ranks a second way: within each pipeline stage, the tp x cp x dp ranks are expert_tp x ep x
// expert-dp, numbered by the same order with ep in cp's place (tp-cp-dp-pp becomes
// etp-ep-edp-pp), so expert-dp = tp x cp x dp / (ep x expert_tp) and both mappings give the same
// pipeline stages (validated). ep rank e holds experts [e E/ep, (e+1) E/ep) of every MoE layer;
// an expert-dp group holds the same experts for other tokens and reduces their gradients. Worked
// example, 16 GPUs, tp = 2, dp = 4, pp = 2, ep = 4, expert_tp = 1:
//     TP [0,1] [2,3] ...   DP [0,2,4,6] [1,3,5,7] ...   PP [0,8] ...
//     EP [0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]   expert-DP [0,4] [1,5] [2,6] [3,7] [8,12] ...
// so an EP group spans the TP pairs, and rank 5 (ep rank 1) holds experts 2 and 3 of 8.
//
// Groups are listed by their lowest rank; members in increasing coordinate of the group's axis.
// A Topology is an immutable value, cheap to query from any thread.
#pragma once

#include <array>
#include <iterator>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/model/model.h"

namespace stagecraft::plan {

using config::Axis;
using config::TpMode;

// The axes of the expert layers' mapping: expert tensor parallel, expert parallel, expert data
// parallel (with pp, which both mappings share).
enum class ExpertAxis { kTp, kEp, kDp };
inline constexpr int kExpertAxisCount = 3;
inline constexpr EnumName<ExpertAxis> kExpertAxisNames[] = {{ExpertAxis::kTp, "etp"}, {ExpertAxis::kEp, "ep"}, {ExpertAxis::kDp, "edp"}};
std::string_view to_string(ExpertAxis a);

struct RankCoord {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int cp = 0;
  int etp = 0;  // the expert layers' coordinates (all 0 without experts)
  int ep = 0;
  int edp = 0;
  int at(Axis a) const;  // the coordinate on axis a
  int at(ExpertAxis a) const;
  bool operator==(const RankCoord&) const = default;
};

// A named family of tensor sub-groups: "row", "column", "depth", "xz", "input", "weight", "output".
struct TensorSubgroups {
  std::string name;
  std::vector<std::vector<int>> groups;
};

struct TopologySpec {
  int nodes = 1;
  int gpus_per_node = 8;
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int cp = 1;
  bool experts = false;  // the model has expert layers: their mapping must keep the pipeline stages
  int ep = 1;            // expert layers: ep x expert_tp divides tp x cp x dp
  int expert_tp = 1;
  std::vector<Axis> order = {std::begin(config::kDefaultOrder), std::end(config::kDefaultOrder)};  // missing axes: complete_order
  TpMode tp_mode = TpMode::k1d;
  int tp_depth = 1;
};

// The axes a dense parameter is replicated over, whose ranks reduce its gradients (and over which
// parallel.zero shards optimizer state, gradients and parameters): model::kReplicaAxes, dp and cp,
// whose ranks hold the same weights for other samples and other parts of each sequence.
inline std::vector<Axis> gradient_axes() { return {std::begin(model::kReplicaAxes), std::end(model::kReplicaAxes)}; }

// The spec of a config's cluster and parallel sizes (dp resolved).
TopologySpec topology_spec(const config::RunConfig& config);

class Topology {
 public:
  // Fails (kInvalidInput) when the product of the axes' sizes != nodes x gpus_per_node, the order
  // names an axis twice (axes it leaves out are placed by config::complete_order), the tp size
  // does not fit its mode's grid, or ep x expert_tp does not fold over a stage's ranks with the
  // same pipeline stages.
  static Result<Topology> create(const TopologySpec& spec);

  const TopologySpec& spec() const { return spec_; }
  int world_size() const { return world_; }
  int size(Axis a) const { return size_[index(a)]; }
  // Distance in ranks between neighbours along an axis (the product of the inner axes' sizes).
  int stride(Axis a) const { return stride_[index(a)]; }

  RankCoord coord(int rank) const;
  int rank_of(int dp, int tp, int pp, int cp = 0) const;
  // The axes innermost first, every axis once (the spec's order, completed).
  const std::vector<Axis>& order() const { return order_; }

  // Every group of one axis: size(a) ranks each, world / size(a) groups.
  std::vector<std::vector<int>> groups(Axis a) const;
  // The group of `rank` along `a`.
  std::vector<int> group_of(int rank, Axis a) const;
  // Groups of several axes together: the ranks that differ only in `axes`, in increasing rank.
  std::vector<std::vector<int>> groups(const std::vector<Axis>& axes) const;
  std::vector<int> group_of(int rank, const std::vector<Axis>& axes) const;
  // The expert layers' mapping (header): sizes, every group of one expert axis, a rank's group,
  // and the experts an ep rank holds of `experts` per layer ([first, first + count)).
  int expert_size(ExpertAxis a) const { return expert_size_[eindex(a)]; }
  int expert_stride(ExpertAxis a) const { return expert_stride_[eindex(a)]; }
  std::vector<std::vector<int>> expert_groups(ExpertAxis a) const;
  std::vector<int> expert_group_of(int rank, ExpertAxis a) const;
  struct ExpertRange {
    int first = 0, count = 0;
  };
  ExpertRange experts_of(int rank, int experts) const;

  // Ranks with pp coordinate p (one pipeline stage of every replica).
  std::vector<int> stage_ranks(int pp_rank) const;

  // Colossal-AI sub-groups of each TP group (empty for 1d). Grid side N and depth per header.
  std::vector<TensorSubgroups> tensor_subgroups() const;
  int tensor_grid_side() const { return grid_side_; }

  // True when some TP group holds ranks of more than one node.
  bool tp_spans_nodes() const;
  // Nodes that the ranks of `group` sit on, in increasing order.
  std::vector<int> nodes_of(const std::vector<int>& group) const;

 private:
  static int index(Axis a) { return static_cast<int>(a); }
  static int eindex(ExpertAxis a) { return static_cast<int>(a); }

  TopologySpec spec_;
  std::vector<Axis> order_;
  int world_ = 0;
  std::array<int, config::kAxisCount> size_{};    // indexed by Axis
  std::array<int, config::kAxisCount> stride_{};  // indexed by Axis
  int grid_side_ = 0;            // N for 2d/2.5d/3d, 0 for 1d
  std::array<int, kExpertAxisCount> expert_size_{};    // indexed by ExpertAxis
  std::array<int, kExpertAxisCount> expert_stride_{};
};

}  // namespace stagecraft::plan
