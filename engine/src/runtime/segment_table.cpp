// SegmentTable: a segment list laid out and uploaded once. See segment_table.h.
#include "stagecraft/runtime/segment_table.h"

#include <algorithm>
#include <string>
#include <utility>

#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime {

Result<SegmentTable> SegmentTable::make(Device& device, std::vector<Segment> segments) {
  SegmentTable t;
  t.elements_ = cpu::layout_segments(segments.data(), segments.size());
  t.quads_ = std::all_of(segments.begin(), segments.end(),
                         [](const Segment& s) { return s.begin % 4 == 0 && s.moment % 4 == 0 && s.count % 4 == 0; });
  auto buf = Buffer<Segment>::make(device, segments.size());
  if (!buf.ok()) return buf.status().with_context("segment table of " + std::to_string(segments.size()) + " ranges");
  t.device_ = std::move(buf).value();
  if (!segments.empty()) {
    if (Status s = device.copy_from_host(t.device_.data(), segments.data(), t.device_.bytes()); !s) return s;
  }
  t.host_ = std::move(segments);
  return t;
}

}  // namespace stagecraft::runtime
