// Pipeline schedules: the order in which one pipeline rank runs the forward and backward passes
// of its model chunks over the micro-batches of a step.
//
//   gpipe        every forward, then every backward (GPipe, Huang et al. 2019)
//   1f1b         p - r - 1 warm-up forwards, then one forward one backward, then the remaining
//                backwards (PipeDream-Flush / Megatron; Narayanan et al. 2021)
//   interleaved  Megatron's interleaved 1F1B over v chunks per rank: virtual micro-batch k runs
//                local chunk (k / p) mod v (forward; v - 1 - that for backward) of micro-batch
//                (k / (p v)) p + k mod p, with (p - r - 1) x 2 + (v - 1) x p warm-up forwards.
//                Needs m to be a multiple of p.
// Chunk c (global stage id) runs on pp rank c mod p and is local chunk c / p there. A forward of
// chunk c > 0 receives its input from chunk c - 1's rank; a backward of chunk c < last receives
// its output gradient from chunk c + 1's rank. With sends that do not wait for the receiver
// (buffered), every schedule here completes on every rank: tests simulate all of them.
#pragma once

#include <vector>

#include "stagecraft/config/run_config.h"

namespace stagecraft::runtime {

struct PipeOp {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  int chunk = 0;  // global chunk (stage) id

  bool operator==(const PipeOp&) const = default;
};

// The ops of pp rank `pp_rank`, in order. virtual_stages is 1 except for kInterleaved.
std::vector<PipeOp> pipeline_schedule(config::Schedule schedule, int pp, int pp_rank, int virtual_stages, int micro_batches);

}  // namespace stagecraft::runtime
