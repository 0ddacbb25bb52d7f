// make_plan(): topology + partition + warnings, and the plan's JSON and text forms.
#include "stagecraft/plan/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "stagecraft/config/validate.h"
#include "stagecraft/model/model.h"

namespace stagecraft::plan {

using config::PartitionKind;
using config::RunConfig;
using config::Schedule;

double Plan::bubble_fraction() const {
  if (pp <= 1 || micro_batches <= 0) return 0.0;
  return static_cast<double>(pp - 1) / (static_cast<double>(virtual_stages) * micro_batches);
}

StageCostModel flops_cost_model(const RunConfig& config) {
  const auto g = model::ModelDesc::from(config.model);
  StageCostModel m;
  m.layer.assign(static_cast<size_t>(config.model.layers), 3.0 * g.layer_forward_flops());
  m.first = 0.0;
  m.last = 3.0 * g.head_forward_flops();
  return m;
}

StageMemoryModel simple_memory_model(const RunConfig& config, int stages) {
  const auto g = model::ModelDesc::from(config.model);
  const double tp = config.parallel.tp;
  // 16 bytes per parameter: fp32 weights, grads and two Adam moments, or mixed precision with
  // fp32 master weights (ZeRO paper); sharded by TP.
  const double per_param = 16.0;
  // Activations of one layer, one micro-batch, 16-bit with Megatron's dropout masks (Korthikanti
  // et al. 2022, Table 2: s b h (10 + 24 / t + 5 a s / (h t)) for GPT with f = 4h; the sharded
  // part from the model's description).
  const double s = g.seq, b = config.train.micro_batch, h = g.hidden, a = g.heads;
  const double act = s * b * h * (10.0 + 2.0 * g.layer_activations().sharded / h / tp + 5.0 * a * s / (h * tp));
  StageMemoryModel m;
  m.layer_static.assign(static_cast<size_t>(config.model.layers), per_param * g.layer_params() / tp);
  m.layer_activation.assign(static_cast<size_t>(config.model.layers), act);
  m.first = per_param * g.embedding_params() / tp;
  m.last = per_param * g.head_params() / tp + (config.model.tied_embeddings && stages > 1 ? per_param * g.vocab_matrix() / tp : 0.0);
  const int pp = config.parallel.pp;
  const int mb = std::max(1, config::micro_batches(config));
  m.inflight.resize(static_cast<size_t>(stages));
  for (int c = 0; c < stages; ++c) {
    const int p = c % std::max(pp, 1);
    double inflight = 1.0;
    switch (config.pipeline.schedule) {
      case Schedule::kGpipe: inflight = mb; break;                       // all m forward passes first
      case Schedule::k1f1b: inflight = std::min(mb, pp - p); break;      // warm-up depth of stage p
      case Schedule::kInterleaved: inflight = std::min(mb, pp - p); break;  // per chunk, roughly
    }
    m.inflight[static_cast<size_t>(c)] = inflight;
  }
  return m;
}

namespace {

std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", f * 100.0);
  return buf;
}

// Expert parallelism: an EP group across nodes sends every MoE layer's all-to-alls over the
// network; an all-to-all above 30% of the step, or the largest communication part at 20% or
// more, is what to fix first.
void add_expert_warnings(Plan& p) {
  const auto& c = p.config;
  if (!c.model.moe.enabled() || c.parallel.ep <= 1) return;
  const auto& topo = p.topology;
  const int ep_nodes = static_cast<int>(topo.nodes_of(topo.expert_group_of(0, ExpertAxis::kEp)).size());
  const auto& b = p.estimate.breakdown;
  const double step = p.estimate.step_time_s;
  const double share = step > 0 ? b.moe_a2a_s / step : 0.0;
  const double other = std::max({b.tp_comm_s, b.cp_comm_s, b.pp_comm_s, b.dp_comm_s});
  const bool dominates = share > 0.30 || (b.moe_a2a_s > other && share >= 0.20);
  const int gpn = c.cluster.gpus_per_node;
  const std::string spans = "EP groups span " + std::to_string(ep_nodes) + " nodes (ep=" + std::to_string(c.parallel.ep) +
                            (c.parallel.expert_tp > 1 ? " x expert_tp=" + std::to_string(c.parallel.expert_tp) : std::string()) + " over " +
                            std::to_string(gpn) + " GPUs per node, order " + config::order_text(topo.order()) + ")";
  const std::string fix = ep_nodes > 1 ? "keep each EP group on one node (ep x expert_tp <= " + std::to_string(gpn) +
                                             ") or lower parallel.ep"
                                       : "a smaller parallel.ep sends less of every token's top_k copies away ((ep - 1)/ep of them; ep 1 "
                                         "none), for more experts per GPU";
  if (dominates) {
    p.warnings.push_back("all-to-all dominates: the EP dispatch and combine take " + format_seconds(b.moe_a2a_s) + ", " + percent(share) +
                         " of the step" + (b.moe_a2a_s > other ? ", more than any other communication" : "") +
                         (ep_nodes > 1 ? "; " + spans + ", so they cross the inter-node network" : "") + ": " + fix +
                         " (stagecraft-cli search --ep N compares)");
  } else if (ep_nodes > 1) {
    p.warnings.push_back(spans + ": every MoE layer's dispatch and combine all-to-alls cross the inter-node network (" +
                         format_seconds(b.moe_a2a_s) + ", " + percent(share) + " of the step); " + fix);
  }
}

void add_warnings(Plan& p, const StageCostModel& cost) {
  const auto& c = p.config;
  const auto& topo = p.topology;
  if (topo.tp_spans_nodes()) {
    std::string why = p.tp > c.cluster.gpus_per_node
                          ? "tp=" + std::to_string(p.tp) + " is larger than the " + std::to_string(c.cluster.gpus_per_node) + " GPUs of a node"
                          : "parallel.order=" + config::order_text(topo.order()) + " does not keep each TP group on one node";
    p.warnings.push_back("TP groups span nodes (" + why + "): every layer's tensor-parallel all-reduces cross the inter-node network; "
                         "keep tp <= gpus_per_node with tp innermost in parallel.order");
  }
  const double bubble = p.bubble_fraction();
  if (bubble > 0.25) {
    p.warnings.push_back("pipeline bubble " + percent(bubble) + ": (pp - 1)/" + (p.virtual_stages > 1 ? std::string("(v x m)") : "m") +
                         " with pp=" + std::to_string(p.pp) + ", m=" + std::to_string(p.micro_batches) +
                         " micro-batches; raise train.global_batch or lower train.micro_batch for more micro-batches");
  }
  if (c.parallel.sequence_parallel && p.tp == 1) {
    p.warnings.push_back("parallel.sequence_parallel has no effect with tp=1");
  }
  if (c.train.tf32 && c.train.precision != config::Precision::kFp32) {
    p.warnings.push_back("train.tf32 has no effect with train.precision=" + std::string(config::to_string(c.train.precision)) +
                         ": TF32 is a mode of fp32 GEMMs");
  }
  if (p.tp > 1 && c.parallel.tp_mode == config::TpMode::k1d && c.model.vocab % p.tp != 0) {
    const int multiple = 128 * p.tp;
    const int padded = (c.model.vocab + multiple - 1) / multiple * multiple;
    p.warnings.push_back("model.vocab=" + std::to_string(c.model.vocab) + " is not divisible by tp=" + std::to_string(p.tp) +
                         "; Megatron pads it to " + std::to_string(padded) + " (a multiple of 128 x tp)");
  }
  if (p.num_stages() > 1 && c.pipeline.partition != PartitionKind::kBalanced) {
    // Say how much the bottleneck stage would gain from balancing.
    std::vector<int> counts;
    for (const auto& s : p.stages) counts.push_back(s.num_layers);
    const auto costs = stage_costs(cost, counts);
    const double now = *std::max_element(costs.begin(), costs.end());
    auto balanced = balanced_counts(cost, p.num_stages(), nullptr);
    if (balanced.ok()) {
      const auto bcosts = stage_costs(cost, balanced.value());
      const double best = *std::max_element(bcosts.begin(), bcosts.end());
      if (now > best * 1.05) {
        const auto slowest = std::max_element(costs.begin(), costs.end()) - costs.begin();
        p.warnings.push_back("stage " + std::to_string(slowest) + " is the bottleneck with " +
                             std::to_string(static_cast<int>(std::lround(100.0 * (now / best - 1.0)))) +
                             "% more work than the slowest stage of a balanced split; pipeline.partition: balanced shortens every step");
      }
    }
  }
  if (!p.estimate.fits) {
    p.warnings.push_back("estimated peak memory " + format_bytes(p.estimate.peak_memory_bytes) + " on pp rank " +
                         std::to_string(p.estimate.peak_pp_rank) + " exceeds the " + format_bytes(p.estimate.device_memory_bytes) + " of " +
                         p.device.name + ": raise tp or pp, turn on train.recompute or parallel.zero, or lower train.micro_batch "
                         "(stagecraft-cli search finds layouts that fit)");
  }
  if (p.pp > 1 && p.micro_batches < p.pp && c.pipeline.schedule != Schedule::kGpipe) {
    p.warnings.push_back("fewer micro-batches (m=" + std::to_string(p.micro_batches) + ") than pipeline stages (pp=" + std::to_string(p.pp) +
                         "): some stages never overlap; aim for m >= 4 x pp");
  }
  if (!p.estimate.plausible) p.warnings.push_back("implausibly fast: " + p.estimate.implausible_because);
  add_expert_warnings(p);
}

}  // namespace

