// A recorded run's measurements. See run_measurement.h.
#include "stagecraft/launch/run_measurement.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>
#include <set>

#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/worker_events.h"

namespace stagecraft::launch {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  return (*std::max_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(mid)) + hi) / 2;
}

std::string run_name(int64_t id) { return "run " + std::to_string(id); }

struct Recorded {
  config::RunConfig config;
  plan::Plan plan;
  std::map<int64_t, std::map<int, TimingEvent>> timing;  // step -> rank -> event
};

Result<Recorded> read_recorded(store::RunStore& store, int64_t id) {
  auto run = store.get_run(id);
  if (!run.ok()) return run.status();
  Recorded r;
  auto cfg = config::parse_config(run->config_yaml, run_name(id) + "'s configuration", {});
  if (!cfg.ok()) return cfg.status().with_context(run_name(id));
  r.config = std::move(cfg).value();
  auto plan = plan::make_plan(r.config);
  if (!plan.ok()) return plan.status().with_context(run_name(id) + ": planning its configuration again");
  r.plan = std::move(plan).value();
  auto events = store.events(id);
  if (!events.ok()) return events.status();
  for (const auto& row : events.value()) {
    if (row.kind != "timing") continue;
    auto e = decode_event(row.json);
    if (!e.ok()) continue;  // a row a newer worker wrote: skipped, as the Runs view does
    auto* t = std::get_if<TimingEvent>(&e.value());
    if (!t) continue;  // a row kind and line that disagree: not a timing event
    if (row.rank < 0 || row.rank >= r.plan.topology.world_size()) continue;
    r.timing[t->step][row.rank] = std::move(*t);
  }
  if (r.timing.empty()) {
    return Status::not_found(run_name(id) + " has no timing events (a run of another program, or one that stopped before its first step)");
  }
  return r;
}

}  // namespace

Result<RunMeasurement> measure_run(store::RunStore& store, int64_t run_id) {
  auto rec = read_recorded(store, run_id);
  if (!rec.ok()) return rec.status();
  RunMeasurement m;
  m.run_id = run_id;
  m.config = rec->config;
  m.plan = rec->plan;
  const auto& timing = rec->timing;
  const int world = m.plan.topology.world_size();
  // Steady steps: all but the first n/5 (at least one when there are two or more, at most 10).
  std::vector<int64_t> steps;
  for (const auto& [step, ranks] : timing) {
    steps.push_back(step);
    for (const auto& [rank, t] : ranks) {
      if (!t.ops.empty()) {
        m.timeline_steps.push_back(step);
        break;
      }
    }
  }
  const size_t skip = steps.size() < 2 ? 0 : std::min<size_t>(10, std::max<size_t>(1, steps.size() / 5));
  steps.erase(steps.begin(), steps.begin() + static_cast<ptrdiff_t>(skip));
  m.first_step = steps.front();
  m.last_step = steps.back();
  m.steps_used = static_cast<int>(steps.size());

  m.ranks.resize(static_cast<size_t>(world));
  std::vector<double> step_max;  // per used step, the slowest rank's step time
  for (int r = 0; r < world; ++r) {
    MeasuredRank& mr = m.ranks[static_cast<size_t>(r)];
    mr.rank = r;
    mr.pp_rank = m.plan.topology.coord(r).pp;
    std::vector<double> v[10];
    for (int64_t s : steps) {
      auto it = timing.at(s).find(r);
      if (it == timing.at(s).end()) continue;
      const TimingEvent& t = it->second;
      const double parts[10] = {t.step_ms, t.forward_ms, t.backward_ms, t.recompute_ms, t.tp_ms, t.pp_wait_ms, t.pp_send_ms, t.dp_ms, t.optimizer_ms, t.sync_ms};
      for (int i = 0; i < 10; ++i) v[i].push_back(parts[i] / 1e3);
    }
    double* out[10] = {&mr.step_s, &mr.forward_s, &mr.backward_s, &mr.recompute_s, &mr.tp_s, &mr.pp_wait_s, &mr.pp_send_s, &mr.dp_s, &mr.optimizer_s, &mr.sync_s};
    for (int i = 0; i < 10; ++i) *out[i] = median(v[i]);
  }
  for (int64_t s : steps) {
    double worst = 0;
    for (const auto& [rank, t] : timing.at(s)) worst = std::max(worst, t.step_ms / 1e3);
    step_max.push_back(worst);
  }
  // Memory: each rank's largest, from its step metrics.
  auto metrics = store.metrics(run_id);
  if (!metrics.ok()) return metrics.status();
  for (const auto& row : metrics.value()) {
    if (row.rank < 0 || row.rank >= world || row.mem_bytes < 0) continue;
    auto& mr = m.ranks[static_cast<size_t>(row.rank)];
    mr.mem_bytes = std::max(mr.mem_bytes, static_cast<double>(row.mem_bytes));
  }
  // The bottleneck: the most forward and backward work.
  for (int r = 1; r < world; ++r) {
    const auto& a = m.ranks[static_cast<size_t>(r)];
    const auto& b = m.ranks[static_cast<size_t>(m.bottleneck_rank)];
    if (a.forward_s + a.backward_s > b.forward_s + b.backward_s) m.bottleneck_rank = r;
  }
  const MeasuredRank& b = m.ranks[static_cast<size_t>(m.bottleneck_rank)];
  plan::MeasuredStep& ms = m.step;
  ms.step_s = median(step_max);
  ms.recompute_s = b.recompute_s;
  ms.tp_s = b.tp_s;
  ms.compute_s = std::max(0.0, b.forward_s + b.backward_s - b.tp_s - b.recompute_s);
  ms.pp_bubble_s = b.pp_wait_s + b.pp_send_s + b.sync_s;
  ms.dp_s = b.dp_s;
  ms.optimizer_s = b.optimizer_s;
  ms.overhead_s = std::max(0.0, b.step_s - (b.forward_s + b.backward_s + b.pp_wait_s + b.pp_send_s + b.dp_s + b.optimizer_s + b.sync_s));
  ms.tokens_per_s = ms.step_s > 0 ? static_cast<double>(m.config.train.global_batch) * m.config.model.seq_len / ms.step_s : 0.0;
  ms.memory_bytes.assign(static_cast<size_t>(m.plan.pp), 0.0);
  for (const auto& mr : m.ranks) {
    auto& slot = ms.memory_bytes[static_cast<size_t>(mr.pp_rank)];
    slot = std::max(slot, mr.mem_bytes);
  }
  return m;
}

