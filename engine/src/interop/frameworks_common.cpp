// Framework names, fixed rank orders and shared text helpers. See frameworks_common.h and
// frameworks.h.
#include "frameworks_common.h"

#include "stagecraft/core/enum_names.h"

#include <charconv>

#include "stagecraft/config/validate.h"
#include "stagecraft/plan/topology.h"

namespace stagecraft::interop {

namespace {

constexpr EnumName<Framework> kFrameworkNames[] = {{Framework::kLibai, "libai"},
                                                   {Framework::kPaddle, "paddle"},
                                                   {Framework::kColossalai, "colossalai"},
                                                   {Framework::kMegatron, "megatron"},
                                                   {Framework::kDeepspeed, "deepspeed"},
                                                   {Framework::kHf, "hf"},
                                                   {Framework::kTorchtitan, "torchtitan"}};

Result<plan::Topology> topology_of(const RunConfig& c, const std::vector<Axis>& order) {
  plan::TopologySpec spec = plan::topology_spec(c);
  spec.order = order;
  return plan::Topology::create(spec);
}

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::string s;
  for (size_t g = 0; g < groups.size() && g < 3; ++g) s += (g ? " " : "") + int_list(groups[g]);
  if (groups.size() > 3) s += " ...";
  return s;
}

}  // namespace

std::string_view to_string(Framework f) { return enum_to_string(kFrameworkNames, f); }

std::optional<Framework> parse_framework(std::string_view s) { return enum_parse(kFrameworkNames, s); }

std::string framework_choices(bool importable_only) {
  std::string s;
  for (const auto& [f, name] : kFrameworkNames) {
    if (importable_only && !can_import(f)) continue;
    s += (s.empty() ? "" : "|") + std::string(name);
  }
  return s;
}

bool can_import(Framework f) { return f != Framework::kMegatron; }

const std::vector<Axis>& tp_dp_pp_order() {
  static const std::vector<Axis> order = config::complete_order({Axis::kTp, Axis::kDp, Axis::kPp});
  return order;
}

std::vector<Axis> framework_order(Framework f, const RunConfig& c) {
  // Completed with cp after tp: Megatron-Core's tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp with
  // --use-tp-pp-dp-mapping), torchtitan's mesh; the others have no context axis.
  const std::vector<Axis>& tp_dp_pp = tp_dp_pp_order();
  const std::vector<Axis> tp_pp_dp = config::complete_order({Axis::kTp, Axis::kPp, Axis::kDp});
  switch (f) {
    case Framework::kLibai: return tp_dp_pp;
    case Framework::kMegatron: return c.parallel.order == tp_pp_dp ? tp_pp_dp : tp_dp_pp;
    case Framework::kDeepspeed: return tp_dp_pp;
    case Framework::kTorchtitan: return tp_dp_pp;  // its device mesh: pp, dp_replicate, dp_shard, cp, tp (innermost)
    case Framework::kHf: return c.parallel.order;  // a model's config.json carries no layout
    case Framework::kPaddle: return c.parallel.zero == 1 ? tp_dp_pp : tp_pp_dp;
    case Framework::kColossalai: return tp_pp_dp;
  }
  return tp_dp_pp;
}

bool same_groups(const RunConfig& c, const std::vector<Axis>& order) {
  if (order == c.parallel.order) return true;
  auto a = topology_of(c, c.parallel.order);
  auto b = topology_of(c, order);
  if (!a.ok() || !b.ok()) return false;
  for (const auto& axis : config::kAxisNames) {
    if (a->groups(axis.value) != b->groups(axis.value)) return false;
  }
  return true;
}

std::string framework_title(Framework f) {
  switch (f) {
    case Framework::kLibai: return "LiBai";
    case Framework::kPaddle: return "PaddlePaddle";
    case Framework::kColossalai: return "Colossal-AI";
    case Framework::kMegatron: return "Megatron-LM";
    case Framework::kDeepspeed: return "DeepSpeed";
    case Framework::kHf: return "Hugging Face";
    case Framework::kTorchtitan: return "torchtitan";
  }
  return "";
}

std::string layout_order_text(const std::vector<Axis>& order, int cp) {
  std::vector<Axis> shown;
  for (Axis a : order) {
    if (a != Axis::kCp || cp > 1) shown.push_back(a);
  }
  return config::order_text(shown);
}

std::string order_note(const RunConfig& c, Framework f, const std::vector<Axis>& framework) {
  if (same_groups(c, framework)) return "";
  auto mine = topology_of(c, c.parallel.order);
  auto theirs = topology_of(c, framework);
  if (!mine.ok() || !theirs.ok()) return "";
  std::string differ;
  for (const auto& axis : config::kAxisNames) {
    const auto g1 = mine->groups(axis.value);
    const auto g2 = theirs->groups(axis.value);
    if (g1 == g2) continue;
    std::string label(axis.name);
    for (char& ch : label) ch = static_cast<char>(ch - 'a' + 'A');
    differ += std::string(differ.empty() ? "" : "; ") + label + " groups " + groups_text(g2) + " instead of " + groups_text(g1);
  }
  const std::string name = framework_title(f);
  const int cp = c.parallel.cp;
  return name + " orders ranks " + layout_order_text(framework, cp) + " but this plan uses parallel.order=" +
         layout_order_text(c.parallel.order, cp) + ", so " + name + " forms other groups: " + differ + "; export with parallel.order=" +
         layout_order_text(framework, cp) + " to plan what " + name + " runs";
}

std::string py_float(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos && s.find("inf") == std::string::npos && s.find("nan") == std::string::npos) s += ".0";
  return s;
}

std::string run_length_ids(const std::vector<int>& ids) {
  std::string s;
  size_t k = 0;
  while (k < ids.size()) {
    size_t n = 1;
    while (k + n < ids.size() && ids[k + n] == ids[k]) ++n;
    s += (s.empty() ? "" : " + ") + std::string("[") + std::to_string(ids[k]) + "]" + (n > 1 ? "*" + std::to_string(n) : "");
    k += n;
  }
  return s.empty() ? "[]" : s;
}

std::string int_list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}

std::vector<int> counts_of(const std::vector<int>& stage_ids, int chunks) {
  std::vector<int> counts(static_cast<size_t>(std::max(chunks, 0)), 0);
  for (int id : stage_ids) {
    if (id >= 0 && id < chunks) ++counts[static_cast<size_t>(id)];
  }
  return counts;
}

std::vector<int> libai_auto_stage_ids(int layers, int pp) {
  // libai/utils/distributed.py, _DistributeUtil._init_placement_group (the version that saves
  // auto_pipeline_stage_id): the same arithmetic, in the same order.
  if (pp < 1 || layers < pp) return {};
  long long actual = layers;
  if (pp >= 4 && layers >= 8 && layers % pp == 0) actual += std::min(pp - 1, layers / pp);
  const long long per_stage = actual / pp;
  const long long offset = actual % pp;
  std::vector<int> ids;
  ids.reserve(static_cast<size_t>(actual));
  for (long long i = 0; i < actual - offset; i += per_stage) {
    const int stage = static_cast<int>(i / per_stage);
    if (stage >= pp - offset) ids.push_back(stage);
    ids.insert(ids.end(), static_cast<size_t>(per_stage), stage);
  }
  ids.resize(static_cast<size_t>(layers));
  return ids;
}

}  // namespace stagecraft::interop
