// Segment lists for the kernel suites (tst_kernels on the CPU, tst_cuda on a GPU): the same
// placement in both, so the GPU's segment calls are checked on the lists the CPU suite checks.
#pragma once

#include <QList>

#include <vector>

#include "stagecraft/runtime/kernels.h"

namespace stagecraft::testing {

// Segments of the given counts placed in a flat buffer in order, (k % 3) x `unit` elements apart
// (so some elements belong to no segment), the first at `start`; every other one decays. Moments
// are indexed from `moment_base` (a ZeRO shard's begin; 0: as the parameters). Not laid out.
// *end is one past the last segment. With unit 4, and start, moment_base and the counts
// multiples of 4, the list is in quads (ops.h: SegmentList::quads).
inline std::vector<runtime::cpu::Segment> place_segments(const QList<int>& counts, size_t start, size_t moment_base, size_t* end,
                                                         size_t unit = 1) {
  std::vector<runtime::cpu::Segment> segs;
  size_t at = start;
  for (int k = 0; k < counts.size(); ++k) {
    at += size_t(k % 3) * unit;
    runtime::cpu::Segment s;
    s.begin = at;
    s.count = size_t(counts[k]);
    s.moment = at - moment_base;
    s.decay = k % 2 == 0;
    segs.push_back(s);
    at += s.count;
  }
  *end = at;
  return segs;
}

}  // namespace stagecraft::testing
