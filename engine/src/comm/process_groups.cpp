// Process groups of one rank and the trainer's layout from a plan. See process_groups.h.
#include "stagecraft/comm/process_groups.h"

#include <numeric>

namespace stagecraft::comm {

namespace {

Status check_rank(const plan::Topology& topology, int rank) {
  if (rank < 0 || rank >= topology.world_size()) {
    return Status::invalid_input("rank " + std::to_string(rank) + " is outside the world of " +
                                 std::to_string(topology.world_size()) + " ranks");
  }
  return Status::OK();
}

}  // namespace

Result<GroupRanks> group_ranks(const plan::Topology& topology, int rank, bool tied_embeddings) {
  if (Status s = check_rank(topology, rank); !s) return s;
  GroupRanks g;
  g.world.resize(static_cast<size_t>(topology.world_size()));
  std::iota(g.world.begin(), g.world.end(), 0);
  g.tp = topology.group_of(rank, config::Axis::kTp);
  g.dp = topology.group_of(rank, config::Axis::kDp);
  g.pp = topology.group_of(rank, config::Axis::kPp);
  if (topology.size(config::Axis::kCp) > 1) {
    g.cp = topology.group_of(rank, config::Axis::kCp);
    g.grad = topology.group_of(rank, plan::gradient_axes());
  }
  if (topology.spec().experts) {
    if (topology.expert_size(plan::ExpertAxis::kEp) > 1) g.ep = topology.expert_group_of(rank, plan::ExpertAxis::kEp);
    const std::vector<int> edp = topology.expert_group_of(rank, plan::ExpertAxis::kDp);
    if (edp != (g.grad.empty() ? g.dp : g.grad)) g.expert_dp = edp;
  }
  if (tied_embeddings && g.pp.size() > 1 && (rank == g.pp.front() || rank == g.pp.back())) {
    g.embedding = {g.pp.front(), g.pp.back()};
  }
  return g;
}

runtime::TrainerGroups ProcessGroups::trainer_groups() {
  runtime::TrainerGroups g{world_.get(), tp_.get(), dp_.get(), pp_.get(), embedding_.get()};
  g.cp = cp_.get();
  g.grad = grad_ ? grad_.get() : dp_.get();
  g.ep = ep_.get();
  g.expert_dp = expert_dp_.get();
  return g;
}

Result<ProcessGroups> build_process_groups(const plan::Topology& topology, int rank, bool tied_embeddings,
                                           const CommunicatorFactory& factory) {
  auto ranks = group_ranks(topology, rank, tied_embeddings);
  if (!ranks.ok()) return ranks.status();
  ProcessGroups groups;
  groups.rank_ = rank;
  groups.ranks_ = ranks.value();
  const GroupRanks& g = groups.ranks_;
  auto make = [&](const char* name, const std::vector<int>& members, std::unique_ptr<CommGroupAdapter>& slot) -> Status {
    const std::string context = "process group " + group_name(members, name) + " of rank " + std::to_string(rank);
    auto c = factory(name, members);
    if (!c.ok()) return c.status().with_context(context);
    if (!c.value() || c.value()->ranks() != members || c.value()->global_rank() != rank) {
      return Status::internal(context + ": the communicator factory made " +
                              (c.value() ? group_name(c.value()->ranks(), c.value()->name()) + " for rank " +
                                               std::to_string(c.value()->global_rank())
                                         : std::string("no communicator")));
    }
    slot = std::make_unique<CommGroupAdapter>(std::move(c).value());
    return Status::OK();
  };
  if (Status s = make("world", g.world, groups.world_); !s) return s;
  if (Status s = make("tp", g.tp, groups.tp_); !s) return s;
  if (Status s = make("dp", g.dp, groups.dp_); !s) return s;
  if (Status s = make("pp", g.pp, groups.pp_); !s) return s;
  if (!g.cp.empty()) {
    if (Status s = make("cp", g.cp, groups.cp_); !s) return s;
    if (Status s = make("dp_cp", g.grad, groups.grad_); !s) return s;
  }
  if (!g.ep.empty()) {
    if (Status s = make("ep", g.ep, groups.ep_); !s) return s;
  }
  if (!g.expert_dp.empty()) {
    if (Status s = make("expert_dp", g.expert_dp, groups.expert_dp_); !s) return s;
  }
  if (!g.embedding.empty()) {
    if (Status s = make("embedding", g.embedding, groups.embedding_); !s) return s;
  }
  return groups;
}

Result<runtime::RankLayout> rank_layout_of(const plan::Plan& plan, int rank) {
  const plan::Topology& topo = plan.topology;
  if (Status s = check_rank(topo, rank); !s) return s;
  runtime::RankLayout l;
  l.rank = rank;
  l.dp = plan.dp;
  l.tp = plan.tp;
  l.pp = plan.pp;
  l.cp = plan.cp;
  l.virtual_stages = plan.virtual_stages;
  l.micro_batches = plan.micro_batches;
  const plan::RankCoord c = topo.coord(rank);
  l.dp_rank = c.dp;
  l.tp_rank = c.tp;
  l.pp_rank = c.pp;
  l.cp_rank = c.cp;
  for (const auto& s : plan.stages) l.chunks.push_back({s.first_layer, s.num_layers});
  for (int p = 0; p < plan.pp; ++p) {
    for (int t = 0; t < plan.tp; ++t) l.replica0_ranks.push_back(topo.rank_of(0, t, p));
  }
  if (topo.spec().experts) {
    l.ep = topo.expert_size(plan::ExpertAxis::kEp);
    l.ep_rank = c.ep;
    l.expert_dp_rank = c.edp;
    l.expert_replica0_ranks.assign(static_cast<size_t>(plan.pp) * static_cast<size_t>(l.ep), -1);
    for (int r = 0; r < topo.world_size(); ++r) {
      const plan::RankCoord rc = topo.coord(r);
      if (rc.edp == 0 && rc.etp == 0) l.expert_replica0_ranks[static_cast<size_t>(rc.pp * l.ep + rc.ep)] = r;
    }
  }
  return l;
}

}  // namespace stagecraft::comm
