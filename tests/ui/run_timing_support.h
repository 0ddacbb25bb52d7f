// Recorded runs with timing events, for the suites of the Runs view's measured side (timeline,
// predicted lines, calibration): a config of configs/tiny-gpt.yaml with overrides, and a run of
// it written into a real history as a launch writes it — the run's config and plan, per rank and
// step a step metric and a timing event (the event's JSON as launch::encode_event writes it,
// which is what store::RunRecorder stores), the timeline steps' ops among them.
#pragma once

#include <QTemporaryDir>
#include <QtGlobal>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/config/config_io.h"
#include "stagecraft/launch/worker_events.h"
#include "stagecraft/plan/plan.h"
#include "stagecraft/store/process_identity.h"
#include "stagecraft/store/run_store.h"

namespace timing_test {

namespace config = stagecraft::config;
namespace launch = stagecraft::launch;
namespace plan = stagecraft::plan;
namespace store = stagecraft::store;

// A history of its own for each test function, in `dir` (runs-1.sqlite, runs-2.sqlite, ...); its
// path in *path.
inline std::unique_ptr<store::RunStore> newHistory(const QTemporaryDir& dir, QString* path) {
  static int n = 0;
  *path = dir.filePath(QStringLiteral("runs-%1.sqlite").arg(++n));
  auto st = store::RunStore::open(path->toStdString());
  if (!st.ok()) qFatal("%s", st.status().message().c_str());
  return std::move(st).value();
}

inline config::RunConfig tinyConfig(const std::vector<std::string>& overrides = {}) {
  auto c = config::load_config_file(STAGECRAFT_SOURCE_DIR "/configs/tiny-gpt.yaml", overrides);
  if (!c.ok()) qFatal("%s", c.status().message().c_str());
  return c.value();
}

inline plan::Plan planOf(const config::RunConfig& c) {
  auto p = plan::make_plan(c);
  if (!p.ok()) qFatal("%s", p.status().message().c_str());
  return p.value();
}

// One rank's step, milliseconds (TimingEvent's parts; step_ms the whole step).
struct Parts {
  double step = 0, forward = 0, backward = 0, recompute = 0, tp = 0, ppWait = 0, ppSend = 0, dp = 0, optimizer = 0, sync = 0;
};

using PartsOf = std::function<Parts(int rank, int ppRank, int64_t step)>;
using OpsOf = std::function<std::vector<launch::TimingEvent::Op>(int rank, int ppRank, int64_t step)>;

// The parts an estimate describes, as the bottleneck rank's timing event would carry them: the
// forward holds a third of the compute and half the TP, the backward the rest and the recompute;
// the pipeline's send/recv and bubble are waits.
inline Parts partsOf(const plan::Estimate& e) {
  const plan::StepBreakdown& b = e.breakdown;
  Parts p;
  p.forward = 1e3 * (b.compute_s / 3 + b.tp_comm_s / 2);
  p.backward = 1e3 * (2 * b.compute_s / 3 + b.recompute_s + b.tp_comm_s / 2);
  p.recompute = 1e3 * b.recompute_s;
  p.tp = 1e3 * b.tp_comm_s;
  p.ppWait = 1e3 * (b.pp_comm_s + b.bubble_s);
  p.dp = 1e3 * b.dp_comm_s;
  p.optimizer = 1e3 * b.optimizer_s;
  p.step = 1e3 * e.step_time_s;
  return p;
}

// A run of `c` recorded as a launch records it (config, plan, world size), running.
inline qint64 createRun(store::RunStore& st, const config::RunConfig& c, int64_t steps) {
  const plan::Plan p = planOf(c);
  store::NewRun n;
  n.name = c.name;
  n.config_yaml = config::to_yaml(c);
  n.plan_json = plan::plan_to_json(p).dump();
  n.hosts = {"localhost"};
  n.world_size = p.topology.world_size();
  n.total_steps = steps;
  n.supervisor = store::this_process_identity();
  auto id = st.create_run(n);
  if (!id.ok()) qFatal("%s", id.status().message().c_str());
  if (!st.transition(id.value(), store::RunState::kRunning, "started")) qFatal("transition");
  return id.value();
}

// Steps [from, to] of run `id` (of `steps` in all): every rank reports every step, with
// `memBytes` of its pp rank. Step k of every rank starts at kStartUnix + k seconds.
inline void appendSteps(store::RunStore& st, qint64 id, const config::RunConfig& c, int64_t from, int64_t to, int64_t steps,
                        const PartsOf& parts, const OpsOf& ops, const std::vector<int64_t>& memBytes = {}) {
  constexpr double kStartUnix = 1.7e9;
  const plan::Plan p = planOf(c);
  const double tokens = double(c.train.global_batch) * c.model.seq_len;
  store::Batch b;
  for (int64_t step = from; step <= to; ++step) {
    for (int rank = 0; rank < p.topology.world_size(); ++rank) {
      const int ppRank = p.topology.coord(rank).pp;
      const Parts x = parts(rank, ppRank, step);
      launch::TimingEvent t;
      t.rank = rank;
      t.step = step;
      t.start = kStartUnix + double(step);
      t.step_ms = x.step;
      t.forward_ms = x.forward;
      t.backward_ms = x.backward;
      t.recompute_ms = x.recompute;
      t.tp_ms = x.tp;
      t.pp_wait_ms = x.ppWait;
      t.pp_send_ms = x.ppSend;
      t.dp_ms = x.dp;
      t.optimizer_ms = x.optimizer;
      t.sync_ms = x.sync;
      if (launch::has_timeline(step, steps)) t.ops = ops(rank, ppRank, step);
      std::string json = launch::encode_event(t);
      json.pop_back();  // the line's newline, as the recorder stores it
      b.events.push_back({rank, t.start + x.step / 1e3, "timing", json});
      store::MetricRow m;
      m.rank = rank;
      m.step = step;
      m.loss = 5.0 - 0.01 * double(step);
      m.step_ms = x.step;
      m.tokens_per_s = x.step > 0 ? tokens / (x.step / 1e3) : NAN;
      m.mem_bytes = ppRank < int(memBytes.size()) ? memBytes[size_t(ppRank)] : 1 << 20;
      m.time = t.start + x.step / 1e3;
      b.metrics.push_back(m);
    }
  }
  if (!st.append(id, b)) qFatal("append");
}

// A succeeded run of `c` with steps 1..steps, as above. Returns its id.
inline qint64 recordRun(store::RunStore& st, const config::RunConfig& c, int64_t steps, const PartsOf& parts, const OpsOf& ops,
                        const std::vector<int64_t>& memBytes = {}) {
  const qint64 id = createRun(st, c, steps);
  appendSteps(st, id, c, 1, steps, steps, parts, ops, memBytes);
  if (!st.transition(id, store::RunState::kSucceeded, "every rank finished")) qFatal("transition");
  return id;
}

}  // namespace timing_test
