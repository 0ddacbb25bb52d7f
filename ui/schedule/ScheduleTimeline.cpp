// ScheduleTimeline: the dependency-driven simulation of a pipeline schedule (see the header).
#include "schedule/ScheduleTimeline.h"

#include <algorithm>
#include <limits>

using stagecraft::config::Schedule;
using stagecraft::runtime::PipeOp;

ScheduleTimeline simulateSchedule(Schedule schedule, int pp, int virtualStages, int microBatches, double forward, double backward) {
  ScheduleTimeline t;
  const int v = schedule == Schedule::kInterleaved ? std::max(1, virtualStages) : 1;
  t.pp = std::max(1, pp);
  t.virtualStages = v;
  t.microBatches = std::max(0, microBatches);
  if (t.microBatches == 0) return t;
  const int p = t.pp;
  const int m = t.microBatches;
  const int chunks = p * v;
  const double fwd = forward / v;   // one chunk holds 1/v of its rank's layers
  const double bwd = backward / v;

  std::vector<std::vector<PipeOp>> ops(static_cast<size_t>(p));
  size_t total = 0;
  for (int r = 0; r < p; ++r) {
    ops[static_cast<size_t>(r)] = stagecraft::runtime::pipeline_schedule(schedule, p, r, v, m);
    total += ops[static_cast<size_t>(r)].size();
  }
  constexpr double kUnknown = -1.0;
  // End times by (chunk, micro-batch): fEnd / bEnd[chunk * m + mb].
  std::vector<double> fEnd(static_cast<size_t>(chunks) * m, kUnknown), bEnd(static_cast<size_t>(chunks) * m, kUnknown);
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> freeAt(static_cast<size_t>(p), 0.0);
  std::vector<std::vector<ScheduleBlock>> perRank(static_cast<size_t>(p));

  // Advance every rank as far as its next op's input is ready; repeat until nothing moves.
  // Start times depend only on end times already fixed, so the pass order does not matter.
  bool moved = true;
  size_t done = 0;
  while (moved && done < total) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      auto& list = ops[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      while (i < list.size()) {
        const PipeOp& op = list[i];
        const size_t key = static_cast<size_t>(op.chunk) * m + op.micro_batch;
        double ready = 0.0;
        if (op.kind == PipeOp::Kind::kForward) {
          if (op.chunk > 0) ready = fEnd[key - m];
        } else {
          ready = op.chunk < chunks - 1 ? bEnd[key + m] : fEnd[key];
        }
        if (ready == kUnknown) break;
        const double start = std::max(freeAt[static_cast<size_t>(r)], ready);
        const double end = start + (op.kind == PipeOp::Kind::kForward ? fwd : bwd);
        (op.kind == PipeOp::Kind::kForward ? fEnd : bEnd)[key] = end;
        freeAt[static_cast<size_t>(r)] = end;
        perRank[static_cast<size_t>(r)].push_back({r, op, start, end});
        t.busyTime += end - start;
        t.makespan = std::max(t.makespan, end);
        ++i;
        ++done;
        moved = true;
      }
    }
  }
  t.ok = done == total;
  t.blocks.reserve(total);
  for (auto& rank : perRank) t.blocks.insert(t.blocks.end(), rank.begin(), rank.end());
  return t;
}
