// The auto-planner: enumerate layouts, estimate each, rank. See search.h.
#include "stagecraft/plan/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "stagecraft/config/validate.h"
#include "stagecraft/core/units.h"
#include "stagecraft/config/device.h"
#include "stagecraft/plan/partition.h"

namespace stagecraft::plan {

using config::Recompute;
using config::RunConfig;
using config::Schedule;

namespace {

std::vector<int> divisors(int n, int limit) {
  std::vector<int> out;
  for (int k = 1; k <= n && k <= limit; ++k) {
    if (n % k == 0) out.push_back(k);
  }
  return out;
}

// The parts of a step in a fixed order, with names for the explanation.
struct Part {
  const char* name;
  double StepBreakdown::*field;
};
constexpr Part kParts[] = {
    {"compute", &StepBreakdown::compute_s},     {"recompute", &StepBreakdown::recompute_s},
    {"TP communication", &StepBreakdown::tp_comm_s}, {"CP exchanges", &StepBreakdown::cp_comm_s},
    {"EP all-to-all", &StepBreakdown::moe_a2a_s},      {"PP send/recv", &StepBreakdown::pp_comm_s},
    {"DP gradient reduction", &StepBreakdown::dp_comm_s}, {"pipeline bubble", &StepBreakdown::bubble_s},
    {"optimizer", &StepBreakdown::optimizer_s},     {"per-step overhead", &StepBreakdown::overhead_s},
};

std::string seconds(double s) { return format_seconds(s); }

}  // namespace

std::string why_faster(const Candidate& best, const Candidate& next) {
  const auto& a = best.estimate;
  const auto& b = next.estimate;
  char head[160];
  std::snprintf(head, sizeof head, "%s is %.1f%% faster than %s: ", layout_string(best.config).c_str(),
                (b.step_time_s / a.step_time_s - 1.0) * 100.0, layout_string(next.config).c_str());
  // The two parts that differ most in the best's favour, and the one that most favours the next.
  std::vector<std::pair<double, const Part*>> diffs;
  for (const auto& p : kParts) diffs.emplace_back(b.breakdown.*p.field - a.breakdown.*p.field, &p);
  std::sort(diffs.begin(), diffs.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string why = head;
  int shown = 0;
  for (const auto& [d, p] : diffs) {
    if (d <= 0 || shown == 2) break;
    why += std::string(shown ? ", " : "") + p->name + " " + seconds(a.breakdown.*p->field) + " vs " + seconds(b.breakdown.*p->field);
    ++shown;
  }
  if (shown == 0) why += "the same parts, each slightly shorter";
  const auto& worst = diffs.back();
  if (worst.first < -0.005 * a.step_time_s) {
    why += std::string("; it pays more ") + worst.second->name + " (" + seconds(a.breakdown.*worst.second->field) + " vs " +
           seconds(b.breakdown.*worst.second->field) + ")";
  }
  if (std::abs(a.peak_memory_bytes - b.peak_memory_bytes) > 0.05 * b.peak_memory_bytes) {
    why += "; peak memory " + format_bytes(a.peak_memory_bytes) + " vs " + format_bytes(b.peak_memory_bytes);
  }
  return why;
}

bool allows(const LayoutConstraints& k, const RunConfig& c, const Estimate& e) {
  if (k.fits_only && !e.fits) return false;
  if (k.tp > 0 && c.parallel.tp != k.tp) return false;
  if (k.pp > 0 && c.parallel.pp != k.pp) return false;
  if (k.cp > 0 && c.parallel.cp != k.cp) return false;
  if (k.ep > 0 && c.parallel.ep != k.ep) return false;
  if (c.parallel.zero > k.max_zero) return false;
  if (k.max_micro_batch > 0 && c.train.micro_batch > k.max_micro_batch) return false;
  if (c.parallel.pp > 1 && !k.schedules.empty() &&
      std::find(k.schedules.begin(), k.schedules.end(), c.pipeline.schedule) == k.schedules.end()) {
    return false;
  }
  if (!k.recomputes.empty() && std::find(k.recomputes.begin(), k.recomputes.end(), c.train.recompute) == k.recomputes.end()) {
    return false;
  }
  if (k.tp_within_node && axis_group_nodes(topology_spec(c), {config::Axis::kTp}) > 1) return false;
  return true;
}

std::string layout_string(const RunConfig& c) {
  std::string s = "dp=" + std::to_string(c.parallel.dp) + " tp=" + std::to_string(c.parallel.tp) + " pp=" + std::to_string(c.parallel.pp);
  if (c.parallel.cp > 1) s += " cp=" + std::to_string(c.parallel.cp) + (c.parallel.cp_comm == config::CpComm::kAllToAll ? " a2a" : "");
  if (c.model.moe.enabled()) {
    s += " ep=" + std::to_string(c.parallel.ep);
    if (c.parallel.expert_tp > 1) s += " etp=" + std::to_string(c.parallel.expert_tp);
  }
  if (c.parallel.pp > 1) {
    s += " " + std::string(config::to_string(c.pipeline.schedule));
    if (c.pipeline.schedule == Schedule::kInterleaved) s += " v=" + std::to_string(c.pipeline.virtual_stages);
  }
  s += " mb=" + std::to_string(c.train.micro_batch);
  s += " recompute=" + std::string(config::to_string(c.train.recompute));
  if (c.parallel.sequence_parallel) s += " sp";
  if (c.parallel.zero) s += " zero=" + std::to_string(c.parallel.zero);
  return s;
}

std::vector<std::string> layout_overrides(const RunConfig& c) {
  std::vector<std::string> o = {"parallel.dp=" + std::to_string(c.parallel.dp),
          "parallel.tp=" + std::to_string(c.parallel.tp),
          "parallel.pp=" + std::to_string(c.parallel.pp),
          "parallel.cp=" + std::to_string(c.parallel.cp),
          "pipeline.schedule=" + std::string(config::to_string(c.pipeline.schedule)),
          "pipeline.virtual_stages=" + std::to_string(c.pipeline.virtual_stages),
          "train.micro_batch=" + std::to_string(c.train.micro_batch),
          "train.recompute=" + std::string(config::to_string(c.train.recompute)),
          std::string("parallel.sequence_parallel=") + (c.parallel.sequence_parallel ? "true" : "false"),
          "parallel.zero=" + std::to_string(c.parallel.zero)};
  if (c.model.moe.enabled()) {
    o.push_back("parallel.ep=" + std::to_string(c.parallel.ep));
    o.push_back("parallel.expert_tp=" + std::to_string(c.parallel.expert_tp));
  }
  return o;
}

namespace {

// Why #1 leads #2 in a ranking capped at the published MFU: as why_faster() when its prediction
// is the faster too; else the cap is why (both capped: the smaller peak memory decided).
std::string why_first_capped(const Candidate& first, const Candidate& second) {
  if (first.estimate.step_time_s <= second.estimate.step_time_s) return why_faster(first, second);
  const std::string a = layout_string(first.config), b = layout_string(second.config);
  char line[400];
  if (first.estimate.capped_step_time_s() == second.estimate.capped_step_time_s()) {
    std::snprintf(line, sizeof line, "%s and %s are both predicted above the best published MFU (%.1f%%); capped there they tie, and %s holds less: peak memory %s vs %s",
                  a.c_str(), b.c_str(), first.estimate.published_mfu * 100, a.c_str(), format_bytes(first.estimate.peak_memory_bytes).c_str(),
                  format_bytes(second.estimate.peak_memory_bytes).c_str());
  } else {
    std::snprintf(line, sizeof line, "%s is predicted %.1f%% faster than %s, but above the best published MFU (%.1f%%); capped there it is %.1f%% slower",
                  b.c_str(), (first.estimate.step_time_s / second.estimate.step_time_s - 1.0) * 100, a.c_str(), second.estimate.published_mfu * 100,
                  (second.estimate.capped_step_time_s() / first.estimate.capped_step_time_s() - 1.0) * 100);
  }
  return line;
}

}  // namespace

Result<SearchResult> search(const RunConfig& base, const SearchOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto device = resolve_device(base.cluster);
  if (!device.ok()) return device.status();
  const auto& m = base.model;
  if (m.layers <= 0 || m.hidden <= 0 || m.heads <= 0) {
    return Status::invalid_input("search: the configuration needs the model shape (model.layers, model.hidden, model.heads)");
  }
  const int world = base.world_size();
  // Expert parallelism: the sizes a fixed ep or expert_tp may take, checked once, in one line.
  const bool moe = m.moe.enabled();
  const int etp = std::max(1, options.expert_tp);
  if (!moe && (options.constraints.ep > 1 || etp > 1)) {
    return Status::invalid_input(std::string("search: ") + (etp > 1 ? "--expert-tp " + std::to_string(etp) : "--ep " + std::to_string(options.constraints.ep)) +
                                 " splits the experts of mixture-of-experts layers and model.moe.experts is 0");
  }
  if (moe && options.constraints.ep > 0 && m.moe.experts % options.constraints.ep != 0) {
    return Status::invalid_input("search: --ep " + std::to_string(options.constraints.ep) + " does not divide model.moe.experts=" +
                                 std::to_string(m.moe.experts) + "; every ep rank holds as many experts: pick a divisor of " +
                                 std::to_string(m.moe.experts));
  }
  if (moe && m.moe_ffn() % etp != 0) {
    return Status::invalid_input("search: --expert-tp " + std::to_string(etp) + " does not divide model.moe.ffn_hidden=" + std::to_string(m.moe_ffn()) +
                                 "; pick a divisor of it");
  }
  SearchResult result;
  std::vector<Candidate> kept;  // the layouts the constraints allow
  double smallest_peak = -1;
  std::string smallest_layout;

  RunConfig c = base;
  c.pipeline.partition = config::PartitionKind::kUniform;
  c.pipeline.stage_ids.clear();
  const std::vector<Recompute> recomputes = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};

  EstimateInput in;
  in.device = device.value();
  // The (tp, cp, pp) splits the model allows; progress is reported per split.
  struct Split {
    int tp, cp, pp;
  };
  std::vector<Split> splits;
  for (int tp : divisors(world, 1 << 12)) {
    if (m.heads % tp != 0 || m.kv() % tp != 0 || m.ffn() % tp != 0) continue;
    // Routed experts split over expert_tp, not tp; the shared experts as the dense MLP.
    if (moe && m.moe.shared_experts > 0 && m.moe_shared_ffn() % tp != 0) continue;
    for (int cp : divisors(world / tp, m.seq_len / 2)) {
      if (m.seq_len % (2 * cp) != 0) continue;
      if (cp > 1 && m.seq_len / cp < options.min_cp_tokens) continue;
      for (int pp : divisors(world / (tp * cp), m.layers)) splits.push_back({tp, cp, pp});
    }
  }
  for (size_t split = 0; split < splits.size(); ++split) {
    if (options.progress && !options.progress(static_cast<double>(split) / static_cast<double>(splits.size()))) {
      return Status::unavailable("search: cancelled");
    }
    const auto [tp, cp, pp] = splits[split];
    const int dp = world / (tp * cp * pp);
    if (base.train.global_batch % dp != 0) continue;
    // Expert-parallel sizes: every divisor of the experts that folds with expert_tp over the
    // stage's tp x cp x dp ranks (1 without experts).
    std::vector<int> eps = {1};
    if (moe) {
      eps.clear();
      const long long stage = static_cast<long long>(tp) * cp * dp;
      for (int ep : divisors(m.moe.experts, m.moe.experts)) {
        if (stage % (static_cast<long long>(ep) * etp) == 0) eps.push_back(ep);
      }
    }
    for (int ep : eps) {
      // Where this split's groups sit: the same for every candidate of it.
      RunConfig sizes = base;
      sizes.parallel.dp = dp;
      sizes.parallel.tp = tp;
      sizes.parallel.cp = cp;
      sizes.parallel.pp = pp;
      sizes.parallel.ep = ep;
      sizes.parallel.expert_tp = moe ? etp : 1;
      EstimateInput layout;
      set_layout(layout, topology_spec(sizes));
      const int per_replica = base.train.global_batch / dp;
      for (int mb : divisors(per_replica, options.max_micro_batch)) {
        const int micro_batches = per_replica / mb;
        struct Sched {
          Schedule s;
          int v;
        };
        std::vector<Sched> scheds;
        if (pp == 1) {
          scheds.push_back({Schedule::k1f1b, 1});
        } else {
          scheds.push_back({Schedule::k1f1b, 1});
          scheds.push_back({Schedule::kGpipe, 1});
          for (int v = 2; v <= options.max_virtual_stages; ++v) {
            if (pp * v <= m.layers && m.layers % (pp * v) == 0 && micro_batches % pp == 0) scheds.push_back({Schedule::kInterleaved, v});
          }
        }
        for (const auto& sc : scheds) {
          for (Recompute rc : recomputes) {
            for (int sp = 0; sp <= (tp > 1 && base.parallel.tp_mode == config::TpMode::k1d ? 1 : 0); ++sp) {
              for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero) {
                c.parallel.dp = dp;
                c.parallel.tp = tp;
                c.parallel.pp = pp;
                c.parallel.cp = cp;
                c.parallel.ep = sizes.parallel.ep;
                c.parallel.expert_tp = sizes.parallel.expert_tp;
                c.parallel.sequence_parallel = sp != 0;
                c.parallel.zero = zero;
                c.pipeline.schedule = sc.s;
                c.pipeline.virtual_stages = sc.v;
                c.train.micro_batch = mb;
                c.train.recompute = rc;
                if (!config::validate(c).empty()) {
                  ++result.rejected;
                  continue;
                }
                in.config = c;
                in.dp = layout.dp;
                in.tp = layout.tp;
                in.pp = layout.pp;
                in.cp = layout.cp;
                in.tp_nodes = layout.tp_nodes;
                in.cp_nodes = layout.cp_nodes;
                in.dp_nodes = layout.dp_nodes;
                in.pp_crosses_nodes = layout.pp_crosses_nodes;
                in.ep = layout.ep;
                in.expert_tp = layout.expert_tp;
                in.ep_nodes = layout.ep_nodes;
                in.expert_tp_nodes = layout.expert_tp_nodes;
                in.expert_dp_nodes = layout.expert_dp_nodes;
                in.virtual_stages = sc.v;
                in.micro_batches = micro_batches;
                in.chunk_layers = uniform_counts(m.layers, pp * sc.v);
                Estimate e = estimate(in);
                ++result.evaluated;
                if (smallest_peak < 0 || e.peak_memory_bytes < smallest_peak) {
                  smallest_peak = e.peak_memory_bytes;
                  smallest_layout = layout_string(c);
                }
                if (e.fits) ++result.fitting;
                if (!allows(options.constraints, c, e)) continue;
                kept.push_back({c, std::move(e)});
              }
            }
          }
        }
      }
    }
  }
  if (options.progress) options.progress(1.0);
  if (kept.empty()) {
    if (result.evaluated == 0) {
      return Status::unavailable("search: no layout of " + std::to_string(world) + " GPUs satisfies the configuration rules for this model "
                                 "(heads, ffn_hidden, layers and train.global_batch must divide by the parallel sizes)");
    }
    if (result.fitting == 0 && options.constraints.fits_only) {
      return Status::unavailable("search: none of " + std::to_string(result.evaluated) + " layouts fits " + device.value().name + "'s " +
                                 format_bytes(device.value().memory_bytes()) + "; the smallest peak is " + format_bytes(smallest_peak) +
                                 " (" + smallest_layout + "): add GPUs, or pick a device with more memory");
    }
    return Status::unavailable("search: none of " + std::to_string(result.evaluated) + " layouts (" + std::to_string(result.fitting) +
                               " fit) satisfies the constraints (fixed tp, pp, cp or ep, schedules, recompute, ZeRO, micro-batch, TP "
                               "within a node): loosen them");
  }
  const bool cap = options.cap_at_published_mfu;
  std::stable_sort(kept.begin(), kept.end(), [cap](const Candidate& a, const Candidate& b) { return ranks_before(a, b, cap); });
  result.capped = cap;
  if (kept.size() > 1) result.why = cap ? why_first_capped(kept[0], kept[1]) : why_faster(kept[0], kept[1]);
  if (static_cast<int>(kept.size()) > options.top) kept.resize(static_cast<size_t>(std::max(1, options.top)));
  result.ranked = std::move(kept);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

bool ranks_before(const Candidate& a, const Candidate& b, bool capped) {
  const double sa = capped ? a.estimate.capped_step_time_s() : a.estimate.step_time_s;
  const double sb = capped ? b.estimate.capped_step_time_s() : b.estimate.step_time_s;
  if (sa != sb) return sa < sb;
  if (a.estimate.peak_memory_bytes != b.estimate.peak_memory_bytes) return a.estimate.peak_memory_bytes < b.estimate.peak_memory_bytes;
  // Capped, layouts above the published MFU tie at its step: the faster prediction first.
  return capped && a.estimate.step_time_s < b.estimate.step_time_s;
}

Json search_to_json(const SearchResult& r) {
  Json j = Json::object();
  j.set("evaluated", r.evaluated);
  j.set("fitting", r.fitting);
  j.set("rejected", r.rejected);
  j.set("seconds", r.seconds);
  Json::Array plans;
  for (const auto& cand : r.ranked) {
    const auto& c = cand.config;
    Json p = Json::object();
    p.set("layout", layout_string(c));
    p.set("dp", c.parallel.dp);
    p.set("tp", c.parallel.tp);
    p.set("pp", c.parallel.pp);
    p.set("cp", c.parallel.cp);
    if (c.model.moe.enabled()) {
      p.set("ep", c.parallel.ep);
      p.set("expert_tp", c.parallel.expert_tp);
    }
    p.set("schedule", std::string(config::to_string(c.pipeline.schedule)));
    p.set("virtual_stages", c.pipeline.virtual_stages);
    p.set("micro_batch", c.train.micro_batch);
    p.set("recompute", std::string(config::to_string(c.train.recompute)));
    p.set("sequence_parallel", c.parallel.sequence_parallel);
    p.set("zero", c.parallel.zero);
    p.set("overrides", Json::array_of(layout_overrides(c)));
    p.set("plausible", cand.estimate.plausible);
    if (!cand.estimate.plausible) p.set("implausible_because", cand.estimate.implausible_because);
    p.set("estimate", estimate_to_json(cand.estimate));
    plans.push_back(std::move(p));
  }
  j.set("plans", Json(std::move(plans)));
  j.set("why", r.why);
  j.set("capped_at_published_mfu", r.capped);
  return j;
}

std::string search_to_text(const SearchResult& r) {
  std::ostringstream o;
  char line[320];
  std::snprintf(line, sizeof line, "Search: %lld layouts estimated, %lld fit, %lld broke a rule, in %s\n\n", r.evaluated, r.fitting,
                r.rejected, format_seconds(r.seconds).c_str());
  o << line;
  std::snprintf(line, sizeof line, "  #  %-70s %9s %9s %14s %6s  %11s\n", "layout", "peak mem", "step", "per GPU", "MFU", "tokens/s");
  o << line;
  int i = 1;
  bool unfit = false;
  const Candidate* implausible = nullptr;
  for (const auto& c : r.ranked) {
    const auto& e = c.estimate;
    // A layout over the device memory (listed with --all) has its peak starred; one predicted
    // above the device's best published MFU has its MFU marked with "!".
    const std::string peak = format_bytes(e.peak_memory_bytes) + (e.fits ? "" : "*");
    unfit = unfit || !e.fits;
    if (!e.plausible && !implausible) implausible = &c;
    std::snprintf(line, sizeof line, "%3d  %-70s %9s %9s %14s %5.1f%%%s %11.4g\n", i++, layout_string(c.config).c_str(), peak.c_str(),
                  format_seconds(e.step_time_s).c_str(), format_flop_rate(e.tflops_per_gpu * 1e12).c_str(), e.mfu * 100,
                  e.plausible ? " " : "!", e.tokens_per_s);
    o << line;
  }
  if (unfit) o << "\n* over the device memory: does not fit\n";
  if (implausible) {
    o << "\n! above the best MFU published for the device: implausible. First marked (" << layout_string(implausible->config)
      << "): " << implausible->estimate.implausible_because << "\n";
    o << (r.capped ? "  Ranked with each prediction capped at that MFU (--plausible).\n"
                   : "  search --plausible ranks with each prediction capped at that MFU.\n");
  }
  if (!r.why.empty()) o << "\nWhy #1: " << r.why << "\n";
  return o.str();
}

}  // namespace stagecraft::plan
