// GptStage's parameters apart from the layer code: their initialisation from the seed, host
// copies of the dense and the experts' buffers, the MoE statistics a step takes, and ZeRO's unit
// storage (where each unit's tensors lie while the stage runs it). See gpt_stage.h.
#include <algorithm>
#include <cstring>

#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/gpt_stage.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/rng.h"

namespace stagecraft::runtime {

void GptStage::bind_own(size_t unit) {
  const size_t at = units_[unit].begin;
  Bound& b = bound_[unit];
  b.params = params_.size() ? params_.data() + at : nullptr;
  b.params_low = weights_low_.size() ? weights_low_.data() + at : nullptr;
  b.grads = grads_.size() ? grads_.data() + at : nullptr;
}

void GptStage::set_unit_storage(UnitStorage* storage, bool params_too) {
  storage_ = storage;
  grads_ = Buffer<float>();
  if (params_too) {
    params_ = Buffer<float>();
    weights_low_ = Buffer<bf16>();
  }
  for (size_t u = 0; u < units_.size(); ++u) bind_own(u);
}

size_t GptStage::unit_at(size_t offset) const {
  const auto it = std::upper_bound(units_.begin(), units_.end(), offset, [](size_t o, const ParamUnit& u) { return o < u.begin; });
  return static_cast<size_t>(it - units_.begin()) - 1;
}

Status GptStage::use_unit(size_t unit, UnitStorage::Use use) {
  if (!storage_) return Status::OK();
  auto v = storage_->acquire(static_cast<int>(unit), use);
  if (!v.ok()) return v.status();
  bind_own(unit);
  Bound& b = bound_[unit];
  if (v->params) b.params = v->params;
  if (v->params_low) b.params_low = v->params_low;
  if (v->grads) b.grads = v->grads;
  return Status::OK();
}

Status GptStage::done_unit(size_t unit, UnitStorage::Use use) {
  if (!storage_) return Status::OK();
  bind_own(unit);
  return storage_->release(static_cast<int>(unit), use);
}

Status GptStage::use_layer(int layer, UnitStorage::Use use) {
  if (!storage_) return Status::OK();
  return use_unit(static_cast<size_t>(layer_unit_[static_cast<size_t>(layer)]), use);
}

Status GptStage::done_layer(int layer, UnitStorage::Use use) {
  if (!storage_) return Status::OK();
  return done_unit(static_cast<size_t>(layer_unit_[static_cast<size_t>(layer)]), use);
}

namespace {

// The units of `offsets` (kAbsent skipped), each once, ascending.
template <typename UnitAt>
std::vector<size_t> units_of(const std::vector<size_t>& offsets, size_t absent, UnitAt unit_at) {
  std::vector<size_t> units;
  for (size_t o : offsets) {
    if (o != absent) units.push_back(unit_at(o));
  }
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  return units;
}

}  // namespace

Status GptStage::use_ends(std::vector<size_t> offsets, UnitStorage::Use use) {
  if (!storage_) return Status::OK();
  for (size_t u : units_of(offsets, kAbsent, [this](size_t o) { return unit_at(o); })) {
    if (Status st = use_unit(u, use); !st) return st;
  }
  return Status::OK();
}

Status GptStage::done_ends(std::vector<size_t> offsets, UnitStorage::Use use) {
  if (!storage_) return Status::OK();
  for (size_t u : units_of(offsets, kAbsent, [this](size_t o) { return unit_at(o); })) {
    if (Status st = done_unit(u, use); !st) return st;
  }
  return Status::OK();
}

// A draw costs ~60 ns (Philox plus log and cos in double): 47 s on one thread for 774M parameters,
// so the values are drawn on every core, in pieces of 64K; each value depends on its index only
// (rng.h), so the result is the same on any number of threads.
Status GptStage::init_parameters(uint64_t seed) {
  std::unique_ptr<float[]> host(new (std::nothrow) float[num_params_]);  // every element is written below
  if (!host) return Status::unavailable("initialising parameters: no host memory for " + std::to_string(num_params_ * 4 >> 20) + " MiB of fp32 weights");
  if (Status st = initial_parameters(seed, host.get()); !st) return st;
  if (Status st = init_expert_parameters(seed); !st) return st;
  return upload_params(host.get());
}

Status GptStage::initial_parameters(uint64_t seed, float* host) const {
  for (const auto& s : slots_) {
    float* dst = host + s.offset;
    const auto& p = s.spec;
    const uint64_t stream = tensor_stream(p.name);
    if (p.init_std <= 0) {
      std::fill(dst, dst + s.count, p.init_value);
      continue;
    }
    cpu::detail::parallel_for(s.count, size_t(1) << 16, cpu::num_threads(), [&](size_t first, size_t last) {
      for (size_t i = first; i < last; ++i) {
        const int64_t full = model::full_index(p, spec_.tp, spec_.tp_rank, static_cast<int64_t>(i));
        dst[i] = static_cast<float>(p.init_std * rng_normal(seed, stream, static_cast<uint64_t>(full)));
      }
    });
  }
  return Status::OK();
}

Status GptStage::init_expert_parameters(uint64_t seed) {
  if (num_expert_params_ == 0) return Status::OK();
  std::vector<float> host(num_expert_params_);
  for (const auto& s : expert_slots_) {  // whole tensors: the element index is the full one
    const uint64_t stream = tensor_stream(s.spec.name);
    float* dst = host.data() + s.offset;
    cpu::detail::parallel_for(s.count, size_t(1) << 16, cpu::num_threads(), [&](size_t first, size_t last) {
      for (size_t i = first; i < last; ++i) dst[i] = static_cast<float>(s.spec.init_std * rng_normal(seed, stream, static_cast<uint64_t>(i)));
    });
  }
  return upload_expert_params(host.data());
}

Status GptStage::download_expert_params(float* host) const {
  return num_expert_params_ ? dev_->copy_to_host(host, expert_params_.data(), expert_params_.bytes()) : Status::OK();
}

Status GptStage::upload_expert_params(const float* host) {
  return num_expert_params_ ? dev_->copy_from_host(expert_params_.data(), host, expert_params_.bytes()) : Status::OK();
}

GptStage::MoeStats GptStage::take_moe_stats() {
  MoeStats st;
  for (auto& [layer, load] : moe_load_) {
    st.layers.push_back(layer);
    st.load.push_back(load);
    std::fill(load.begin(), load.end(), 0);
  }
  st.dropped = moe_dropped_;
  moe_dropped_ = 0;
  return st;
}

Status GptStage::zero_grads() {
  if (expert_grads_.size()) {
    if (Status st = dev_->fill_zero(expert_grads_.data(), expert_grads_.bytes()); !st) return st;
  }
  return grads_.size() ? dev_->fill_zero(grads_.data(), grads_.bytes()) : Status::OK();
}

Status GptStage::download_params(float* host) const {
  if (params_.size() != num_params_) return Status::internal("gpt: the parameters are held outside the stage (zero 3)");
  return dev_->copy_to_host(host, params_.data(), params_.bytes());
}
Status GptStage::upload_params(const float* host) {
  if (params_.size() != num_params_) return Status::internal("gpt: the parameters are held outside the stage (zero 3)");
  weights_low_stale_ = true;
  return dev_->copy_from_host(params_.data(), host, params_.bytes());
}

}  // namespace stagecraft::runtime
