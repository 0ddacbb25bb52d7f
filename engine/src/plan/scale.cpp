// How a model trains as the cluster grows: one search per cluster size. See scale.h.
#include "stagecraft/plan/scale.h"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace stagecraft::plan {

namespace {

constexpr int kMaxNodes = 1 << 20;

}  // namespace

std::vector<int> scale_sizes(int max_nodes) {
  std::vector<int> sizes;
  for (int n = 1; n < max_nodes; n *= 2) sizes.push_back(n);
  if (max_nodes >= 1) sizes.push_back(max_nodes);
  return sizes;
}

Result<ScaleResult> scale(const config::RunConfig& base, const ScaleOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const int max_nodes = options.max_nodes > 0 ? options.max_nodes : base.cluster.nodes;
  if (options.max_nodes < 0 || max_nodes > kMaxNodes) {
    return Status::invalid_input("scale: max nodes " + std::to_string(options.max_nodes) + ": expected a whole number from 1 to " +
                                 std::to_string(kMaxNodes));
  }
  if (!(options.tokens >= 0)) return Status::invalid_input("scale: tokens must be a positive number");
  ScaleResult result;
  result.tokens = options.tokens > 0 ? options.tokens
                                     : static_cast<double>(base.train.steps) * base.train.global_batch * base.model.seq_len;
  SearchOptions search_options = options.search;
  search_options.top = 1;
  result.capped = search_options.cap_at_published_mfu;
  double per_gpu = 0;  // tokens/s per GPU of the first size with a layout
  for (int nodes : scale_sizes(max_nodes)) {
    config::RunConfig c = base;
    c.cluster.nodes = nodes;
    c.cluster.hosts.clear();  // hosts would pin the node count
    ScalePoint point;
    point.nodes = nodes;
    point.gpus = c.world_size();
    auto found = search(c, search_options);
    if (!found.ok()) {
      // A size where nothing fits is a point of the table; an unusable base fails the whole table.
      if (found.status().code() != Status::Code::kUnavailable) return found.status();
      point.reason = found.status().message();
    } else {
      point.found = true;
      point.best = std::move(found->ranked.front());
      const double tps = point.best.estimate.tokens_per_s;
      if (per_gpu == 0) per_gpu = tps / point.gpus;
      point.ideal_tokens_per_s = per_gpu * point.gpus;
      point.efficiency = point.ideal_tokens_per_s > 0 ? tps / point.ideal_tokens_per_s : 0;
      point.days = point.best.estimate.days_for_tokens(result.tokens);
    }
    result.points.push_back(std::move(point));
  }
  if (per_gpu == 0) {
    return Status::unavailable("scale: no layout fits at any size up to " + std::to_string(max_nodes) + " nodes; at " +
                               std::to_string(max_nodes) + ": " + result.points.back().reason);
  }
  // Sizes before the first found one have no layout; the ideal line still covers them.
  for (auto& p : result.points) {
    if (!p.found) p.ideal_tokens_per_s = per_gpu * p.gpus;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

Json scale_to_json(const ScaleResult& r) {
  Json j = Json::object();
  j.set("tokens", r.tokens);
  j.set("seconds", r.seconds);
  Json::Array points;
  for (const auto& p : r.points) {
    Json o = Json::object();
    o.set("nodes", p.nodes);
    o.set("gpus", p.gpus);
    o.set("found", p.found);
    o.set("ideal_tokens_per_s", p.ideal_tokens_per_s);
    if (!p.found) {
      o.set("reason", p.reason);
    } else {
      const auto& e = p.best.estimate;
      o.set("layout", layout_string(p.best.config));
      o.set("overrides", Json::array_of(layout_overrides(p.best.config)));
      o.set("tokens_per_s", e.tokens_per_s);
      o.set("mfu", e.mfu);
      o.set("plausible", e.plausible);
      if (!e.plausible) o.set("implausible_because", e.implausible_because);
      o.set("tflops_per_gpu", e.tflops_per_gpu);
      o.set("step_time_s", e.step_time_s);
      o.set("peak_memory_bytes", e.peak_memory_bytes);
      o.set("days", p.days);
      o.set("efficiency", p.efficiency);
    }
    points.push_back(std::move(o));
  }
  j.set("points", Json(std::move(points)));
  return j;
}

std::string scale_to_text(const ScaleResult& r) {
  std::ostringstream o;
  char line[400];
  std::snprintf(line, sizeof line, "Scale: best layout per cluster size, %.3g tokens, in %s\n\n", r.tokens, format_seconds(r.seconds).c_str());
  o << line;
  std::snprintf(line, sizeof line, "%6s %7s  %-66s %11s %6s %9s %11s %6s\n", "nodes", "GPUs", "layout", "tokens/s", "MFU", "days",
                "ideal", "eff.");
  o << line;
  std::string reasons;
  const ScalePoint* implausible = nullptr;
  for (const auto& p : r.points) {
    if (!p.found) {
      std::snprintf(line, sizeof line, "%6d %7d  %-66s %11s %6s %9s %11.4g %6s\n", p.nodes, p.gpus, "-", "-", "-", "-",
                    p.ideal_tokens_per_s, "-");
      reasons += "  " + std::to_string(p.nodes) + " node" + (p.nodes == 1 ? "" : "s") + ": " + p.reason + "\n";
    } else {
      const auto& e = p.best.estimate;
      // Above the device's best published MFU: the MFU marked "!" (plan/estimate.h).
      if (!e.plausible && !implausible) implausible = &p;
      std::snprintf(line, sizeof line, "%6d %7d  %-66s %11.4g %5.1f%%%s%9.3g %11.4g %5.0f%%\n", p.nodes, p.gpus,
                    layout_string(p.best.config).c_str(), e.tokens_per_s, e.mfu * 100, e.plausible ? " " : "!", p.days, p.ideal_tokens_per_s,
                    p.efficiency * 100);
    }
    o << line;
  }
  if (!reasons.empty()) o << "\nNothing fits at\n" << reasons;
  if (implausible) {
    o << "\n! above the best MFU published for the device: implausible. At " << implausible->nodes << " node"
      << (implausible->nodes == 1 ? "" : "s") << ": " << implausible->best.estimate.implausible_because << "\n";
    o << (r.capped ? "  Each size ranked with the predictions capped at that MFU (--plausible).\n"
                   : "  scale --plausible ranks each size with the predictions capped at that MFU.\n");
  }
  return o.str();
}

std::string scale_to_csv(const ScaleResult& r) {
  std::ostringstream o;
  o << "nodes,gpus,layout,tokens_per_s,mfu,days,ideal_tokens_per_s,efficiency\n";
  char line[400];
  for (const auto& p : r.points) {
    if (!p.found) {
      std::snprintf(line, sizeof line, "%d,%d,,,,,%.6g,\n", p.nodes, p.gpus, p.ideal_tokens_per_s);
    } else {
      const auto& e = p.best.estimate;
      std::snprintf(line, sizeof line, "%d,%d,%s,%.6g,%.6g,%.6g,%.6g,%.6g\n", p.nodes, p.gpus, layout_string(p.best.config).c_str(),
                    e.tokens_per_s, e.mfu, p.days, p.ideal_tokens_per_s, p.efficiency);
    }
    o << line;
  }
  return o.str();
}

}  // namespace stagecraft::plan
