// SegmentTable: a list of segments of one flat buffer (kernels.h's Segment), laid out and copied
// once to a device, for the Ops calls over many ranges in one launch (ops.h: SegmentList,
// adamw_update_segments, sum_of_squares_segments).
//
// What this is: an owned, immutable table. The trainer builds two when it is created (the global
// norm's ranges and AdamW's, clipped to its ZeRO shard) and passes list() on every step, so a
// step neither rebuilds nor uploads them. What it is not: a view that follows the parameters; a
// new layout needs a new table.
//
// Thread safety: immutable after make(); list() may be used from any thread the device allows.
#pragma once

#include <cstddef>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime {

class SegmentTable {
 public:
  SegmentTable() = default;  // no segments: the Ops calls do nothing (the sum is 0)

  // Lays `segments` out in their order (layout_segments: each one's `first`) and copies them to
  // `device`. Fails as the device's allocate or copy_from_host fails. The device must outlive
  // the table.
  [[nodiscard]] static Result<SegmentTable> make(Device& device, std::vector<Segment> segments);

  // What the Ops segment calls take: the table in the device's memory and its element total.
  SegmentList list() const { return {device_.data(), device_.size(), elements_, quads_}; }
  // The same segments in host memory, laid out.
  const std::vector<Segment>& segments() const { return host_; }
  size_t elements() const { return elements_; }  // the sum of the segments' counts

 private:
  std::vector<Segment> host_;
  Buffer<Segment> device_;
  size_t elements_ = 0;
  bool quads_ = false;  // SegmentList::quads
};

}  // namespace stagecraft::runtime
