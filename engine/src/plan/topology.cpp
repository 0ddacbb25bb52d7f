// Rank <-> coordinates and the groups of every axis. See topology.h for the formulas.
#include "stagecraft/plan/topology.h"

#include <algorithm>

#include "stagecraft/config/validate.h"

namespace stagecraft::plan {

int RankCoord::at(Axis a) const {
  switch (a) {
    case Axis::kTp: return tp;
    case Axis::kDp: return dp;
    case Axis::kPp: return pp;
    case Axis::kCp: return cp;
  }
  return 0;
}

int RankCoord::at(ExpertAxis a) const {
  switch (a) {
    case ExpertAxis::kTp: return etp;
    case ExpertAxis::kEp: return ep;
    case ExpertAxis::kDp: return edp;
  }
  return 0;
}

std::string_view to_string(ExpertAxis a) { return enum_to_string(kExpertAxisNames, a); }

TopologySpec topology_spec(const config::RunConfig& config) {
  TopologySpec spec;
  spec.nodes = config.cluster.nodes;
  spec.gpus_per_node = config.cluster.gpus_per_node;
  spec.dp = config::resolved_dp(config);
  spec.tp = config.parallel.tp;
  spec.pp = config.parallel.pp;
  spec.cp = config.parallel.cp;
  spec.experts = config.model.moe.enabled();
  spec.ep = config.parallel.ep;
  spec.expert_tp = config.parallel.expert_tp;
  spec.order = config.parallel.order;
  spec.tp_mode = config.parallel.tp_mode;
  spec.tp_depth = config.parallel.tp_depth;
  return spec;
}

Result<Topology> Topology::create(const TopologySpec& spec) {
  if (spec.nodes < 1 || spec.gpus_per_node < 1) return Status::invalid_input("a cluster needs at least one node with one GPU");
  if (spec.dp < 1 || spec.tp < 1 || spec.pp < 1 || spec.cp < 1) return Status::invalid_input("dp, tp, cp and pp must be at least 1");
  const long long world = static_cast<long long>(spec.nodes) * spec.gpus_per_node;
  const long long product = static_cast<long long>(spec.dp) * spec.tp * spec.cp * spec.pp;
  if (product != world) {
    return Status::invalid_input((spec.cp > 1 ? "dp x tp x cp x pp = " : "dp x tp x pp = ") + std::to_string(product) +
                                 " but the cluster has " + std::to_string(world) + " GPUs");
  }
  auto order = config::complete_order(spec.order);
  if (order.empty()) return Status::invalid_input("parallel.order must name each of tp, cp, dp and pp at most once");

  Topology t;
  t.spec_ = spec;
  t.order_ = std::move(order);
  t.world_ = static_cast<int>(world);
  t.size_[index(Axis::kTp)] = spec.tp;
  t.size_[index(Axis::kDp)] = spec.dp;
  t.size_[index(Axis::kPp)] = spec.pp;
  t.size_[index(Axis::kCp)] = spec.cp;
  int stride = 1;
  for (Axis a : t.order_) {
    t.stride_[index(a)] = stride;
    stride *= t.size_[index(a)];
  }
  // The expert layers' mapping: the same order with ep in cp's place.
  if (spec.ep < 1 || spec.expert_tp < 1) return Status::invalid_input("ep and expert_tp must be at least 1");
  const long long stage = static_cast<long long>(spec.tp) * spec.cp * spec.dp;
  const long long folded = static_cast<long long>(spec.ep) * spec.expert_tp;
  if (stage % folded != 0) {
    return Status::invalid_input("ep x expert_tp = " + std::to_string(folded) + " does not divide the " + std::to_string(stage) +
                                 " ranks of a pipeline stage (tp x cp x dp)");
  }
  t.expert_size_[eindex(ExpertAxis::kTp)] = spec.expert_tp;
  t.expert_size_[eindex(ExpertAxis::kEp)] = spec.ep;
  t.expert_size_[eindex(ExpertAxis::kDp)] = static_cast<int>(stage / folded);
  int estride = 1;
  for (Axis a : t.order_) {
    if (a == Axis::kPp) {
      if (estride != t.stride_[index(Axis::kPp)] && spec.pp > 1 && spec.experts) {
        return Status::invalid_input("with ep = " + std::to_string(spec.ep) + " and expert_tp = " + std::to_string(spec.expert_tp) +
                                     " the expert layers' pipeline stages differ from the attention layers' under order " +
                                     config::order_text(t.order_) + "; put pp last");
      }
      estride *= spec.pp;
      continue;
    }
    const ExpertAxis e = a == Axis::kTp ? ExpertAxis::kTp : a == Axis::kCp ? ExpertAxis::kEp : ExpertAxis::kDp;
    t.expert_stride_[eindex(e)] = estride;
    estride *= t.expert_size_[eindex(e)];
  }
  switch (spec.tp_mode) {
    case TpMode::k1d: t.grid_side_ = 0; break;
    case TpMode::k2d: t.grid_side_ = config::integer_root(spec.tp, 2); break;
    case TpMode::k3d: t.grid_side_ = config::integer_root(spec.tp, 3); break;
    case TpMode::k2p5d:
      t.grid_side_ = spec.tp_depth > 0 && spec.tp % spec.tp_depth == 0 ? config::integer_root(spec.tp / spec.tp_depth, 2) : 0;
      break;
  }
  if (spec.tp_mode != TpMode::k1d && t.grid_side_ == 0) {
    return Status::invalid_input("tp=" + std::to_string(spec.tp) + " does not form the grid of tp_mode " +
                                 std::string(config::to_string(spec.tp_mode)));
  }
  return t;
}

RankCoord Topology::coord(int rank) const {
  RankCoord c;
  c.rank = rank;
  c.node = rank / spec_.gpus_per_node;
  c.local_rank = rank % spec_.gpus_per_node;
  auto at = [&](Axis a) { return (rank / stride_[index(a)]) % size_[index(a)]; };
  c.tp = at(Axis::kTp);
  c.dp = at(Axis::kDp);
  c.pp = at(Axis::kPp);
  c.cp = at(Axis::kCp);
  auto eat = [&](ExpertAxis a) { return (rank / expert_stride_[eindex(a)]) % expert_size_[eindex(a)]; };
  c.etp = eat(ExpertAxis::kTp);
  c.ep = eat(ExpertAxis::kEp);
  c.edp = eat(ExpertAxis::kDp);
  return c;
}

std::vector<int> Topology::expert_group_of(int rank, ExpertAxis a) const {
  const int stride = expert_stride_[eindex(a)];
  const int size = expert_size_[eindex(a)];
  const int base = rank - ((rank / stride) % size) * stride;
  std::vector<int> g;
  g.reserve(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) g.push_back(base + i * stride);
  return g;
}

std::vector<std::vector<int>> Topology::expert_groups(ExpertAxis a) const {
  std::vector<std::vector<int>> out;
  const int stride = expert_stride_[eindex(a)];
  const int size = expert_size_[eindex(a)];
  for (int r = 0; r < world_; ++r) {
    if ((r / stride) % size == 0) out.push_back(expert_group_of(r, a));
  }
  return out;
}

Topology::ExpertRange Topology::experts_of(int rank, int experts) const {
  const int ep = expert_size_[eindex(ExpertAxis::kEp)];
  const int per = experts / ep;
  return {coord(rank).ep * per, per};
}

int Topology::rank_of(int dp, int tp, int pp, int cp) const {
  return tp * stride_[index(Axis::kTp)] + dp * stride_[index(Axis::kDp)] + pp * stride_[index(Axis::kPp)] +
         cp * stride_[index(Axis::kCp)];
}

std::vector<int> Topology::group_of(int rank, Axis a) const { return group_of(rank, std::vector<Axis>{a}); }

std::vector<std::vector<int>> Topology::groups(Axis a) const { return groups(std::vector<Axis>{a}); }

std::vector<int> Topology::group_of(int rank, const std::vector<Axis>& axes) const {
  // The member with coordinate 0 on every axis of the group, then every combination of the
  // group's coordinates, the axes in the order's nesting (innermost fastest): increasing ranks.
  int base = rank;
  int members = 1;
  for (Axis a : axes) {
    base -= ((rank / stride_[index(a)]) % size_[index(a)]) * stride_[index(a)];
    members *= size_[index(a)];
  }
  std::vector<Axis> nested;
  for (Axis a : order_) {
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) nested.push_back(a);
  }
  std::vector<int> g;
  g.reserve(static_cast<size_t>(members));
  for (int i = 0; i < members; ++i) {
    int r = base;
    int rest = i;
    for (Axis a : nested) {
      r += (rest % size_[index(a)]) * stride_[index(a)];
      rest /= size_[index(a)];
    }
    g.push_back(r);
  }
  return g;
}

