// ScheduleTimeline: when each op of a pipeline schedule runs, by a simple dependency-driven
// simulation of runtime::pipeline_schedule()'s per-rank op order.
//
// Every rank runs its ops in the schedule's order, one at a time. An op starts when its rank is
// free and its input is ready: the forward of chunk c > 0 needs chunk c - 1's forward of the same
// micro-batch; the backward of chunk c < last needs chunk c + 1's backward of that micro-batch
// (the last chunk's backward follows its own forward, earlier on the same rank). Sends are
// buffered and take no time. A forward takes `forward` time units, a backward `backward`; with
// interleaving each chunk holds 1/v of the rank's layers, so its blocks are 1/v as long.
//
// Worked example, 1f1b, p = 2, m = 2, f = 1, b = 2: rank 0 runs F0 [0,1] F1 [1,2] B0 [4,6]
// B1 [7,9]; rank 1 runs F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]. Makespan 9 = (m + p - 1)(f + b),
// idle fraction (2 x 9 - 2 x 6) / (2 x 9) = 1/3 = (p - 1)/(m + p - 1).
//
// Pure, no Qt widgets; cost O(ops x p).
#pragma once

#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/runtime/pipeline_schedule.h"

struct ScheduleBlock {
  int ppRank = 0;
  stagecraft::runtime::PipeOp op;
  double start = 0;
  double end = 0;
};

struct ScheduleTimeline {
  int pp = 1;
  int virtualStages = 1;
  int microBatches = 0;          // m simulated
  std::vector<ScheduleBlock> blocks;  // in each rank's order, ranks one after the other
  double makespan = 0;           // end of the last block
  double busyTime = 0;           // sum of block lengths over every rank
  // Idle share of the ranks' time: 1 - busy / (p x makespan). The pipeline bubble.
  double idleFraction() const { return makespan > 0 ? 1.0 - busyTime / (pp * makespan) : 0.0; }
  bool ok = true;                // false when the op orders deadlock (never for valid input)
};

// Simulates the schedule; forward and backward are the full stage's times (divided by v per
// chunk for interleaved). Inputs are assumed valid (pp >= 1, m >= 1, interleaved m % pp == 0).
ScheduleTimeline simulateSchedule(stagecraft::config::Schedule schedule, int pp, int virtualStages,
                                  int microBatches, double forward = 1.0, double backward = 2.0);
