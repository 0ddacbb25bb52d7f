// GradReducer: data-parallel gradient reduction in buckets, each started while the backward pass
// still runs — as soon as the last micro-batch's backward has finished every layer in it — so
// that communication hides behind the remaining layers' compute (parallel.overlap_grad_reduce).
//
// Buckets: whole parameter slots of the stage's flat gradient buffer (gpt_stage.h), taken in the
// order the backward finishes them (the last layer first, i.e. descending offsets), each closed
// once it holds parallel.grad_bucket_mb. Every DP rank of the same (tp, pp) position has the
// same slots and runs the same schedule, so all of them start the same buckets in the same
// order, which the collectives need.
//
// Per step: begin_step(); layer_done(L) from the backward (GptStage::backward's LayerDone) for
// every layer once its gradient is final; finish() starts every bucket not started yet (the
// embeddings, the final LayerNorm, the head: their gradients are final only at the end, and the
// tied embedding's cross-stage sum must come first), in bucket order, and waits for all.
// Gradients hold the DP sum afterwards, not the mean (the caller scales).
//
// Memory: where the group takes device memory (NCCL) or the host can reach the device's (the
// CPU), buckets are reduced in place; otherwise (a GPU with Gloo) each bucket is copied to a host
// buffer when it starts and back in finish().
//
// Not thread-safe; one per trainer.
#pragma once

#include <cstddef>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/comm_group.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/gpt_stage.h"

namespace stagecraft::runtime {

struct GradBucket {
  size_t begin = 0, end = 0;     // floats of the flat gradient buffer, [begin, end)
  std::vector<int> layers;       // transformer layers with a slot in it
  bool ends_early = true;        // holds only layer slots, so layer_done can start it
};

// The buckets over `slots` (contiguous, ascending offsets, as GptStage lays them out), in the
// order the backward finishes them; each holds whole slots and at least `bucket_floats` floats
// unless it is the last. bucket_floats 0 gives one bucket per slot.
std::vector<GradBucket> plan_grad_buckets(const std::vector<ParamSlot>& slots, size_t bucket_floats);

class GradReducer {
 public:
  // `group` and `device` must outlive the reducer; `grads` is the stage's flat gradient buffer.
  GradReducer(CommGroup& group, Device& device, float* grads, std::vector<GradBucket> buckets);
  // Waits for buckets still under way (a step that failed half-way), so that none writes into
  // gradients freed after it.
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  const std::vector<GradBucket>& buckets() const { return buckets_; }

  // Every bucket waits again for its layers.
  void begin_step();
  // Layer `layer`'s gradient is final: starts every bucket now complete, in bucket order.
  Status layer_done(int layer);
  // Starts the buckets not started yet, in bucket order, and waits for all of them.
  Status finish();
  // Buckets started by layer_done in the step that finish() ended (for tests and timing).
  int started_early() const { return started_early_; }

 private:
  Status start(size_t b);

  CommGroup& group_;
  Device& device_;
  float* grads_;
  std::vector<GradBucket> buckets_;
  std::vector<int> waiting_;                   // per bucket: layers not done yet
  std::vector<bool> started_;
  std::vector<std::vector<size_t>> of_layer_;  // layer -> buckets holding its slots
  bool staged_;                                // through host copies
  std::vector<std::vector<float>> host_;       // per bucket, when staged
  int started_early_ = 0, early_this_step_ = 0;
  bool in_flight_ = false;                     // started, not waited for
};

}  // namespace stagecraft::runtime