Result<Plan> make_plan(const RunConfig& config) { return make_plan(config, nullptr); }

Result<Plan> make_plan(const RunConfig& config, const StageCostModel* measured_costs) {
  const auto issues = config::validate(config);
  if (!issues.empty()) {
    std::string msg;
    for (const auto& i : issues) msg += (msg.empty() ? "" : "\n") + i.message;
    return Status::invalid_input(msg);
  }
  const TopologySpec spec = topology_spec(config);
  auto topo = Topology::create(spec);
  if (!topo.ok()) return topo.status();

  Plan p;
  p.config = config;
  p.dp = spec.dp;
  p.tp = spec.tp;
  p.pp = spec.pp;
  p.cp = spec.cp;
  p.virtual_stages = config.pipeline.schedule == Schedule::kInterleaved ? config.pipeline.virtual_stages : 1;
  p.micro_batches = config::micro_batches(config);
  p.topology = std::move(topo).value();

  auto device = resolve_device(config.cluster);
  if (!device.ok()) return device.status();
  p.device = std::move(device).value();

  const int layers = config.model.layers;
  const int chunks = p.pp * p.virtual_stages;
  const int tp_nodes = static_cast<int>(p.topology.nodes_of(p.topology.group_of(0, config::Axis::kTp)).size());
  const int64_t costs_run = config::pipeline_costs_run(config.pipeline);
  if (costs_run > 0 && config.pipeline.partition == PartitionKind::kBalanced && !measured_costs) {
    return Status::invalid_input("pipeline.costs=" + config.pipeline.costs + ": measured times come from the run history; plan with " +
                                 "stagecraft-cli (plan, run, export) or the window, which read it");
  }
  if (measured_costs && static_cast<int>(measured_costs->layer.size()) != config.model.layers) {
    return Status::invalid_input("pipeline.costs=" + config.pipeline.costs + ": " + std::to_string(measured_costs->layer.size()) +
                                 " measured layers for a model of " + std::to_string(config.model.layers));
  }
  const StageCostModel cost = measured_costs ? *measured_costs : time_cost_model(config, p.device, p.tp, tp_nodes);
  std::vector<int> counts;
  switch (config.pipeline.partition) {
    case PartitionKind::kUniform: counts = uniform_counts(layers, chunks); break;
    case PartitionKind::kExplicit: counts = stage_ids_to_counts(config.pipeline.stage_ids, chunks); break;
    case PartitionKind::kBalanced: {
      const StageMemoryModel memory = memory_model(config, p.dp, p.tp, p.pp, p.virtual_stages, p.micro_batches);
      auto balanced = balanced_counts(cost, chunks, &memory);
      if (!balanced.ok()) return balanced.status().with_context("pipeline.partition=balanced");
      counts = std::move(balanced).value();
      break;
    }
  }
  p.layer_stage = counts_to_stage_ids(counts);
  const auto costs = stage_costs(cost, counts);
  const double mean = std::accumulate(costs.begin(), costs.end(), 0.0) / std::max<size_t>(costs.size(), 1);
  int first = 0;
  for (int s = 0; s < chunks; ++s) {
    StagePlan st;
    st.stage = s;
    st.pp_rank = s % p.pp;
    st.first_layer = first;
    st.num_layers = counts[static_cast<size_t>(s)];
    st.has_embedding = s == 0;
    st.has_head = s == chunks - 1;
    st.relative_cost = mean > 0 ? costs[static_cast<size_t>(s)] / mean : 1.0;
    first += st.num_layers;
    p.stages.push_back(st);
  }
  p.estimate = estimate(estimate_input(p));
  add_warnings(p, cost);
  return p;
}