Result<MeasuredTimeline> measured_timeline(store::RunStore& store, int64_t run_id, int64_t step, int dp_rank) {
  auto rec = read_recorded(store, run_id);
  if (!rec.ok()) return rec.status();
  const auto& topo = rec->plan.topology;
  if (dp_rank < 0 || dp_rank >= rec->plan.dp) {
    return Status::invalid_input(run_name(run_id) + ": dp rank " + std::to_string(dp_rank) + " is not one of its 0.." +
                                 std::to_string(rec->plan.dp - 1));
  }
  auto it = rec->timing.find(step);
  bool has_ops = false;
  if (it != rec->timing.end()) {
    for (const auto& [rank, t] : it->second) has_ops = has_ops || !t.ops.empty();
  }
  if (!has_ops) {
    return Status::not_found(run_name(run_id) + " has no timeline of step " + std::to_string(step) +
                             " (workers keep the first three steps, every tenth and the last)");
  }
  MeasuredTimeline tl;
  tl.step = step;
  double origin = INFINITY;
  std::vector<const TimingEvent*> chosen;
  std::vector<int> chosen_ranks;
  for (int p = 0; p < rec->plan.pp; ++p) {
    const int r = topo.rank_of(dp_rank, 0, p);
    auto jt = it->second.find(r);
    if (jt == it->second.end()) continue;
    chosen.push_back(&jt->second);
    chosen_ranks.push_back(r);
    origin = std::min(origin, jt->second.start);
  }
  double last = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const TimingEvent& t = *chosen[i];
    const double shift = t.start - origin;  // seconds
    if (!t.ops.empty()) ++tl.ranks;
    for (const auto& op : t.ops) {
      TimelineOp o;
      o.rank = chosen_ranks[i];
      o.pp_rank = topo.coord(o.rank).pp;
      o.backward = op.backward;
      o.chunk = op.chunk;
      o.micro_batch = op.micro_batch;
      o.start_s = shift + op.start_ms / 1e3;
      o.end_s = shift + op.end_ms / 1e3;
      tl.busy_s += o.end_s - o.start_s;
      last = std::max(last, o.end_s);
      tl.ops.push_back(o);
    }
  }
  double first = INFINITY;
  for (const auto& o : tl.ops) first = std::min(first, o.start_s);
  tl.makespan_s = tl.ops.empty() ? 0.0 : last - first;
  return tl;
}

Result<std::vector<plan::CalibrationSample>> calibration_samples(store::RunStore& store, const std::vector<int64_t>& run_ids) {
  std::vector<plan::CalibrationSample> out;
  std::set<int64_t> seen;
  for (int64_t id : run_ids) {
    if (!seen.insert(id).second) continue;
    auto m = measure_run(store, id);
    if (!m.ok()) return m.status();
    plan::CalibrationSample s;
    char label[160];
    std::snprintf(label, sizeof label, "run %lld (dp %d x tp %d x pp %d, m %d)", static_cast<long long>(id), m->plan.dp, m->plan.tp,
                  m->plan.pp, m->plan.micro_batches);
    s.label = label;
    s.input = plan::estimate_input(m->plan);
    s.measured = m->step;
    out.push_back(std::move(s));
  }
  if (out.empty()) return Status::invalid_input("calibrate: name at least one run");
  return out;
}

