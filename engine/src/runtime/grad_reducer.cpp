// GradReducer: DP gradient buckets started during the backward. See grad_reducer.h.
#include "stagecraft/runtime/grad_reducer.h"

#include <algorithm>

namespace stagecraft::runtime {

std::vector<GradBucket> plan_grad_buckets(const std::vector<ParamSlot>& slots, size_t bucket_floats) {
  std::vector<GradBucket> buckets;
  GradBucket cur;
  bool open = false;
  for (auto it = slots.rbegin(); it != slots.rend(); ++it) {
    if (it->count == 0) continue;
    if (!open) {
      cur = GradBucket{};
      cur.end = it->offset + it->count;
      open = true;
    }
    cur.begin = it->offset;
    if (it->spec.place == model::Place::kLayer && !it->head_copy) {
      if (std::find(cur.layers.begin(), cur.layers.end(), it->spec.layer) == cur.layers.end()) cur.layers.push_back(it->spec.layer);
    } else {
      cur.ends_early = false;
    }
    if (cur.end - cur.begin >= bucket_floats) {
      buckets.push_back(std::move(cur));
      open = false;
    }
  }
  if (open) buckets.push_back(std::move(cur));
  return buckets;
}

GradReducer::GradReducer(CommGroup& group, Device& device, float* grads, std::vector<GradBucket> buckets)
    : group_(group), device_(device), grads_(grads), buckets_(std::move(buckets)) {
  staged_ = !group_.device_memory() && !device_.host_accessible();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (int layer : buckets_[b].layers) {
      if (layer < 0) continue;
      if (static_cast<size_t>(layer) >= of_layer_.size()) of_layer_.resize(static_cast<size_t>(layer) + 1);
      of_layer_[static_cast<size_t>(layer)].push_back(b);
    }
  }
  if (staged_) {
    host_.resize(buckets_.size());
    for (size_t b = 0; b < buckets_.size(); ++b) host_[b].resize(buckets_[b].end - buckets_[b].begin);
  }
  begin_step();
}

GradReducer::~GradReducer() {
  if (in_flight_) (void)group_.wait_all_reduces();
}

void GradReducer::begin_step() {
  waiting_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) waiting_[b] = static_cast<int>(buckets_[b].layers.size());
  started_.assign(buckets_.size(), false);
  early_this_step_ = 0;
}

Status GradReducer::start(size_t b) {
  started_[b] = true;
  in_flight_ = true;
  const GradBucket& k = buckets_[b];
  const size_t n = k.end - k.begin;
  if (!staged_) return group_.all_reduce_sum_start(grads_ + k.begin, n);
  if (Status s = device_.copy_to_host(host_[b].data(), grads_ + k.begin, n * sizeof(float)); !s) return s;
  return group_.all_reduce_sum_start(host_[b].data(), n);
}

Status GradReducer::layer_done(int layer) {
  if (layer < 0 || static_cast<size_t>(layer) >= of_layer_.size()) return Status::OK();
  for (size_t b : of_layer_[static_cast<size_t>(layer)]) {
    if (waiting_[b] > 0) --waiting_[b];
  }
  // Buckets complete now, in bucket order (the same on every DP rank).
  for (size_t b : of_layer_[static_cast<size_t>(layer)]) {
    if (started_[b] || waiting_[b] > 0 || !buckets_[b].ends_early) continue;
    if (Status s = start(b); !s) return s;
    ++early_this_step_;
  }
  return Status::OK();
}

Status GradReducer::finish() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (started_[b]) continue;
    if (Status s = start(b); !s) return s;
  }
  Status waited = group_.wait_all_reduces();
  in_flight_ = false;
  if (!waited) return waited;
  started_early_ = early_this_step_;
  if (staged_) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const GradBucket& k = buckets_[b];
      if (Status s = device_.copy_from_host(grads_ + k.begin, host_[b].data(), (k.end - k.begin) * sizeof(float)); !s) return s;
    }
  }
  return Status::OK();
}

}  // namespace stagecraft::runtime