EstimateInput estimate_input(const Plan& p) {
  EstimateInput in;
  in.config = p.config;
  in.device = p.device;
  set_layout(in, p.topology.spec());
  in.virtual_stages = p.virtual_stages;
  in.micro_batches = p.micro_batches;
  for (const auto& s : p.stages) in.chunk_layers.push_back(s.num_layers);
  return in;
}

Json plan_to_json(const Plan& p) {
  const auto& c = p.config;
  const auto& topo = p.topology;
  Json j = Json::object();
  j.set("name", c.name);
  j.set("world_size", topo.world_size());
  j.set("nodes", c.cluster.nodes);
  j.set("gpus_per_node", c.cluster.gpus_per_node);
  j.set("device", c.cluster.device);
  j.set("arch", model::ModelDesc::from(c.model).name());
  j.set("dp", p.dp);
  j.set("tp", p.tp);
  j.set("pp", p.pp);
  j.set("cp", p.cp);
  if (p.cp > 1) j.set("cp_comm", std::string(config::to_string(c.parallel.cp_comm)));
  j.set("zero", c.parallel.zero);
  const bool moe = c.model.moe.enabled();
  if (moe) {
    j.set("ep", c.parallel.ep);
    j.set("expert_tp", c.parallel.expert_tp);
    j.set("expert_dp", topo.expert_size(ExpertAxis::kDp));
    j.set("experts_per_rank", c.model.moe.experts / c.parallel.ep);
  }
  j.set("order", config::order_text(topo.order()));
  j.set("tp_mode", std::string(config::to_string(c.parallel.tp_mode)));
  if (c.parallel.tp_mode == config::TpMode::k2p5d) j.set("tp_depth", c.parallel.tp_depth);
  j.set("schedule", std::string(config::to_string(c.pipeline.schedule)));
  j.set("virtual_stages", p.virtual_stages);
  j.set("partition", std::string(config::to_string(c.pipeline.partition)));
  j.set("micro_batches", p.micro_batches);
  j.set("bubble_fraction", p.bubble_fraction());

  Json::Array ranks;
  ranks.reserve(static_cast<size_t>(topo.world_size()));
  for (int r = 0; r < topo.world_size(); ++r) {
    const RankCoord rc = topo.coord(r);
    Json::Object e;
    e.reserve(3 + config::kAxisCount);
    e.emplace_back("rank", rc.rank);
    e.emplace_back("node", rc.node);
    e.emplace_back("local_rank", rc.local_rank);
    for (const auto& axis : config::kAxisNames) e.emplace_back(std::string(axis.name), rc.at(axis.value));
    if (moe) {
      for (const auto& axis : kExpertAxisNames) e.emplace_back(std::string(axis.name), rc.at(axis.value));
      const auto held = topo.experts_of(r, c.model.moe.experts);
      e.emplace_back("experts", Json::array_of(std::vector<int>{held.first, held.first + held.count - 1}));
    }
    ranks.push_back(Json::object(std::move(e)));
  }
  j.set("ranks", Json(std::move(ranks)));

  auto groups_json = [](const std::vector<std::vector<int>>& gs) {
    Json::Array a;
    a.reserve(gs.size());
    for (const auto& g : gs) a.push_back(Json::array_of(g));
    return Json(std::move(a));
  };
  Json groups = Json::object();
  for (const auto& axis : config::kAxisNames) groups.set(std::string(axis.name), groups_json(topo.groups(axis.value)));
  // Gradients reduce (and ZeRO shards) over the data-parallel ranks of every context rank.
  if (p.cp > 1) groups.set("dp_cp", groups_json(topo.groups(gradient_axes())));
  // The expert layers' groups (topology.h): etp, ep and edp, which reduces the experts' gradients.
  if (moe) {
    for (const auto& axis : kExpertAxisNames) groups.set(std::string(axis.name), groups_json(topo.expert_groups(axis.value)));
  }
  j.set("groups", std::move(groups));
  const auto subgroups = topo.tensor_subgroups();
  if (!subgroups.empty()) {
    Json sub = Json::object();
    for (const auto& fam : subgroups) sub.set(fam.name, groups_json(fam.groups));
    j.set("tensor_subgroups", std::move(sub));
  }

  // The ranks of each pp coordinate, once: interleaved plans list them for every chunk.
  std::vector<std::vector<int>> stage_ranks(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) stage_ranks[static_cast<size_t>(r)] = topo.stage_ranks(r);

  Json::Array stages;
  for (const auto& s : p.stages) {
    Json e = Json::object();
    e.set("stage", s.stage);
    e.set("pp_rank", s.pp_rank);
    std::vector<int> layers(static_cast<size_t>(s.num_layers));
    std::iota(layers.begin(), layers.end(), s.first_layer);
    e.set("layers", Json::array_of(layers));
    e.set("ranks", Json::array_of(stage_ranks[static_cast<size_t>(s.pp_rank)]));
    e.set("embedding", s.has_embedding);
    e.set("head", s.has_head);
    e.set("relative_cost", std::round(s.relative_cost * 1e4) / 1e4);
    stages.push_back(std::move(e));
  }
  j.set("stages", Json(std::move(stages)));
  Json est = estimate_to_json(p.estimate);
  if (auto* mem = est.find("memory")) {
    // Name a real rank for each pp coordinate: dp = tp = 0.
    Json::Array& rows = const_cast<Json&>(*mem).as_array();
    for (auto& row : rows) {
      const int pp_rank = static_cast<int>(row.find("pp_rank")->as_int());
      row.set("rank", stage_ranks[static_cast<size_t>(pp_rank)].front());
    }
  }
  j.set("estimate", std::move(est));
  j.set("warnings", Json::array_of(p.warnings));
  return j;
}

