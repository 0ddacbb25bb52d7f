// Trainer's checkpoints: starting from the seed, a model's weights or a checkpoint (any layout
// wrote it), and saving one, the model and the AdamW state gathered to world rank 0 (the experts
// from the ranks of expert-dp replica 0). See trainer.h and checkpoint.h.
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "stagecraft/config/config_io.h"
#include "stagecraft/runtime/checkpoint.h"
#include "stagecraft/runtime/trainer.h"

namespace stagecraft::runtime {

namespace {

// ZeRO's optimizer state to the host: each rank of `group` holds its shard of it on `dev`, at most
// `per` floats (a short last one is padded with zeros here), gathered on every rank into `out`'s
// first n floats.
Status gather_shards_to_host(CommGroup& group, Device& dev, const Buffer<float>& shard, size_t per, float* out, size_t n) {
  std::vector<float> mine(per, 0.0f), all(per * static_cast<size_t>(group.size()));
  if (Status s = dev.copy_to_host(mine.data(), shard.data(), shard.bytes()); !s) return s;
  if (Status s = all_gather_host(group, dev, mine.data(), all.data(), per); !s) return s;
  std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), out);
  return Status::OK();
}

}  // namespace

Status Trainer::start() {
  if (config_.train.resume.empty()) {
    step_ = 0;
    std::vector<float> full(stage_->num_params());
    if (config_.train.init.empty()) {
      if (!params_sharded()) return stage_->init_parameters(config_.train.seed);
      if (Status s = stage_->initial_parameters(config_.train.seed, full.data()); !s) return s;
      if (Status s = stage_->init_expert_parameters(config_.train.seed); !s) return s;
      return put_params(full.data());
    }
    // A fresh run from a model's weights: the optimizer starts empty, at step 0.
    auto weights = read_model_dir(config_.train.init, config_.model);
    if (!weights.ok()) return weights.status().with_context("train.init=" + config_.train.init);
    if (Status s = load_shards(*stage_, weights.value(), "", full.data()); !s) return s.with_context("train.init=" + config_.train.init);
    std::vector<float> experts(stage_->num_expert_params());
    if (Status s = load_expert_shards(*stage_, weights.value(), "", experts.data()); !s) return s.with_context("train.init=" + config_.train.init);
    if (Status s = stage_->upload_expert_params(experts.data()); !s) return s;
    return put_params(full.data());
  }
  auto ck = read_checkpoint(config_.train.resume, config_.model, true);
  if (!ck.ok()) return ck.status().with_context("train.resume=" + config_.train.resume);
  std::vector<float> full(stage_->num_params());
  if (Status s = load_shards(*stage_, ck->model, "", full.data()); !s) return s.with_context("train.resume=" + config_.train.resume);
  if (Status s = put_params(full.data()); !s) return s;
  std::vector<float> experts(stage_->num_expert_params());
  if (Status s = load_expert_shards(*stage_, ck->model, "", experts.data()); !s) return s.with_context("train.resume=" + config_.train.resume);
  if (Status s = stage_->upload_expert_params(experts.data()); !s) return s;
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
    if (Status s = load_expert_shards(*stage_, ck->optimizer, prefix, experts.data()); !s) return s.with_context("train.resume=" + config_.train.resume);
    auto& moments = std::string(prefix) == "exp_avg." ? expert_avg_ : expert_avg_sq_;
    if (!experts.empty()) {  // all of them, or this rank's shard (the padding stays zero)
      const size_t count = expert_shard_.end - expert_shard_.begin;
      if (Status s = dev_->copy_from_host(moments.data(), experts.data() + expert_shard_.begin, count * sizeof(float)); !s) return s;
    }
  }
  for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
    if (Status s = load_shards(*stage_, ck->optimizer, prefix, full.data()); !s) return s.with_context("train.resume=" + config_.train.resume);
    auto& dst = std::string(prefix) == "exp_avg." ? exp_avg_ : exp_avg_sq_;
    if (shards_) {
      if (Status s = shards_->scatter_full(full.data(), dst.data()); !s) return s;
    } else if (Status s = dev_->copy_from_host(dst.data(), full.data() + shard_begin_, dst.bytes()); !s) {
      return s;
    }
  }
  step_ = ck->state.step;
  tokens_ = ck->state.tokens;
  skipped_ = ck->state.skipped_steps;
  if (scaler_) scaler_->restore(ck->state.loss_scale, ck->state.loss_scale_clean_steps);
  return Status::OK();
}

