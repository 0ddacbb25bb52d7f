// ZeroShards: ZeRO 2 and 3's shards of a stage. See zero_shards.h.
#include "stagecraft/runtime/zero_shards.h"

#include <algorithm>
#include <string>

namespace stagecraft::runtime {

std::vector<ShardGroup> plan_shard_groups(const std::vector<ParamUnit>& units, int zero, size_t bucket_floats, int d,
                                          const std::vector<int>& chunk_of_layer) {
  std::vector<ShardGroup> groups;
  auto chunk = [&](const ParamUnit& u) { return u.layer >= 0 ? chunk_of_layer[static_cast<size_t>(u.layer)] : -1; };
  // From the last unit down (the backward's order); a group takes the next unit while it is a
  // layer of the same chunk and the group is still under bucket_floats (zero 2 only).
  for (size_t i = units.size(); i-- > 0;) {
    const ParamUnit& u = units[i];
    if (zero == 2 && u.layer >= 0 && !groups.empty()) {
      ShardGroup& g = groups.back();
      const ParamUnit& prev = units[static_cast<size_t>(g.units.front())];
      if (prev.layer >= 0 && chunk(prev) == chunk(u) && g.end - g.begin < bucket_floats) {
        g.begin = u.begin;
        g.units.insert(g.units.begin(), static_cast<int>(i));
        continue;
      }
    }
    ShardGroup g;
    g.begin = u.begin;
    g.end = u.end;
    g.units = {static_cast<int>(i)};
    groups.push_back(std::move(g));
  }
  std::reverse(groups.begin(), groups.end());
  size_t offset = 0;
  for (ShardGroup& g : groups) {
    g.per = (g.end - g.begin + static_cast<size_t>(d) - 1) / static_cast<size_t>(d);
    g.offset = offset;
    offset += g.per;
  }
  return groups;
}

Result<std::unique_ptr<ZeroShards>> ZeroShards::create(GptStage& stage, CommGroup& group, Device& device, int zero,
                                                       size_t bucket_floats, bool overlap) {
  std::unique_ptr<ZeroShards> z(new ZeroShards(stage, group, device));
  z->zero_ = zero;
  z->d_ = group.size();
  z->rank_ = group.rank();
  z->low_ = stage.spec().bf16_activations;
  const StageSpec& spec = stage.spec();
  std::vector<int> chunk_of_layer(static_cast<size_t>(std::max(0, spec.model.layers)), -1);
  for (size_t c = 0; c < spec.chunks.size(); ++c) {
    for (int l = spec.chunk_first_layer[c]; l < spec.chunk_first_layer[c] + spec.chunk_layers[c]; ++l) {
      chunk_of_layer[static_cast<size_t>(l)] = spec.chunks[c];
    }
  }
  z->groups_ = plan_shard_groups(stage.param_units(), zero, bucket_floats, z->d_, chunk_of_layer);
  z->unit_group_.assign(stage.param_units().size(), 0);
  for (size_t g = 0; g < z->groups_.size(); ++g) {
    for (int u : z->groups_[g].units) z->unit_group_[static_cast<size_t>(u)] = g;
    z->shard_size_ = z->groups_[g].offset + z->groups_[g].per;
  }
  const std::string what = "zero " + std::to_string(zero) + " shards of " + std::to_string(z->shard_size_) + " floats";
  if (Status s = allocate_buffer(z->grads_, device, z->shard_size_, true); !s) return s.with_context(what);
  if (zero >= 3) {
    if (Status s = allocate_buffer(z->params_, device, z->shard_size_, true); !s) return s.with_context(what);
  }
  z->held_.resize(stage.param_units().size());
  z->group_grads_.resize(z->groups_.size());
  z->group_waiting_.assign(z->groups_.size(), 0);
  z->async_ = overlap && (device.host_accessible() || group.device_memory());
  stage.set_unit_storage(z.get(), zero >= 3);
  return z;
}

// A step that failed half-way may leave collectives under way: they finish before the buffers
// they write go.
ZeroShards::~ZeroShards() {
  if (under_way_) (void)group_.wait_all_reduces();
}

size_t ZeroShards::piece_count(const ShardGroup& g) const {
  const size_t first = g.begin + static_cast<size_t>(rank_) * g.per;
  return first >= g.end ? 0 : std::min(g.per, g.end - first);
}

std::vector<Segment> ZeroShards::segments_of(const ParamSlot& slot) const {
  std::vector<Segment> segs;
  for (const ShardGroup& g : groups_) {
    const size_t first = g.begin + static_cast<size_t>(rank_) * g.per;
    const size_t b = std::max(slot.offset, first), e = std::min({slot.offset + slot.count, first + piece_count(g)});
    if (b >= e) continue;
    Segment s;
    s.begin = g.offset + (b - first);
    s.count = e - b;
    s.moment = s.begin;
    s.decay = slot.spec.weight_decay;
    segs.push_back(s);
  }
  return segs;
}

std::pair<size_t, size_t> ZeroShards::group_piece(size_t offset) const {
  for (const ShardGroup& g : groups_) {
    if (offset >= g.begin && offset < g.end) return {g.offset, g.per};
  }
  return {0, 0};
}

void ZeroShards::account(ptrdiff_t bytes) {
  live_ = static_cast<size_t>(static_cast<ptrdiff_t>(live_) + bytes);
  peak_ = std::max(peak_, live_);
}

Status ZeroShards::begin_step() {
  if (Status s = flush(); !s) return s;
  if (Status s = check_idle(); !s) return s;
  if (next_ > 0) order_known_ = true;  // the first step recorded the order of acquires
  next_ = 0;
  prefetched_ = 0;
  peak_ = live_;
  return dev_.fill_zero(grads_.data(), grads_.bytes());
}

Status ZeroShards::check_idle() const {
  for (size_t u = 0; u < held_.size(); ++u) {
    if (held_[u].held) return Status::internal("zero: unit " + std::to_string(u) + " of the stage is still held");
  }
  if (under_way_ || !ready_.empty() || !reducing_.empty()) return Status::internal("zero: collectives still under way at the step's end");
  return Status::OK();
}

Status ZeroShards::settle() {
  if (!under_way_) return Status::OK();
  under_way_ = false;
  if (Status s = group_.wait_all_reduces(); !s) return s;
  for (Reducing& r : reducing_) {
    float* acc = grads_.data() + groups_[r.group].offset;
    dev_.ops().residual_forward(acc, acc, r.block.data(), groups_[r.group].per);
    account(-static_cast<ptrdiff_t>(r.grads.bytes() + r.block.bytes()));
  }
  reducing_.clear();
  return Status::OK();
}

Status ZeroShards::flush() {
  for (size_t g : ready_) {
    if (Status s = start_reduce(g); !s) return s;
  }
  ready_.clear();
  if (Status s = settle(); !s) return s;
  account(-static_cast<ptrdiff_t>(prefetch_.bytes()));
  prefetch_ = Buffer<float>();
  prefetch_unit_ = -1;
  return Status::OK();
}

// Reduce-scatters the group's gradient buffer; this rank's block is added to the shard at once,
// or by settle() when it runs in the background.
Status ZeroShards::start_reduce(size_t gi) {
  const ShardGroup& g = groups_[gi];
  Reducing r;
  r.group = gi;
  r.grads = std::move(group_grads_[gi]);
  if (Status s = allocate_buffer(r.block, dev_, g.per); !s) return s.with_context("zero: a reduce-scatter's block");
  account(static_cast<ptrdiff_t>(r.block.bytes()));
  if (async_) {
    if (Status s = group_.reduce_scatter_sum_start(r.grads.data(), r.block.data(), g.per); !s) return s;
    under_way_ = true;
    reducing_.push_back(std::move(r));
    return Status::OK();
  }
  if (Status s = reduce_scatter_on_device(group_, dev_, r.grads.data(), r.block.data(), g.per); !s) return s;
  float* acc = grads_.data() + g.offset;
  dev_.ops().residual_forward(acc, acc, r.block.data(), g.per);
  account(-static_cast<ptrdiff_t>(r.grads.bytes() + r.block.bytes()));
  return Status::OK();
}

Status ZeroShards::gather(int unit, Buffer<float>& into, bool background) {
  const ShardGroup& g = groups_[group_of_unit(unit)];  // zero 3: the group is the unit
  if (Status s = allocate_buffer(into, dev_, g.per * static_cast<size_t>(d_)); !s) return s.with_context("zero 3: gathering a layer's parameters");
  account(static_cast<ptrdiff_t>(into.bytes()));
  if (background) {
    under_way_ = true;
    return group_.all_gather_start(params_.data() + g.offset, into.data(), g.per);
  }
  return all_gather_on_device(group_, dev_, params_.data() + g.offset, into.data(), g.per);
}

Result<UnitStorage::View> ZeroShards::acquire(int unit, Use use) {
  Held& h = held_[static_cast<size_t>(unit)];
  if (h.held) return Status::internal("zero: unit " + std::to_string(unit) + " acquired twice");
  h.held = true;
  const ParamUnit& u = stage_.param_units()[static_cast<size_t>(unit)];
  const size_t gi = group_of_unit(unit);
  const ShardGroup& g = groups_[gi];
  // What ran in the background since the last acquire is done; this unit's parameters are here
  // (prefetched) or gathered now; then the next round starts behind the compute of this unit.
  if (Status s = settle(); !s) return s;
  if (zero_ >= 3) {
    if (prefetch_unit_ == unit) {
      h.params = std::move(prefetch_);
      ++prefetched_;
    } else {
      account(-static_cast<ptrdiff_t>(prefetch_.bytes()));
      prefetch_ = Buffer<float>();
      if (Status s = gather(unit, h.params, false); !s) return s;
    }
    prefetch_unit_ = -1;
  }
  for (size_t r : ready_) {
    if (Status s = start_reduce(r); !s) return s;
  }
  ready_.clear();
  if (!order_known_) order_.push_back(unit);
  const size_t at = next_++;
  if (zero_ >= 3 && async_ && order_known_ && at + 1 < order_.size()) {
    prefetch_unit_ = order_[at + 1];
    if (Status s = gather(prefetch_unit_, prefetch_, true); !s) return s;
  }
  View v;
  if (zero_ >= 3) {
    v.params = h.params.data();
    if (low_) {
      if (Status s = allocate_buffer(h.low, dev_, u.end - u.begin); !s) return s.with_context("zero 3: a layer's bf16 weights");
      account(static_cast<ptrdiff_t>(h.low.bytes()));
      dev_.ops().round_to_bf16(h.low.data(), h.params.data(), u.end - u.begin);
      v.params_low = h.low.data();
    }
  }
  if (use == Use::kBackward) {
    Buffer<float>& gb = group_grads_[gi];
    if (gb.size() == 0) {  // the group's first unit in this backward
      if (Status s = allocate_buffer(gb, dev_, g.per * static_cast<size_t>(d_), true); !s) {
        return s.with_context("zero: a gradient bucket");
      }
      account(static_cast<ptrdiff_t>(gb.bytes()));
      group_waiting_[gi] = static_cast<int>(g.units.size());
    }
    v.grads = gb.data() + (u.begin - g.begin);
  }
  return v;
}

Status ZeroShards::release(int unit, Use use) {
  Held& h = held_[static_cast<size_t>(unit)];
  if (!h.held) return Status::internal("zero: unit " + std::to_string(unit) + " released but not held");
  h.held = false;
  account(-static_cast<ptrdiff_t>(h.params.bytes() + h.low.bytes()));
  h.params = Buffer<float>();
  h.low = Buffer<bf16>();
  if (use != Use::kBackward) return Status::OK();
  const size_t gi = group_of_unit(unit);
  if (--group_waiting_[gi] > 0) return Status::OK();
  // Every unit of the group has its gradient of this micro-batch: reduce-scatter it (in the
  // background, from the next acquire on, where the group allows) and add this rank's block.
  if (async_) {
    ready_.push_back(gi);
    return Status::OK();
  }
  return start_reduce(gi);
}

Status ZeroShards::scatter_full(const float* full_host, float* shard) const {
  std::vector<float> mine(shard_size_, 0.0f);
  for (const ShardGroup& g : groups_) {
    const float* src = full_host + g.begin + static_cast<size_t>(rank_) * g.per;
    std::copy(src, src + piece_count(g), mine.begin() + static_cast<ptrdiff_t>(g.offset));
  }
  return dev_.copy_from_host(shard, mine.data(), shard_size_ * sizeof(float));
}

Status ZeroShards::gather_full(const float* shard, float* full_host) const {
  std::vector<float> mine(shard_size_), all(shard_size_ * static_cast<size_t>(d_));  // (S), (d x S)
  if (Status s = dev_.copy_to_host(mine.data(), shard, shard_size_ * sizeof(float)); !s) return s;
  if (Status s = all_gather_host(group_, dev_, mine.data(), all.data(), shard_size_); !s) return s;
  for (const ShardGroup& g : groups_) {
    for (int r = 0; r < d_; ++r) {
      const size_t first = g.begin + static_cast<size_t>(r) * g.per;
      if (first >= g.end) break;
      const float* src = all.data() + static_cast<size_t>(r) * shard_size_ + g.offset;
      std::copy(src, src + std::min(g.per, g.end - first), full_host + first);
    }
  }
  return Status::OK();
}

Status ZeroShards::params_to_shard(const float* params, float* shard) const {
  for (const ShardGroup& g : groups_) {
    const size_t count = piece_count(g);
    if (count == 0) continue;
    if (Status s = dev_.copy(shard + g.offset, params + g.begin + static_cast<size_t>(rank_) * g.per, count * sizeof(float)); !s) return s;
  }
  return Status::OK();
}

size_t ZeroShards::gather_buffer_bytes() const {
  size_t most = 0;
  for (const ShardGroup& g : groups_) most = std::max(most, g.per * static_cast<size_t>(d_));
  return sizeof(float) * most;
}

Status ZeroShards::all_gather_params(const float* shard, float* params) {
  size_t most = 0;
  for (const ShardGroup& g : groups_) most = std::max(most, g.per);
  Buffer<float> all;  // (d x per), the largest group's
  if (Status s = allocate_buffer(all, dev_, most * static_cast<size_t>(d_)); !s) return s.with_context("zero 2: gathering the parameters");
  for (const ShardGroup& g : groups_) {
    if (Status s = all_gather_on_device(group_, dev_, shard + g.offset, all.data(), g.per); !s) return s;
    if (Status s = dev_.copy(params + g.begin, all.data(), (g.end - g.begin) * sizeof(float)); !s) return s;
  }
  return Status::OK();
}

}  // namespace stagecraft::runtime
