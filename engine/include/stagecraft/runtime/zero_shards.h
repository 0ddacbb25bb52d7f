// ZeroShards: the gradients (parallel.zero 2) or the parameters and gradients (zero 3) of one
// stage, sharded over the gradient group (dp x cp), as the GptStage's UnitStorage (gpt_stage.h).
//
// Shards: the stage's flat layout is cut into shard groups, each a run of whole ParamUnits; group
// g of n_g floats gives each of the d ranks per_g = ceil(n_g / d) of them, rank r the floats
// [begin_g + r per_g, begin_g + (r + 1) per_g) clipped to the group. A rank stores its pieces one
// after another, each padded to per_g (the padding stays zero), so a collective over a group
// reads or writes (d x per_g) in rank order. Zero 3: one group per unit, so that a layer's
// parameters gather alone. Zero 2: the layers of one chunk in runs of at least
// parallel.grad_bucket_mb (closed from the chunk's last layer down, the backward's order), and
// every tensor outside the layers alone, so the tied token embedding's two copies (first and last
// stage) shard alike and their gradients add shard by shard.
//
// A micro-batch's backward (zero 2 and 3): the stage acquires a unit's gradients for its
// backward; the group's (d x per_g) gradient buffer is made zeroed on its first unit, and once
// every unit of the group has been released it is reduce-scattered and this rank's block added to
// the fp32 gradient shard, which accumulates over the step's micro-batches (DeepSpeed's ZeRO-2);
// the buffer is then freed. Zero 3 also gathers a unit's parameters (all-gather of every rank's
// piece) into a buffer of its own before each forward and each backward (with the recomputed
// forward), on every micro-batch, and frees it after; with bf16 activations it rounds them to a
// bf16 copy there.
//
// Overlap, where the group reaches the device's memory (the CPU; NCCL on a GPU): collectives go
// to the background (CommGroup's *_start: Gloo's own thread, NCCL's second stream), and each
// acquire first waits for what is under way, then starts the next: the reduce-scatters of the
// groups completed since the last acquire (so a bucket reduces while the next unit computes) and,
// for zero 3, the gather of the unit that comes next. Which unit comes next is the first step's
// order of acquires, recorded: the schedule repeats it every step on every rank of the group, so
// every rank starts the same collectives in the same order. So at most one gathered unit waits
// beside the one in use, and one bucket reduces beside the one filling. flush() ends the step's
// background work. Where the group takes host memory and the device is not the host's (Gloo on a
// GPU), or without parallel.overlap_grad_reduce, every collective runs at once (staged through
// host copies in the first case).
//
// What it is not: the optimizer. The trainer reads grad_shard(), the shard's segments
// (segments_of) and, for zero 3, param_shard(); for zero 2 it gathers the updated parameters back
// into the stage with all_gather_params.
//
// Not thread-safe; one per trainer. The group, device and stage must outlive it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/comm_group.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/gpt_stage.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime {

struct ShardGroup {
  size_t begin = 0, end = 0;  // floats of the stage's flat layout
  size_t per = 0;             // ceil((end - begin) / d): one rank's piece, padded
  size_t offset = 0;          // where this rank's piece starts in the shard buffers
  std::vector<int> units;     // the stage's units in it, ascending
};

// The shard groups of `units` (zero 2: `bucket_floats` as above; zero 3: one per unit) over `d`
// ranks, ascending. `chunk_of_layer` gives each layer's chunk (zero 2 groups no two chunks).
std::vector<ShardGroup> plan_shard_groups(const std::vector<ParamUnit>& units, int zero, size_t bucket_floats, int d,
                                          const std::vector<int>& chunk_of_layer);

class ZeroShards final : public UnitStorage {
 public:
  // Sharding `stage`'s units (zero 2 or 3) over `group` (size d, this rank its rank()). Allocates
  // the gradient shard and, for zero 3, the parameter shard (zeroed); then hands the stage's
  // gradients (and parameters) to this storage. `overlap`: collectives in the background where
  // the group allows. Fails as the device's allocation does.
  static Result<std::unique_ptr<ZeroShards>> create(GptStage& stage, CommGroup& group, Device& device, int zero,
                                                    size_t bucket_floats, bool overlap);
  // Waits for collectives still under way (a step that failed half-way).
  ~ZeroShards() override;