Result<std::string> Trainer::save_checkpoint() {
  // Moments of the whole local parameter set (zero 1, 2 and 3: gathered over dp x cp first; zero
  // 3 the parameters too).
  const size_t n = stage_->num_params();
  std::vector<float> m_full(n), v_full(n), params(n);
  if (params_sharded()) {
    if (Status s = shards_->gather_full(shards_->param_shard(), params.data()); !s) return s;
  } else if (Status s = stage_->download_params(params.data()); !s) {
    return s;
  }
  if (shards_) {
    if (Status s = shards_->gather_full(exp_avg_.data(), m_full.data()); !s) return s;
    if (Status s = shards_->gather_full(exp_avg_sq_.data(), v_full.data()); !s) return s;
  } else if (config_.parallel.zero >= 1 && grad_size_ > 1) {
    for (auto [dst, src] : {std::pair{&m_full, &exp_avg_}, std::pair{&v_full, &exp_avg_sq_}}) {
      if (Status s = gather_shards_to_host(*groups_.grad, *dev_, *src, shard_per_, dst->data(), n); !s) return s;
    }
  } else {
    if (Status s = dev_->copy_to_host(m_full.data(), exp_avg_.data(), exp_avg_.bytes()); !s) return s;
    if (Status s = dev_->copy_to_host(v_full.data(), exp_avg_sq_.data(), exp_avg_sq_.bytes()); !s) return s;
  }
  // Every (tp, pp) rank of DP replica 0 sends its parameters and moments to world rank 0, which
  // knows each one's layout from the rank layout.
  CommGroup* world = groups_.world;
  const uint32_t kTag = 0x7fff0000u;
  std::map<std::string, NamedTensor> model_full, opt_full;
  if (rank_ == 0) {
    add_shards(*stage_, params.data(), "", model_full);
    add_shards(*stage_, m_full.data(), "exp_avg.", opt_full);
    add_shards(*stage_, v_full.data(), "exp_avg_sq.", opt_full);
  }
  // Every (tp, pp) rank of DP replica 0 sends to world rank 0, in (pp, tp) order.
  for (int pp_rank = 0; pp_rank < pp_; ++pp_rank) {
    for (int tp_rank = 0; tp_rank < tp_; ++tp_rank) {
      const int src = replica0_ranks_[static_cast<size_t>(pp_rank * tp_ + tp_rank)];
      if (src <= 0) continue;
      if (rank_ == src) {
        if (Status s = send_host(*world, *dev_, params.data(), n, 0, kTag + 0); !s) return s;
        if (Status s = send_host(*world, *dev_, m_full.data(), n, 0, kTag + 1); !s) return s;
        if (Status s = send_host(*world, *dev_, v_full.data(), n, 0, kTag + 2); !s) return s;
      } else if (rank_ == 0) {
        // The sender's layout: a stage of its (tp, pp) coordinates.
        StageSpec spec = stage_spec(tp_rank, pp_rank);
        spec.flash_attention = false;  // a host stage, for its parameter layout only
        spec.bf16_activations = false;
        spec.cp = 1;  // the parameters are the same on every cp rank
        spec.cp_rank = 0;
        spec.ep = 1;  // the dense parameters are the same on every ep rank
        spec.ep_rank = 0;
        auto other = GptStage::create(spec, nullptr);
        if (!other.ok()) return other.status();
        const size_t on = other.value()->num_params();
        std::vector<float> p(on), mm(on), vv(on);
        if (Status s = recv_host(*world, *dev_, p.data(), on, src, kTag + 0); !s) return s;
        if (Status s = recv_host(*world, *dev_, mm.data(), on, src, kTag + 1); !s) return s;
        if (Status s = recv_host(*world, *dev_, vv.data(), on, src, kTag + 2); !s) return s;
        add_shards(*other.value(), p.data(), "", model_full);
        add_shards(*other.value(), mm.data(), "exp_avg.", opt_full);
        add_shards(*other.value(), vv.data(), "exp_avg_sq.", opt_full);
      }
    }
  }
  // The experts: every (pp, ep) rank of expert-data-parallel replica 0 sends its experts and their
  // moments to world rank 0 (rank 0 holds replica 0's first ones itself).
  if (!moe_layers_.empty()) {
    const size_t ne = stage_->num_expert_params();
    std::vector<float> ex(ne), em(ne), ev(ne);
    if (Status s = stage_->download_expert_params(ex.data()); !s) return s;
    for (auto [dst, src] : {std::pair{&em, &expert_avg_}, std::pair{&ev, &expert_avg_sq_}}) {
      if (!expert_shard_.on) {
        if (Status s = dev_->copy_to_host(dst->data(), src->data(), src->bytes()); !s) return s;
        continue;
      }
      // ZeRO: the moments' shards gathered over expert-dp (every rank takes part).
      if (Status s = gather_shards_to_host(*expert_dp_, *dev_, *src, expert_shard_.per, dst->data(), ne); !s) return s;
    }
    if (rank_ == 0) {
      add_expert_shards(*stage_, ex.data(), "", model_full);
      add_expert_shards(*stage_, em.data(), "exp_avg.", opt_full);
      add_expert_shards(*stage_, ev.data(), "exp_avg_sq.", opt_full);
    }
    for (int pp_rank = 0; pp_rank < pp_; ++pp_rank) {
      for (int e = 0; e < ep_; ++e) {
        const int src = expert_replica0_.empty() ? replica0_ranks_[static_cast<size_t>(pp_rank * tp_)]
                                                 : expert_replica0_[static_cast<size_t>(pp_rank * ep_ + e)];
        if (src <= 0) continue;
        if (rank_ == src) {
          if (Status s = send_host(*world, *dev_, ex.data(), ne, 0, kTag + 3); !s) return s;
          if (Status s = send_host(*world, *dev_, em.data(), ne, 0, kTag + 4); !s) return s;
          if (Status s = send_host(*world, *dev_, ev.data(), ne, 0, kTag + 5); !s) return s;
        } else if (rank_ == 0) {
          StageSpec spec = stage_spec(0, pp_rank);
          spec.flash_attention = false;
          spec.bf16_activations = false;
          spec.cp = 1;
          spec.cp_rank = 0;
          spec.ep_rank = e;
          auto other = GptStage::create(spec, nullptr, nullptr, nullptr, nullptr);
          if (!other.ok()) return other.status();
          const size_t on = other.value()->num_expert_params();
          std::vector<float> p(on), mm(on), vv(on);
          if (Status s = recv_host(*world, *dev_, p.data(), on, src, kTag + 3); !s) return s;
          if (Status s = recv_host(*world, *dev_, mm.data(), on, src, kTag + 4); !s) return s;
          if (Status s = recv_host(*world, *dev_, vv.data(), on, src, kTag + 5); !s) return s;
          add_expert_shards(*other.value(), p.data(), "", model_full);
          add_expert_shards(*other.value(), mm.data(), "exp_avg.", opt_full);
          add_expert_shards(*other.value(), vv.data(), "exp_avg_sq.", opt_full);
        }
      }
    }
  }
  const std::string path = checkpoint_path(config_.train.checkpoint_dir, step_);
  if (rank_ == 0) {
    std::vector<NamedTensor> model_tensors, opt_tensors;
    for (const auto& p : model::ModelDesc::from(config_.model).params()) {
      auto it = model_full.find(p.name);
      if (it == model_full.end()) return Status::internal("checkpoint: no rank sent " + p.name);
      model_tensors.push_back(std::move(it->second));
      for (const char* prefix : {"exp_avg.", "exp_avg_sq."}) {
        auto jt = opt_full.find(prefix + p.name);
        if (jt != opt_full.end()) opt_tensors.push_back(std::move(jt->second));
      }
    }
    TrainerState state;
    state.step = step_;
    state.seed = config_.train.seed;
    state.tokens = tokens_;
    if (scaler_) {
      state.loss_scale = scaler_->scale();
      state.loss_scale_clean_steps = scaler_->clean_steps();
      state.skipped_steps = skipped_;
    }
    config::RunConfig saved = config_;
    saved.train.resume.clear();
    if (Status s = write_checkpoint(path, config_.model, config::to_yaml(saved), model_tensors, opt_tensors, state); !s) return s;
  }
  // Nobody moves on (or exits) before rank 0 has written.
  double token = 0;
  if (Status s = all_reduce_host(*world, *dev_, &token, 1); !s) return s;
  return path;
}

}  // namespace stagecraft::runtime