namespace {

// "[0-3,8,9]": consecutive runs print as ranges. At most `max_items` runs are shown; a longer
// list ends in ",... N ranks]".
std::string list_ranks(const std::vector<int>& g, size_t max_items = 16) {
  std::string s = "[";
  size_t items = 0;
  for (size_t i = 0; i < g.size();) {
    if (items == max_items) {
      s += ",... " + std::to_string(g.size()) + " ranks";
      break;
    }
    size_t k = i;
    while (k + 1 < g.size() && g[k + 1] == g[k] + 1) ++k;
    if (i) s += ",";
    s += std::to_string(g[i]);
    if (k >= i + 2) {
      s += "-" + std::to_string(g[k]);
      ++items;
    } else if (k == i + 1) {
      s += "," + std::to_string(g[k]);
      items += 2;
    } else {
      ++items;
    }
    i = k + 1;
  }
  return s + "]";
}

void print_groups(std::ostringstream& o, const char* name, const std::vector<std::vector<int>>& gs) {
  constexpr size_t kShown = 8;
  o << "  " << name << " (" << gs.size() << " group" << (gs.size() == 1 ? "" : "s") << " of " << (gs.empty() ? 0 : gs[0].size()) << "):";
  for (size_t i = 0; i < gs.size() && i < kShown; ++i) o << " " << list_ranks(gs[i]);
  if (gs.size() > kShown) o << " ... (" << gs.size() - kShown << " more)";
  o << "\n";
}

}  // namespace

