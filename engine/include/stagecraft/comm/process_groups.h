// Process groups: every group of one rank — world, TP, DP, PP and, with tied embeddings over more
// than one pipeline stage, the embedding pair — built by one function from the plan's Topology
// and a communicator factory, in the spirit of Megatron's parallel_state. Programs (the worker),
// tests and benchmarks call build_process_groups(); none builds a group itself. Also
// rank_layout_of(), which gives the trainer its RankLayout from a plan, so that the runtime
// needs no planner.
//
// Not here: what a group does (communicator.h), how ranks are numbered (plan/topology.h).
//
// The groups of rank r (group_ranks(), pure):
//   world      every rank, 0 .. W-1
//   tp, dp, pp the ranks that differ from r only in that axis (Topology::group_of), members in
//              increasing coordinate of the axis, so the group rank is r's coordinate on it
//   cp         with cp > 1 only: the ranks that differ from r only in cp (r's sequence's other parts)
//   grad       with cp > 1 only: dp x cp, the ranks holding r's weights, which reduce its gradients
//              (plan::gradient_axes); with cp = 1 that is the dp group, and no other is made
//   ep         with a mixture of experts and ep > 1: the ranks that hold the other experts of r's
//              MoE layers (Topology::expert_group_of, ExpertAxis::kEp), which exchange tokens
//   expert_dp  with a mixture of experts: the ranks that hold r's experts (ExpertAxis::kDp), which
//              reduce their gradients; not made where it is the grad (or dp) group itself
//   embedding  [first, last] of r's PP group, when the model ties its embeddings, pp > 1 and r
//              is the first or the last pipeline rank (the two copies of wte sum their
//              gradients); empty otherwise, and no communicator is made for it
//
// Worked example (the test's golden table holds these and more): 8 ranks, dp = tp = pp = 2,
// order tp-dp-pp, so rank = tp_rank + 2 dp_rank + 4 pp_rank. Rank 5 is (dp 0, tp 1, pp 1):
//     world [0..7]   tp [4,5]   dp [5,7]   pp [1,5]   embedding [1,5] (tied; rank 5 is the last stage)
// and rank 2, (dp 1, tp 0, pp 0):
//     world [0..7]   tp [2,3]   dp [0,2]   pp [2,6]   embedding [2,6]
// The same sizes in order tp-pp-dp (rank = tp_rank + 2 pp_rank + 4 dp_rank); rank 5 is
// (dp 1, tp 1, pp 0):
//     world [0..7]   tp [4,5]   dp [1,5]   pp [5,7]   embedding [5,7]
// 8 ranks tp = 2, pp = 4 (order tp-dp-pp): rank 3 (tp 1, pp 1) has pp [1,3,5,7] and, as a middle
// stage, no embedding group; rank 7 (pp 3) has embedding [1,7].
//
// Construction order: the factory is called for world, tp, dp, pp, cp and grad (cp > 1), ep and
// expert_dp (a mixture of experts, as above), then embedding (members only), on every rank in that order. Creating a communicator waits for all its members (Gloo
// rendezvouses through the store), so every pair of ranks must create the groups they share in
// the same order, which this fixed order guarantees: two ranks share a tp/dp/pp group only
// when it is the same group of that axis, and an embedding pair only when both are its members.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/comm/comm_group_adapter.h"
#include "stagecraft/comm/communicator.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/plan/topology.h"
#include "stagecraft/runtime/rank_layout.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::comm {

// The global ranks of each group of one rank; index = group rank.
struct GroupRanks {
  std::vector<int> world, tp, dp, pp;
  std::vector<int> cp, grad;   // empty with cp = 1
  std::vector<int> ep, expert_dp;  // empty where not made (above)
  std::vector<int> embedding;  // empty when the rank holds no copy of a tied embedding across stages
  bool operator==(const GroupRanks&) const = default;
};

// The groups of `rank` (above). kInvalidInput when rank is outside 0 .. world_size-1.
Result<GroupRanks> group_ranks(const plan::Topology& topology, int rank, bool tied_embeddings);

// Every group of one rank, owned; each is a Communicator and, for the trainer, a CommGroup.
// Movable (the groups stay where they are, so trainer_groups() pointers survive a move).
// Not thread-safe: one thread uses a rank's groups (Communicator's rule).
class ProcessGroups {
 public:
  int rank() const { return rank_; }  // global rank
  const GroupRanks& ranks() const { return ranks_; }

  Communicator& world() { return world_->communicator(); }
  Communicator& tp() { return tp_->communicator(); }
  Communicator& dp() { return dp_->communicator(); }
  Communicator& pp() { return pp_->communicator(); }
  Communicator* embedding() { return embedding_ ? &embedding_->communicator() : nullptr; }
  Communicator* cp() { return cp_ ? &cp_->communicator() : nullptr; }  // null with cp = 1
  Communicator& grad() { return grad_ ? grad_->communicator() : dp(); }  // dp x cp
  Communicator* ep() { return ep_ ? &ep_->communicator() : nullptr; }
  Communicator* expert_dp() { return expert_dp_ ? &expert_dp_->communicator() : nullptr; }

  // The trainer's view; the pointers live as long as this object.
  runtime::TrainerGroups trainer_groups();

 private:
  friend Result<ProcessGroups> build_process_groups(const plan::Topology&, int, bool, const CommunicatorFactory&);
  ProcessGroups() = default;

  int rank_ = 0;
  GroupRanks ranks_;
  std::unique_ptr<CommGroupAdapter> world_, tp_, dp_, pp_, cp_, grad_, ep_, expert_dp_, embedding_;
};

// Builds every group of `rank` with `factory`, in the order above. Fails with the factory's
// Status prefixed by the group ("process group tp[4,5] of rank 5: ..."), or kInternal when the
// factory returns a communicator of other ranks; the groups made so far are then released.
Result<ProcessGroups> build_process_groups(const plan::Topology& topology, int rank, bool tied_embeddings,
                                           const CommunicatorFactory& factory);

// The trainer's layout of `rank` in `plan`: sizes, coordinates (plan.topology; the expert layers'
// ep and expert-dp ones too), every stage's layers (plan.stages, in chunk order), the ranks of DP
// replica 0 and, with experts, those of expert-dp replica 0. kInvalidInput when rank is
// outside the plan's world. rank_layout.h has a worked example.
Result<runtime::RankLayout> rank_layout_of(const plan::Plan& plan, int rank);

}  // namespace stagecraft::comm