std::vector<std::vector<int>> Topology::groups(const std::vector<Axis>& axes) const {
  std::vector<std::vector<int>> out;
  // A group's lowest rank is its base: the rank whose coordinates on the group's axes are all 0.
  for (int r = 0; r < world_; ++r) {
    bool base = true;
    for (Axis a : axes) base = base && (r / stride_[index(a)]) % size_[index(a)] == 0;
    if (base) out.push_back(group_of(r, axes));
  }
  return out;
}

std::vector<int> Topology::stage_ranks(int pp_rank) const {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(world_ / size_[index(Axis::kPp)]));
  for (int r = 0; r < world_; ++r) {
    if ((r / stride_[index(Axis::kPp)]) % size_[index(Axis::kPp)] == pp_rank) out.push_back(r);
  }
  return out;
}

std::vector<TensorSubgroups> Topology::tensor_subgroups() const {
  std::vector<TensorSubgroups> out;
  if (spec_.tp_mode == TpMode::k1d) return out;
  const int n = grid_side_;
  const int depth = spec_.tp_mode == TpMode::k2d ? 1 : (spec_.tp_mode == TpMode::k3d ? n : spec_.tp / (n * n));
  // Tensor-local index t = i + N*(j + N*k); families vary one or more of (i, j, k).
  struct Family {
    const char* name;
    bool vary_i, vary_j, vary_k;
  };
  std::vector<Family> families;
  switch (spec_.tp_mode) {
    case TpMode::k2d: families = {{"row", true, false, false}, {"column", false, true, false}}; break;
    case TpMode::k2p5d:
      families = {{"row", true, false, false}, {"column", false, true, false}, {"depth", false, false, true}, {"xz", false, true, true}};
      break;
    case TpMode::k3d: families = {{"input", false, true, false}, {"weight", true, false, false}, {"output", false, false, true}}; break;
    case TpMode::k1d: break;
  }
  const auto tp_groups = groups(Axis::kTp);
  for (const Family& f : families) {
    TensorSubgroups fam;
    fam.name = f.name;
    for (const auto& tpg : tp_groups) {
      // Enumerate the fixed coordinates, then the varying ones (innermost first).
      for (int k0 = 0; k0 < (f.vary_k ? 1 : depth); ++k0) {
        for (int j0 = 0; j0 < (f.vary_j ? 1 : n); ++j0) {
          for (int i0 = 0; i0 < (f.vary_i ? 1 : n); ++i0) {
            std::vector<int> g;
            for (int k = f.vary_k ? 0 : k0; k < (f.vary_k ? depth : k0 + 1); ++k) {
              for (int j = f.vary_j ? 0 : j0; j < (f.vary_j ? n : j0 + 1); ++j) {
                for (int i = f.vary_i ? 0 : i0; i < (f.vary_i ? n : i0 + 1); ++i) {
                  g.push_back(tpg[static_cast<size_t>(i + n * (j + n * k))]);
                }
              }
            }
            fam.groups.push_back(std::move(g));
          }
        }
      }
    }
    std::sort(fam.groups.begin(), fam.groups.end());
    out.push_back(std::move(fam));
  }
  return out;
}

std::vector<int> Topology::nodes_of(const std::vector<int>& group) const {
  std::vector<int> nodes;
  for (int r : group) nodes.push_back(r / spec_.gpus_per_node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

bool Topology::tp_spans_nodes() const {
  // Members are increasing, so a group spans nodes exactly when its first and last member sit
  // on different nodes.
  if (size_[index(Axis::kTp)] == 1) return false;
  for (const auto& g : groups(Axis::kTp)) {
    if (g.front() / spec_.gpus_per_node != g.back() / spec_.gpus_per_node) return true;
  }
  return false;
}

}  // namespace stagecraft::plan