std::string plan_to_text(const Plan& p, double tokens) {
  const auto& c = p.config;
  const auto& topo = p.topology;
  std::ostringstream o;
  o << "Plan " << c.name << ": " << topo.world_size() << " GPUs (" << c.cluster.nodes << " node" << (c.cluster.nodes == 1 ? "" : "s")
    << " x " << c.cluster.gpus_per_node << " " << c.cluster.device << ")\n";
  o << "  model " << model::ModelDesc::from(c.model).summary() << "\n";
  o << "  dp=" << p.dp << (c.parallel.dp_auto() ? " (auto)" : "") << "  tp=" << p.tp << " (" << config::to_string(c.parallel.tp_mode) << ")"
    << "  pp=" << p.pp;
  if (p.cp > 1) o << "  cp=" << p.cp << " (" << config::to_string(c.parallel.cp_comm) << ")";
  if (c.parallel.zero > 0) o << "  zero=" << c.parallel.zero;
  if (c.model.moe.enabled()) {
    o << "  ep=" << c.parallel.ep;
    if (c.parallel.expert_tp > 1) o << "  expert_tp=" << c.parallel.expert_tp;
    const int held = c.model.moe.experts / c.parallel.ep;
    o << " (" << held << (held == 1 ? " expert" : " experts") << " per rank, expert-dp " << topo.expert_size(ExpertAxis::kDp) << ")";
  }
  o << "  order=" << config::order_text(topo.order()) << "\n";
  o << "  schedule=" << config::to_string(c.pipeline.schedule);
  if (p.virtual_stages > 1) o << " (" << p.virtual_stages << " chunks per pp rank)";
  o << "  micro-batches m=" << p.micro_batches << "  bubble=" << percent(p.bubble_fraction()) << "\n\n";

  o << "Groups\n";
  for (const auto& axis : config::kAxisNames) {
    if (axis.value == config::Axis::kCp && p.cp == 1) continue;
    std::string name(axis.name);
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    print_groups(o, name.c_str(), topo.groups(axis.value));
  }
  if (p.cp > 1) print_groups(o, "DP x CP", topo.groups(gradient_axes()));
  if (c.model.moe.enabled()) {
    if (c.parallel.expert_tp > 1) print_groups(o, "Expert TP", topo.expert_groups(ExpertAxis::kTp));
    print_groups(o, "EP", topo.expert_groups(ExpertAxis::kEp));
    print_groups(o, "Expert DP", topo.expert_groups(ExpertAxis::kDp));
  }
  for (const auto& fam : topo.tensor_subgroups()) {
    const std::string name = "TP " + fam.name;
    print_groups(o, name.c_str(), fam.groups);
  }

  o << "\nStages (" << config::to_string(c.pipeline.partition) << ")\n";
  o << "  stage  pp_rank  layers        count  cost   holds                ranks\n";
  for (const auto& s : p.stages) {
    char line[160];
    const std::string layers = s.num_layers == 1 ? std::to_string(s.first_layer)
                                                 : std::to_string(s.first_layer) + "-" + std::to_string(s.first_layer + s.num_layers - 1);
    std::string holds;
    if (s.has_embedding) holds += "embedding ";
    if (s.has_head) holds += "head+loss";
    const std::string rank_text = list_ranks(topo.stage_ranks(s.pp_rank));
    std::snprintf(line, sizeof line, "  %5d  %7d  %-12s  %5d  %4.2fx  %-19s  ", s.stage, s.pp_rank, layers.c_str(), s.num_layers,
                  s.relative_cost, holds.c_str());
    o << line << rank_text << "\n";
  }
  o << "\n" << estimate_to_text(p.estimate, c, tokens);
  if (!p.warnings.empty()) {
    o << "\nWarnings\n";
    for (const auto& w : p.warnings) o << "  - " << w << "\n";
  }
  return o.str();
}

}  // namespace stagecraft::plan