Result<plan::StageCostModel> measured_layer_costs(store::RunStore& store, int64_t run_id, const config::RunConfig& config) {
  auto rec = read_recorded(store, run_id);
  if (!rec.ok()) return rec.status().with_context("pipeline.costs=run:" + std::to_string(run_id));
  const auto& rm = rec->config.model;
  const auto& cm = config.model;
  if (rm.layers != cm.layers || rm.hidden != cm.hidden || rm.heads != cm.heads || rm.seq_len != cm.seq_len || rm.vocab != cm.vocab) {
    char shape[160];
    std::snprintf(shape, sizeof shape, "layers %d, hidden %d, heads %d, seq_len %d, vocab %d", rm.layers, rm.hidden, rm.heads, rm.seq_len,
                  rm.vocab);
    return Status::invalid_input("pipeline.costs=run:" + std::to_string(run_id) + ": that run trained another model (" + shape +
                                 "); measured layer times fit the same model only");
  }
  const plan::Plan& run_plan = rec->plan;
  const int chunks = run_plan.num_stages();
  // Measured forward + backward per micro-batch of each chunk, over the timeline steps of DP
  // replica 0, TP rank 0.
  std::vector<std::vector<double>> per_chunk(static_cast<size_t>(chunks));
  for (const auto& [step, ranks] : rec->timing) {
    for (int p = 0; p < run_plan.pp; ++p) {
      auto it = ranks.find(run_plan.topology.rank_of(0, 0, p));
      if (it == ranks.end()) continue;
      std::map<std::pair<int, int>, double> op_time;  // (chunk, micro-batch) -> fwd + bwd
      for (const auto& op : it->second.ops) op_time[{op.chunk, op.micro_batch}] += op.end_ms - op.start_ms;
      for (const auto& [key, ms] : op_time) {
        if (key.first >= 0 && key.first < chunks) per_chunk[static_cast<size_t>(key.first)].push_back(ms / 1e3);
      }
    }
  }
  const plan::StageCostModel model =
      plan::time_cost_model(rec->config, run_plan.device, run_plan.tp, plan::estimate_input(run_plan).tp_nodes);
  plan::StageCostModel out = model;
  for (int c = 0; c < chunks; ++c) {
    const auto& st = run_plan.stages[static_cast<size_t>(c)];
    if (per_chunk[static_cast<size_t>(c)].empty()) {
      return Status::not_found("pipeline.costs=run:" + std::to_string(run_id) + ": its timelines hold no forward or backward of stage " +
                               std::to_string(c));
    }
    double predicted = 0;
    for (int l = st.first_layer; l < st.first_layer + st.num_layers; ++l) predicted += model.layer[static_cast<size_t>(l)];
    if (st.has_embedding) predicted += model.first;
    if (st.has_head) predicted += model.last;
    const double ratio = predicted > 0 ? median(per_chunk[static_cast<size_t>(c)]) / predicted : 1.0;
    for (int l = st.first_layer; l < st.first_layer + st.num_layers; ++l) out.layer[static_cast<size_t>(l)] *= ratio;
    if (st.has_embedding) out.first *= ratio;
    if (st.has_head) out.last *= ratio;
  }
  return out;
}

Status resolve_pipeline_costs(config::RunConfig& config, store::RunStore* store) {
  const int64_t run = config::pipeline_costs_run(config.pipeline);
  if (run <= 0 || config.pipeline.partition != config::PartitionKind::kBalanced) return Status::OK();
  if (!store) return Status::not_found("pipeline.costs=" + config.pipeline.costs + ": there is no run history yet to read it from");
  auto costs = measured_layer_costs(*store, run, config);
  if (!costs.ok()) return costs.status();
  auto plan = plan::make_plan(config, &costs.value());
  if (!plan.ok()) return plan.status();
  config = with_measured_split(std::move(config), plan.value());
  return Status::OK();
}

config::RunConfig with_measured_split(config::RunConfig config, const plan::Plan& plan) {
  if (config::pipeline_costs_run(config.pipeline) > 0 && config.pipeline.partition == config::PartitionKind::kBalanced) {
    config.pipeline.partition = config::PartitionKind::kExplicit;
    config.pipeline.stage_ids = plan.layer_stage;
  }
  return config;
}

}  // namespace stagecraft::launch