  const std::vector<ShardGroup>& groups() const { return groups_; }
  size_t shard_size() const { return shard_size_; }  // floats: the sum of per over the groups
  float* grad_shard() { return grads_.data(); }      // (shard_size), summed over the group's ranks
  float* param_shard() { return params_.data(); }    // zero 3: (shard_size); else nullptr
  // This rank's pieces of `slot` as segments of the shard buffers (begin = moment = the shard
  // index, the slot's weight decay).
  std::vector<Segment> segments_of(const ParamSlot& slot) const;
  // The shard piece that holds the unit of the tensor at flat `offset`: [first, first + count).
  std::pair<size_t, size_t> group_piece(size_t offset) const;

  // Zeroes the gradient shard and starts the step's buffer peak.
  Status begin_step();
  // Starts the reduce-scatters still waiting, waits for everything under way and adds the last
  // blocks to the gradient shard: call after the step's schedule, before reading grad_shard().
  Status flush();
  // Acquires that found their unit gathered ahead, this step, and acquires a step makes (known
  // after the first step, 0 before): for tests and timing.
  int prefetched() const { return prefetched_; }
  int acquires_per_step() const { return order_known_ ? static_cast<int>(order_.size()) : 0; }
  // Every unit released: fails where a step ended with a unit still held.
  Status check_idle() const;

  // Full flat layout (host, num_params floats) <-> this rank's shard (device, shard_size):
  // scatter_full takes this rank's pieces, gather_full all-gathers every rank's (every rank of the
  // group must call it).
  Status scatter_full(const float* full_host, float* shard) const;
  Status gather_full(const float* shard, float* full_host) const;
  // Zero 2: copies this rank's pieces of the stage's parameters into `shard` (shard_size), and
  // all-gathers them back into the stage from there, group by group.
  Status params_to_shard(const float* params, float* shard) const;
  Status all_gather_params(const float* shard, float* params);

  // Bytes held for good (gradient and parameter shards), and the most held at once by the
  // buffers of units in flight (gathered parameters, their bf16 copies, gradient buffers, the
  // reduce-scatter's block) since begin_step, and by all_gather_params's (d x per) buffer.
  size_t state_bytes() const { return grads_.bytes() + params_.bytes(); }
  size_t peak_unit_bytes() const { return peak_; }
  size_t gather_buffer_bytes() const;

  Result<View> acquire(int unit, Use use) override;
  Status release(int unit, Use use) override;

 private:
  ZeroShards(GptStage& stage, CommGroup& group, Device& device) : stage_(stage), group_(group), dev_(device) {}
  size_t group_of_unit(int unit) const { return unit_group_[static_cast<size_t>(unit)]; }
  size_t piece_count(const ShardGroup& g) const;  // the unpadded floats of this rank's piece
  void account(ptrdiff_t bytes);
  Status settle();                            // waits for the background work, adds its blocks
  Status start_reduce(size_t group);          // the group's reduce-scatter (at once when not async)
  Status gather(int unit, Buffer<float>& into, bool background);  // a unit's parameters, (d x per)

  GptStage& stage_;
  CommGroup& group_;
  Device& dev_;
  int zero_ = 2, d_ = 1, rank_ = 0;
  bool low_ = false;  // bf16 activations: a gathered unit gets a bf16 copy
  std::vector<ShardGroup> groups_;
  std::vector<size_t> unit_group_;
  size_t shard_size_ = 0;
  Buffer<float> grads_, params_;
  // In flight, per unit (gathered parameters, bf16 copy) and per group (gradients and how many of
  // its units still hold them).
  struct Held {
    Buffer<float> params;
    Buffer<bf16> low;
    bool held = false;
  };
  std::vector<Held> held_;
  std::vector<Buffer<float>> group_grads_;
  std::vector<int> group_waiting_;
  size_t live_ = 0, peak_ = 0;
  bool async_ = false;             // the group reaches the device's memory: background collectives
  bool under_way_ = false;         // background work started and not waited for
  std::vector<size_t> ready_;      // groups whose gradients are complete, reduce-scatter not started
  struct Reducing {
    size_t group = 0;
    Buffer<float> grads, block;    // (d x per), (per)
  };
  std::vector<Reducing> reducing_;  // started in the background
  std::vector<int> order_;          // the first step's acquires (zero 3: the units gathered), in order
  bool order_known_ = false;
  size_t next_ = 0;                 // this step's acquires so far
  int prefetch_unit_ = -1;          // the unit gathered ahead into prefetch_
  Buffer<float> prefetch_;
  int prefetched_ = 0;
};

}  // namespace stagecraft::runtime
