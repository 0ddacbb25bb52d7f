// Trainer: schedule, gradient synchronisation, optimizer; starting and saving checkpoints are
// trainer_checkpoint.cpp. See trainer.h.
#include "stagecraft/runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>

#include "stagecraft/config/config_io.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/runtime/checkpoint.h"
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/pipeline_schedule.h"
#include "runtime/flash_tiles.h"

namespace stagecraft::runtime {

namespace {

// Message tags: (micro-batch, chunk, direction) -> unique within a step.
uint32_t tag(int mb, int chunk, int chunks, bool backward) {
  return static_cast<uint32_t>((mb * chunks + chunk) * 2 + (backward ? 1 : 0));
}

// Does this slot's gradient count in the global norm on this rank? The model description says
// (model::counts_in_norm): each parameter once over the tp ranks, the head's wte copy never.
bool counts_in_norm(const ParamSlot& s, int tp_rank) { return model::counts_in_norm(s.spec, tp_rank, s.head_copy); }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ZeRO's all-gather after the update: this rank's [begin, end) of `params` (n floats), padded to
// `per`, gathered from every rank of `group` (per x size) back into all n. Returns the bytes its two
// buffers held.
Result<size_t> gather_updated_shards(CommGroup& group, Device& dev, float* params, size_t n, size_t per, size_t begin, size_t end) {
  Buffer<float> mine, all;  // (per): this rank's shard, zero-padded; (size x per)
  if (Status s = allocate_buffer(mine, dev, per, true); !s) return s;
  if (Status s = allocate_buffer(all, dev, per * static_cast<size_t>(group.size())); !s) return s;
  if (Status s = dev.copy(mine.data(), params + begin, (end - begin) * sizeof(float)); !s) return s;
  if (Status s = all_gather_on_device(group, dev, mine.data(), all.data(), per); !s) return s;
  if (Status s = dev.copy(params, all.data(), n * sizeof(float)); !s) return s;
  return mine.bytes() + all.bytes();
}

}  // namespace

// A group that adds the time its calls take to the step's timing: collectives to `collective_ms`,
// receives to `recv_ms`, sends and wait_sends to `send_ms` (all into the trainer's StepTiming).
class Trainer::TimedGroup final : public CommGroup {
 public:
  TimedGroup(CommGroup* inner, const bool* on, double* collective_ms, double* recv_ms = nullptr, double* send_ms = nullptr)
      : inner_(inner), on_(on), collective_ms_(collective_ms), recv_ms_(recv_ms), send_ms_(send_ms) {}
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  bool device_memory() const override { return inner_->device_memory(); }
  Status all_reduce_sum(float* data, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->all_reduce_sum(data, count); });
  }
  Status all_reduce_sum(double* data, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->all_reduce_sum(data, count); });
  }
  Status reduce_scatter_sum(const float* in, float* out, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->reduce_scatter_sum(in, out, count); });
  }
  Status all_gather(const float* in, float* out, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->all_gather(in, out, count); });
  }
  Status all_to_all(const float* in, float* out, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->all_to_all(in, out, count); });
  }
  Status all_to_all_v(const float* in, const size_t* send_counts, float* out, const size_t* recv_counts) override {
    return timed(collective_ms_, [&] { return inner_->all_to_all_v(in, send_counts, out, recv_counts); });
  }
  Status send(const float* data, size_t count, int peer, uint32_t tag) override {
    return timed(send_ms_, [&] { return inner_->send(data, count, peer, tag); });
  }
  Status recv(float* data, size_t count, int peer, uint32_t tag) override {
    return timed(recv_ms_, [&] { return inner_->recv(data, count, peer, tag); });
  }
  Status wait_sends() override {
    return timed(send_ms_, [&] { return inner_->wait_sends(); });
  }
  Status recv_start(float* data, size_t count, int peer, uint32_t tag) override {
    return timed(recv_ms_, [&] { return inner_->recv_start(data, count, peer, tag); });
  }
  Status wait_recvs() override {
    return timed(recv_ms_, [&] { return inner_->wait_recvs(); });
  }
  Status all_reduce_sum_start(float* data, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->all_reduce_sum_start(data, count); });
  }
  Status reduce_scatter_sum_start(const float* in, float* out, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->reduce_scatter_sum_start(in, out, count); });
  }
  Status all_gather_start(const float* in, float* out, size_t count) override {
    return timed(collective_ms_, [&] { return inner_->all_gather_start(in, out, count); });
  }
  Status wait_all_reduces() override {
    return timed(collective_ms_, [&] { return inner_->wait_all_reduces(); });
  }

 private:
  template <typename F>
  Status timed(double* into, F&& call) {
    if (!*on_ || !into) return call();
    const auto t0 = std::chrono::steady_clock::now();
    Status s = call();
    *into += ms_since(t0);
    return s;
  }
  CommGroup* inner_;
  const bool* on_;
  double *collective_ms_, *recv_ms_, *send_ms_;
};

Trainer::Trainer() = default;
Trainer::~Trainer() = default;

Status Trainer::check(const config::RunConfig& config, const TokenData* data) {
  if (config.model.dropout > 0) {
    return Status::invalid_input("model.dropout: " + std::to_string(config.model.dropout).substr(0, 4) +
                                 ": Stagecraft's engine trains without dropout; set model.dropout: 0");
  }
  if (config.model.moe.enabled()) {
    if (!config.model.llama()) {
      return Status::invalid_input("model.moe: mixture-of-experts layers are the llama architecture's; set model.arch: llama, or model.moe.experts: 0");
    }
    if (config.parallel.expert_tp > 1) {
      return Status::invalid_input("parallel.expert_tp=" + std::to_string(config.parallel.expert_tp) +
                                   ": the engine trains whole experts (expert_tp 1; planning and exports take more); set parallel.expert_tp: 1");
    }
    if (config.backend == config::Backend::kCuda && config.train.precision == config::Precision::kBf16) {
      return Status::invalid_input("train.precision=bf16: the engine trains mixture-of-experts layers with fp32 activations; "
                                   "set train.precision: fp32 (train.tf32 for the tensor cores)");
    }
  }
  if (config.model.qk_norm) {
    return Status::invalid_input("model.qk_norm: the engine does not train q/k RMSNorm yet (it is planned, not run); set model.qk_norm: false to train");
  }
  if (config.model.head_dim != 0 && config.model.head_dim * config.model.heads != config.model.hidden) {
    return Status::invalid_input("model.head_dim=" + std::to_string(config.model.head_dim) +
                                 ": the engine trains heads x head_dim = hidden only (it is planned, not run); set model.head_dim: 0 to train");
  }
  if (config.parallel.tp_mode != config::TpMode::k1d) {
    return Status::invalid_input("parallel.tp_mode=" + std::string(config::to_string(config.parallel.tp_mode)) +
                                 ": the engine trains Megatron 1D tensor parallelism; 2d/2.5d/3d are planned, not run");
  }
  if (config.train.recompute == config::Recompute::kSelective) {
    return Status::invalid_input("train.recompute=selective: the engine recomputes none or full (selective is for planning); "
                                 "set train.recompute to none or full");
  }
  if (config.parallel.sequence_parallel && config.parallel.tp > 1) {
    return Status::invalid_input("parallel.sequence_parallel=true: the engine does not run sequence parallelism yet; set it to false");
  }
  // The CUDA fused attention's limit (GptStage::create refuses it on the GPU; this says so before
  // a launch). The CPU computes the same math unfused, for any head size.
  if (config.backend == config::Backend::kCuda && config.train.attention == config::Attention::kFlash &&
      config.model.hidden / config.model.heads > flash::kMaxHead) {
    return Status::invalid_input("train.attention=flash: head size " + std::to_string(config.model.hidden / config.model.heads) +
                                 " (model.hidden / model.heads) is above the CUDA fused kernel's " + std::to_string(flash::kMaxHead) +
                                 "; set train.attention: standard, or use more heads");
  }
  // The ring's block attention is not the fused kernel (GptStage::create refuses it on a device
  // that has one; this says so before a launch). The CPU's flash is the standard math.
  if (config.backend == config::Backend::kCuda && config.parallel.cp > 1 && config.parallel.cp_comm == config::CpComm::kRing &&
      config.train.attention == config::Attention::kFlash) {
    return Status::invalid_input("parallel.cp_comm=ring: the ring's block attention is not the fused kernel train.attention=flash asks for; "
                                 "set parallel.cp_comm: all_to_all, or train.attention: standard");
  }
  if (!data) return Status::OK();
  if (data->vocab_needed() > config.model.vocab) {
    return Status::invalid_input("model.vocab=" + std::to_string(config.model.vocab) + ": the data holds token ids up to " +
                                 std::to_string(data->vocab_needed() - 1) + "; raise model.vocab to at least " +
                                 std::to_string(data->vocab_needed()));
  }
  if (data->size() < static_cast<size_t>(config.model.seq_len) + 1) {
    return Status::invalid_input("train.data: " + std::to_string(data->size()) + " tokens, fewer than model.seq_len + 1 = " +
                                 std::to_string(config.model.seq_len + 1));
  }
  return Status::OK();
}

StageSpec Trainer::stage_spec(int tp_rank, int pp_rank) const {
  StageSpec spec;
  spec.model = config_.model;
  spec.micro_batch = config_.train.micro_batch;
  spec.full_recompute = config_.train.recompute == config::Recompute::kFull;
  // Fused attention where the backend has it (CUDA); the CPU computes the same math unfused.
  spec.flash_attention = config_.train.attention == config::Attention::kFlash && dev_ && dev_->ops().has_flash_attention();
  // bf16 on a device that computes it (it accepted set_precision in create): the GEMMs' inputs are
  // kept in bf16. The CPU engine trains in fp32.
  spec.bf16_activations = config_.train.precision == config::Precision::kBf16 && dev_ && !dev_->host_accessible();
  spec.tp = tp_;
  spec.tp_rank = tp_rank;
  spec.cp = cp_;
  spec.cp_rank = cp_rank_;
  spec.cp_ring = config_.parallel.cp_comm == config::CpComm::kRing;
  spec.pp = pp_;
  spec.ep = ep_;
  spec.ep_rank = ep_rank_;
  spec.num_chunks = static_cast<int>(chunks_.size());
  for (int c = pp_rank; c < spec.num_chunks; c += pp_) {  // chunk c runs on pp rank c mod pp
    spec.chunks.push_back(c);
    spec.chunk_first_layer.push_back(chunks_[static_cast<size_t>(c)].first);
    spec.chunk_layers.push_back(chunks_[static_cast<size_t>(c)].count);
  }
  return spec;
}

Result<std::unique_ptr<Trainer>> Trainer::create(const config::RunConfig& config, const RankLayout& layout, TrainerGroups groups,
                                                 const TokenData* data, Device* device) {
  if (!data) return Status::invalid_input("train.data: the run needs a data file");
  if (Status s = check(config, data); !s) return s;
  if (Status s = check_rank_layout(layout); !s) return s;
  if (!groups.world || !groups.tp || !groups.dp || !groups.pp) {
    return Status::invalid_input("trainer of rank " + std::to_string(layout.rank) + ": the world, tp, dp and pp groups are all needed");
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  t->rank_ = layout.rank;
  t->dp_ = layout.dp;
  t->tp_ = layout.tp;
  t->pp_ = layout.pp;
  t->v_ = layout.virtual_stages;
  t->m_ = layout.micro_batches;
  t->dp_rank_ = layout.dp_rank;
  t->tp_rank_ = layout.tp_rank;
  t->pp_rank_ = layout.pp_rank;
  t->cp_ = layout.cp;
  t->cp_rank_ = layout.cp_rank;
  t->ep_ = layout.ep;
  t->ep_rank_ = layout.ep_rank;
  if (layout.cp > 1 && !groups.cp) {
    return Status::invalid_input("trainer of rank " + std::to_string(layout.rank) + ": parallel.cp=" + std::to_string(layout.cp) +
                                 " needs the cp group");
  }
  // Every group through a timed wrapper, so the step's timing sees where its time went.
  StepTiming& tm = t->timing_;
  const bool* on = &t->record_timing_;
  auto wrap = [&](CommGroup* g, double* collective, double* recv = nullptr, double* send = nullptr) -> CommGroup* {
    if (!g) return nullptr;
    t->timed_.push_back(std::make_unique<TimedGroup>(g, on, collective, recv, send));
    return t->timed_.back().get();
  };
  t->groups_.world = wrap(groups.world, &tm.sync_ms, &tm.sync_ms, &tm.sync_ms);
  t->groups_.tp = wrap(groups.tp, &tm.tp_ms);
  t->groups_.dp = wrap(groups.dp, &tm.dp_ms);
  // Gradients reduce (and ZeRO shards) over dp x cp; with cp = 1 that is the dp group itself.
  t->groups_.grad = groups.grad && groups.grad != groups.dp ? wrap(groups.grad, &tm.dp_ms) : t->groups_.dp;
  t->groups_.cp = wrap(groups.cp, &tm.cp_ms, &tm.cp_ms, &tm.cp_ms);
  t->grad_size_ = t->groups_.grad->size();
  t->grad_rank_ = t->groups_.grad->rank();
  t->groups_.pp = wrap(groups.pp, &tm.dp_ms, &tm.pp_wait_ms, &tm.pp_send_ms);
  t->groups_.embedding = wrap(groups.embedding, &tm.dp_ms);
  // Mixture of experts: the dispatch's group (its time inside forward and backward) and the
  // experts' gradient group; none given is the gradient group itself (comm/process_groups.h makes
  // none where they are the same ranks).
  const bool moe = config.model.moe.enabled();
  if (moe && layout.ep > 1 && !groups.ep) {
    return Status::invalid_input("trainer of rank " + std::to_string(layout.rank) + ": parallel.ep=" + std::to_string(layout.ep) + " needs the ep group");
  }
  t->groups_.ep = wrap(groups.ep, &tm.ep_ms);
  t->groups_.expert_dp = groups.expert_dp ? wrap(groups.expert_dp, &tm.dp_ms) : nullptr;
  t->expert_dp_ = t->groups_.expert_dp ? t->groups_.expert_dp : t->groups_.grad;
  t->data_ = data;
  t->chunks_ = layout.chunks;
  t->replica0_ranks_ = layout.replica0_ranks;
  t->expert_replica0_ = layout.expert_replica0_ranks;
  t->dev_ = device ? device : &host_device();
  // fp16: the loss is scaled dynamically (loss_scaler.h) on every device; the CPU computes the
  // scaled gradients in fp32, which is how its suites check the scaler.
  if (config.train.precision == config::Precision::kFp16) t->scaler_.emplace();
  // The CPU engine computes in fp32 whatever the plan's precision (the planner's key); a GPU
  // computes what train.precision asks, or says it cannot.
  if (!config.train.fp32_residual && config.train.precision != config::Precision::kFp32) {
    return Status::invalid_input("train.fp32_residual=false: Stagecraft's engine keeps the residual stream in fp32 (the key plans other "
                                 "frameworks' runs); remove it to train here");
  }
  if (!t->dev_->host_accessible()) {
    if (Status s = t->dev_->set_precision(config.train.precision); !s) return s;
    if (Status s = t->dev_->set_tf32(config.train.tf32 && config.train.precision == config::Precision::kFp32); !s) return s;
    if (Status s = t->dev_->set_kernels(KernelShape::of(config)); !s) return s;
  }
  const StageSpec spec = t->stage_spec(t->tp_rank_, t->pp_rank_);
  auto stage = GptStage::create(spec, t->groups_.tp, t->dev_, t->groups_.cp, t->groups_.ep);
  if (!stage.ok()) return stage.status();
  t->stage_ = std::move(stage).value();
  const size_t n = t->stage_->num_params();
  t->shard_per_ = (n + static_cast<size_t>(t->grad_size_) - 1) / static_cast<size_t>(t->grad_size_);
  const auto bucket_floats = static_cast<size_t>(config.parallel.grad_bucket_bytes() / sizeof(float));
  // zero 2 and 3: the stage's gradients (and parameters) move into shards (zero_shards.h).
  if (config.parallel.zero >= 2 && t->grad_size_ > 1) {
    auto z = ZeroShards::create(*t->stage_, *t->groups_.grad, *t->dev_, config.parallel.zero, bucket_floats,
                                config.parallel.overlap_grad_reduce);
    if (!z.ok()) return z.status().with_context("rank " + std::to_string(layout.rank));
    t->shards_ = std::move(z).value();
  }
  if (config.parallel.zero == 1 && t->grad_size_ > 1) {
    t->shard_begin_ = std::min(n, t->shard_per_ * static_cast<size_t>(t->grad_rank_));
    t->shard_end_ = std::min(n, t->shard_begin_ + t->shard_per_);
  } else {
    t->shard_begin_ = 0;
    t->shard_end_ = n;
  }
  // The optimizer's ranges, every slot clipped to the shard, fixed for the trainer's life: the
  // update's (moments indexed from the shard's begin) and the global norm's, each parameter once
  // over the world (counts_in_norm; without zero every rank of the gradient group holds the same
  // gradients, so only its rank 0 adds, with zero each adds its own shard). Zero 2 and 3 index
  // the shard buffers (ZeroShards::segments_of).
  const bool zero = config.parallel.zero >= 1 && t->grad_size_ > 1;
  const bool adds_norm = zero || t->grad_rank_ == 0;
  std::vector<Segment> update, norm;
  for (const auto& s : t->stage_->param_slots()) {
    if (t->shards_) {
      for (const Segment& seg : t->shards_->segments_of(s)) {
        update.push_back(seg);
        if (counts_in_norm(s, t->tp_rank_)) norm.push_back(seg);
      }
      continue;
    }
    const size_t b = std::max(s.offset, t->shard_begin_), e = std::min(s.offset + s.count, t->shard_end_);
    if (b >= e) continue;
    Segment seg;
    seg.begin = b;
    seg.count = e - b;
    seg.moment = b - t->shard_begin_;
    seg.decay = s.spec.weight_decay;
    update.push_back(seg);
    if (adds_norm && counts_in_norm(s, t->tp_rank_)) norm.push_back(seg);
  }
  for (auto [table, segments] : {std::pair{&t->update_segments_, &update}, std::pair{&t->norm_segments_, &norm}}) {
    auto made = SegmentTable::make(*t->dev_, std::move(*segments));
    if (!made.ok()) return made.status().with_context("optimizer of rank " + std::to_string(layout.rank));
    *table = std::move(made).value();
  }
  // The experts' ranges: the expert buffer, updated by every rank (each its experts; with ZeRO
  // each expert-dp rank its shard of them, expert_shard_); the norm counts them once over the
  // expert-data-parallel group, which holds the same gradients.
  if (moe) {
    const size_t ne = t->stage_->num_expert_params();
    const size_t edp = static_cast<size_t>(t->expert_dp_->size());
    auto& sh = t->expert_shard_;
    sh.on = config.parallel.zero >= 1 && edp > 1;
    sh.per = sh.on ? (ne + edp - 1) / edp : ne;
    sh.begin = sh.on ? std::min(ne, static_cast<size_t>(t->expert_dp_->rank()) * sh.per) : 0;
    sh.end = std::min(ne, sh.begin + sh.per);
    std::vector<Segment> eu, en;
    for (const auto& s : t->stage_->expert_slots()) {
      Segment seg;
      seg.begin = seg.moment = s.offset;
      seg.count = s.count;
      seg.decay = s.spec.weight_decay;
      if (t->expert_dp_->rank() == 0) en.push_back(seg);
      // Clipped to the shard, the moments counted from its start.
      const size_t lo = std::max(s.offset, sh.begin), hi = std::min(s.offset + s.count, sh.end);
      if (lo >= hi) continue;
      seg.begin = lo;
      seg.moment = lo - sh.begin;
      seg.count = hi - lo;
      eu.push_back(seg);
    }
    for (auto [table, segments] : {std::pair{&t->expert_update_segments_, &eu}, std::pair{&t->expert_norm_segments_, &en}}) {
      auto made = SegmentTable::make(*t->dev_, std::move(*segments));
      if (!made.ok()) return made.status().with_context("optimizer of rank " + std::to_string(layout.rank));
      *table = std::move(made).value();
    }
    for (Buffer<float>* b : {&t->expert_avg_, &t->expert_avg_sq_}) {
      if (Status s = allocate_buffer(*b, *t->dev_, sh.per, true); !s) {
        return s.with_context("the experts' AdamW state of rank " + std::to_string(layout.rank));
      }
    }
    const model::ModelDesc d = model::ModelDesc::from(config.model);
    for (int l = 0; l < d.layers; ++l) {
      if (d.moe_layer(l)) t->moe_layers_.push_back(l);
    }
  }
  const size_t moments = t->shards_ ? t->shards_->shard_size() : t->shard_end_ - t->shard_begin_;
  for (Buffer<float>* b : {&t->exp_avg_, &t->exp_avg_sq_}) {
    if (Status s = allocate_buffer(*b, *t->dev_, moments, true); !s) return s.with_context("AdamW state of rank " + std::to_string(layout.rank));
  }
  // Overlapped DP buckets: plain data parallelism only (ZeRO's reduce-scatter runs after the
  // backward).
  if (t->grad_size_ > 1 && config.parallel.zero == 0 && config.parallel.overlap_grad_reduce) {
    t->reducer_ = std::make_unique<GradReducer>(*t->groups_.grad, *t->dev_, t->stage_->grads(),
                                                plan_grad_buckets(t->stage_->param_slots(), bucket_floats));
  }
  if (!t->dev_->host_accessible()) {
    const size_t n = static_cast<size_t>(config.train.micro_batch) * (config.model.seq_len / t->cp_) * config.model.hidden;
    for (Buffer<float>* b : {&t->io_in_, &t->io_out_}) {
      if (Status s = allocate_buffer(*b, *t->dev_, n); !s) return s.with_context("pipeline buffers of rank " + std::to_string(layout.rank));
    }
  }
  return t;
}

double Trainer::lr_at(int64_t step) const {
  const auto& t = config_.train;
  if (t.warmup_steps > 0 && step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  const double span = std::max<int64_t>(1, t.steps - t.warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - t.warmup_steps) / span, 0.0, 1.0);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

bool Trainer::params_sharded() const { return shards_ && shards_->param_shard(); }

Status Trainer::put_params(const float* full) {
  if (params_sharded()) return shards_->scatter_full(full, shards_->param_shard());
  return stage_->upload_params(full);
}

size_t Trainer::state_bytes() const {
  // The stage's flat buffers (zero 2: the parameters only; zero 3: none), the shards, AdamW's moments.
  return stage_->flat_bytes() + (shards_ ? shards_->state_bytes() : 0) + exp_avg_.bytes() + exp_avg_sq_.bytes() +
         stage_->weight_copy_bytes() + 2 * stage_->num_expert_params() * sizeof(float) + expert_avg_.bytes() + expert_avg_sq_.bytes();
}

Status Trainer::run_schedule(double& local_loss) {
  const auto& m = config_.model;
  // T: this rank's tokens of each sequence (seq_len / cp: chunks cp_rank and 2 cp - 1 - cp_rank of
  // 2 cp, context_attention.h); every cp rank of a DP replica reads the same samples.
  const int B = config_.train.micro_batch, Tf = m.seq_len, T = Tf / cp_, C = m.hidden;
  const size_t n = static_cast<size_t>(B) * T * C;
  const int chunks = pp_ * v_;
  const int64_t samples_per_replica = static_cast<int64_t>(m_) * B;
  std::vector<int32_t> tokens(static_cast<size_t>(B) * T), targets(static_cast<size_t>(B) * T);
  std::vector<int32_t> seq_tokens(cp_ > 1 ? static_cast<size_t>(B) * Tf : 0), seq_targets(seq_tokens.size());
  auto read_batch = [&](int64_t sample) {
    if (cp_ == 1) return data_->batch(config_.train.seed, step_, sample, B, T, tokens.data(), targets.data());
    data_->batch(config_.train.seed, step_, sample, B, Tf, seq_tokens.data(), seq_targets.data());
    const int c = T / 2;
    for (int b = 0; b < B; ++b) {
      for (int k = 0; k < 2; ++k) {
        const int chunk = k == 0 ? cp_rank_ : 2 * cp_ - 1 - cp_rank_;
        const size_t from = static_cast<size_t>(b) * Tf + static_cast<size_t>(chunk) * c, to = static_cast<size_t>(b) * T + static_cast<size_t>(k) * c;
        std::copy_n(seq_tokens.begin() + static_cast<ptrdiff_t>(from), c, tokens.begin() + static_cast<ptrdiff_t>(to));
        std::copy_n(seq_targets.begin() + static_cast<ptrdiff_t>(from), c, targets.begin() + static_cast<ptrdiff_t>(to));
      }
    }
  };
  std::vector<std::vector<float>> pending_sends;  // kept alive until wait_sends
  // Activations cross ranks in host memory: on the CPU the stage reads and writes these host
  // buffers directly; on another device they pass through io_in_ / io_out_. A pp group that
  // takes device memory (NCCL) moves the device buffers themselves: received into io_in_, sent
  // from send_pool_, one buffer per send in flight until wait_sends.
  const bool host = dev_->host_accessible();
  const bool direct = !host && groups_.pp->device_memory();
  std::vector<float> in(direct ? 0 : n), dout(direct ? 0 : n);
  float* in_dev = host ? in.data() : io_in_.data();
  float* dout_dev = host ? dout.data() : io_in_.data();
  size_t pool_used = 0;
  auto send_buffer = [&]() -> Result<float*> {
    if (pool_used == send_pool_.size()) {
      Buffer<float> b;
      if (Status s = allocate_buffer(b, *dev_, n); !s) return s.with_context("pipeline send buffers of rank " + std::to_string(rank_));
      send_pool_.push_back(std::move(b));
    }
    return send_pool_[pool_used++].data();
  };
  // Bytes of the host buffers above and of the sends in flight, at their most this step.
  size_t pending_bytes = 0;
  const size_t fixed_bytes = sizeof(int32_t) * (tokens.size() + targets.size() + seq_tokens.size() + seq_targets.size()) +
                             sizeof(float) * (in.size() + dout.size());
  schedule_buffer_peak_ = fixed_bytes;
  local_loss = 0;
  const auto step_start = std::chrono::steady_clock::now();
  // The op's time, without the receive before it and the send after it; forward_ms and backward_ms
  // leave out the gradient group's collectives inside it (zero 2 and 3), which dp_ms counts.
  double dp_before = 0;
  auto record_op = [&](const PipeOp& op, std::chrono::steady_clock::time_point t0) {
    if (!record_timing_) return;
    PipeOpTime t;
    t.backward = op.kind == PipeOp::Kind::kBackward;
    t.chunk = op.chunk;
    t.micro_batch = op.micro_batch;
    t.start_ms = std::chrono::duration<double, std::milli>(t0 - step_start).count();
    t.end_ms = ms_since(step_start);
    (t.backward ? timing_.backward_ms : timing_.forward_ms) += t.end_ms - t.start_ms - (timing_.dp_ms - dp_before);
    timing_.ops.push_back(t);
  };
  const std::vector<PipeOp> ops = pipeline_schedule(config_.pipeline.schedule, pp_, pp_rank_, v_, m_);
  // Each chunk's last backward finishes its layers' gradients: the DP buckets start from there.
  std::map<int, size_t> last_backward;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == PipeOp::Kind::kBackward) last_backward[ops[i].chunk] = i;
  }
  GptStage::LayerDone layer_done;
  if (reducer_) {
    reducer_->begin_step();
    layer_done = [this](int layer) { return reducer_->layer_done(layer); };
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    const bool first = op.chunk == 0, last = op.chunk == chunks - 1;
    const int64_t sample = dp_rank_ * samples_per_replica + static_cast<int64_t>(op.micro_batch) * B;
    if (op.kind == PipeOp::Kind::kForward) {
      if (first || last) read_batch(sample);
      if (!first) {
        float* dst = direct ? in_dev : in.data();
        if (Status s = groups_.pp->recv(dst, n, (op.chunk - 1) % pp_, tag(op.micro_batch, op.chunk - 1, chunks, false)); !s) return s;
        if (!host && !direct) {
          if (Status s = dev_->copy_from_host(in_dev, in.data(), n * sizeof(float)); !s) return s;
        }
      }
      std::vector<float> out(last || direct ? 0 : n);
      float* out_dev = host ? out.data() : io_out_.data();
      if (direct && !last) {
        auto b = send_buffer();
        if (!b.ok()) return b.status();
        out_dev = b.value();
      }
      double loss = 0;
      // The loss's gradient: the mean over the micro-batches' tokens, times the fp16 loss scale (a
      // power of two, so scaling and unscaling are exact). With cp the mean is over this rank's
      // tokens: averaged over dp x cp (equal shares) it is the mean over the sequences.
      const float loss_scale = scaler_ ? static_cast<float>(scaler_->scale()) : 1.0f;
      const float scale = loss_scale * (1.0f / (static_cast<float>(B) * T * m_));
      const auto t0 = std::chrono::steady_clock::now();
      dp_before = timing_.dp_ms;
      if (Status s = stage_->forward(op.chunk, op.micro_batch, tokens.data(), in_dev, targets.data(), scale, last ? nullptr : out_dev, &loss); !s) {
        return s;
      }
      record_op(op, t0);
      if (last) {
        local_loss += loss / m_;
      } else if (direct) {
        if (Status s = groups_.pp->send(out_dev, n, (op.chunk + 1) % pp_, tag(op.micro_batch, op.chunk, chunks, false)); !s) return s;
      } else {
        if (!host) {
          if (Status s = dev_->copy_to_host(out.data(), out_dev, n * sizeof(float)); !s) return s;
        }
        if (Status s = groups_.pp->send(out.data(), n, (op.chunk + 1) % pp_, tag(op.micro_batch, op.chunk, chunks, false)); !s) return s;
        pending_bytes += sizeof(float) * out.size();
        schedule_buffer_peak_ = std::max(schedule_buffer_peak_, fixed_bytes + pending_bytes);
        pending_sends.push_back(std::move(out));
      }
    } else {
      if (!last) {
        float* dst = direct ? dout_dev : dout.data();
        if (Status s = groups_.pp->recv(dst, n, (op.chunk + 1) % pp_, tag(op.micro_batch, op.chunk + 1, chunks, true)); !s) return s;
        if (!host && !direct) {
          if (Status s = dev_->copy_from_host(dout_dev, dout.data(), n * sizeof(float)); !s) return s;
        }
      }
      std::vector<float> din(first || direct ? 0 : n);
      float* din_dev = host ? din.data() : io_out_.data();
      if (direct && !first) {
        auto b = send_buffer();
        if (!b.ok()) return b.status();
        din_dev = b.value();
      }
      const auto t0 = std::chrono::steady_clock::now();
      dp_before = timing_.dp_ms;
      const bool final_backward = reducer_ && last_backward[op.chunk] == i;
      if (Status s = stage_->backward(op.chunk, op.micro_batch, dout_dev, first ? nullptr : din_dev, final_backward ? &layer_done : nullptr);
          !s) {
        return s;
      }
      record_op(op, t0);
      if (direct && !first) {
        if (Status s = groups_.pp->send(din_dev, n, (op.chunk - 1) % pp_, tag(op.micro_batch, op.chunk, chunks, true)); !s) return s;
      } else if (!first) {
        if (!host) {
          if (Status s = dev_->copy_to_host(din.data(), din_dev, n * sizeof(float)); !s) return s;
        }
        if (Status s = groups_.pp->send(din.data(), n, (op.chunk - 1) % pp_, tag(op.micro_batch, op.chunk, chunks, true)); !s) return s;
        pending_bytes += sizeof(float) * din.size();
        schedule_buffer_peak_ = std::max(schedule_buffer_peak_, fixed_bytes + pending_bytes);
        pending_sends.push_back(std::move(din));
      }
    }
  }
  if (pp_ > 1) {
    if (Status s = groups_.pp->wait_sends(); !s) return s;
  }
  return Status::OK();
}

Status Trainer::exchange_and_update(double local_loss, StepStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const double comm_before = timing_.dp_ms + timing_.sync_ms;
  Status s = exchange_and_update_untimed(local_loss, stats);
  if (record_timing_) timing_.optimizer_ms = std::max(0.0, ms_since(t0) - (timing_.dp_ms + timing_.sync_ms - comm_before));
  return s;
}

// The experts' gradients: summed over the ranks that hold the same experts, then divided as the
// dense ones are (by dp x cp: every token of the global batch reached its experts once, scaled by
// its own replica's 1 / (B T m)).
Status Trainer::reduce_expert_grads() {
  const size_t n = stage_->num_expert_params();
  if (n == 0) return Status::OK();
  float* g = stage_->expert_grads();
  if (expert_dp_ && expert_dp_->size() > 1) {
    if (Status s = all_reduce_on_device(*expert_dp_, *dev_, g, n, staging_); !s) return s;
  }
  if (dp_ * cp_ > 1) dev_->ops().scale(g, n, 1.0f / static_cast<float>(dp_ * cp_));
  return Status::OK();
}

Status Trainer::exchange_and_update_untimed(double local_loss, StepStats& stats) {
  if (shards_) return sharded_update(local_loss, stats);
  const Ops& k = dev_->ops();
  float* grads = stage_->grads();
  float* params = stage_->params();
  const size_t n = stage_->num_params();
  // Tied embedding: the first stage's token embedding and the last stage's copy sum their
  // gradients.
  if (groups_.embedding) {
    const ParamSlot* slot = nullptr;
    for (const auto& s : stage_->param_slots()) {
      if (s.spec.role == model::Role::kEmbedding) slot = &s;
    }
    if (slot) {
      if (Status s = all_reduce_on_device(*groups_.embedding, *dev_, grads + slot->offset, slot->count, staging_); !s) return s;
    }
  }
  // DP: average gradients over the gradient group, dp x cp (zero 1: only this rank's shard).
  const int d = grad_size_;
  const bool zero = config_.parallel.zero >= 1 && d > 1;
  const float inv_dp = 1.0f / static_cast<float>(d);
  // zero 1: first the padded gradient (per x d) with the shard's (per), then this rank's shard of
  // the parameters (per) with all of them gathered (per x d).
  update_buffer_peak_ = zero ? sizeof(float) * shard_per_ * (1 + static_cast<size_t>(d)) : 0;
  if (d > 1) {
    if (zero) {
      const size_t per = shard_per_;
      Buffer<float> padded, shard_grad;  // (d x per): the gradients, zero-padded; (per)
      if (Status s = allocate_buffer(padded, *dev_, per * static_cast<size_t>(d)); !s) return s;
      if (Status s = allocate_buffer(shard_grad, *dev_, per); !s) return s;
      if (Status s = dev_->copy(padded.data(), grads, n * sizeof(float)); !s) return s;
      if (Status s = dev_->fill_zero(padded.data() + n, (padded.size() - n) * sizeof(float)); !s) return s;
      if (Status s = reduce_scatter_on_device(*groups_.grad, *dev_, padded.data(), shard_grad.data(), per); !s) return s;
      k.scale(shard_grad.data(), per, inv_dp);
      // Put the averaged shard back in place so the norm and update below read one buffer.
      if (Status s = dev_->copy(grads + shard_begin_, shard_grad.data(), (shard_end_ - shard_begin_) * sizeof(float)); !s) return s;
    } else {
      if (reducer_) {
        if (Status s = reducer_->finish(); !s) return s;
      } else if (Status s = all_reduce_on_device(*groups_.grad, *dev_, grads, n, staging_); !s) {
        return s;
      }
      k.scale(grads, n, inv_dp);
    }
  }
  // The experts' gradients once the dense ones' background reductions are done: the expert-dp
  // group may be the gradient group itself, which takes no other call while they run.
  if (Status s = reduce_expert_grads(); !s) return s;
  if (Status s = norm_and_step(local_loss, stats, params, grads); !s) return s;
  if (stats.skipped) return Status::OK();
  if (zero) {
    auto gathered = gather_updated_shards(*groups_.grad, *dev_, params, n, shard_per_, shard_begin_, shard_end_);
    if (!gathered.ok()) return gathered.status();
  }
  return dev_->synchronize();
}

// Zero 2 and 3: the gradients are this rank's shard already (reduce-scattered during the
// backward); the tied embedding's two copies sum shard by shard (both shard it alike,
// zero_shards.h), then the mean over the gradient group, the norm and AdamW over the shard, and
// for zero 2 the all-gather of the updated parameters into the stage.
Status Trainer::sharded_update(double local_loss, StepStats& stats) {
  const Ops& k = dev_->ops();
  if (Status s = shards_->flush(); !s) return s;
  if (Status s = shards_->check_idle(); !s) return s;
  if (Status s = reduce_expert_grads(); !s) return s;  // as exchange_and_update_untimed: after the background work
  float* grads = shards_->grad_shard();
  const size_t S = shards_->shard_size();
  if (groups_.embedding) {
    for (const auto& slot : stage_->param_slots()) {
      if (slot.spec.role != model::Role::kEmbedding) continue;
      const auto [first, count] = shards_->group_piece(slot.offset);
      if (Status s = all_reduce_on_device(*groups_.embedding, *dev_, grads + first, count, staging_); !s) return s;
    }
  }
  k.scale(grads, S, 1.0f / static_cast<float>(grad_size_));
  Buffer<float> mine;  // zero 2: (S), this rank's pieces of the parameters
  float* params = shards_->param_shard();
  update_buffer_peak_ = 0;
  if (!params) {
    if (Status s = allocate_buffer(mine, *dev_, S, true); !s) return s.with_context("zero 2: the parameter shard");
    if (Status s = shards_->params_to_shard(stage_->params(), mine.data()); !s) return s;
    params = mine.data();
    update_buffer_peak_ = mine.bytes() + shards_->gather_buffer_bytes();
  }
  if (Status s = norm_and_step(local_loss, stats, params, grads); !s) return s;
  if (stats.skipped) return Status::OK();
  if (mine.size()) {
    if (Status s = shards_->all_gather_params(mine.data(), stage_->params()); !s) return s;
  }
  return dev_->synchronize();
}

// The world's all-reduce of the loss and the squared gradient norm (norm_segments_ of `grads`),
// the fp16 scaler's rule, clipping and AdamW over update_segments_ of `params` and `grads`. A
// skipped step (stats.skipped) updates nothing.
Status Trainer::norm_and_step(double local_loss, StepStats& stats, float* params, const float* grads) {
  const Ops& k = dev_->ops();
  // Global norm: each parameter once over the world (norm_segments_ says which ranges this rank adds).
  double sumsq = k.sum_of_squares_segments(grads, norm_segments_.list());
  if (stage_->num_expert_params()) sumsq += k.sum_of_squares_segments(stage_->expert_grads(), expert_norm_segments_.list());
  // One world all-reduce: the squared norm, the LM loss, the aux loss, the dropped assignments and
  // every MoE layer's load (E per layer).
  const size_t E = static_cast<size_t>(config_.model.moe.experts);
  std::vector<double> reduce(4 + moe_layers_.size() * E, 0.0);
  reduce[0] = sumsq;
  // TP ranks hold the same loss: only TP rank 0 adds it, so the world sum over (dp, cp, pp) ranks
  // is dp x cp x the mean loss (each cp rank's is the mean over its equal share of the tokens).
  // The aux loss is the same on the cp ranks of a replica (its sums are the cp group's): cp rank 0
  // adds it. The load counts are each rank's own routing: every tp rank 0 adds them.
  if (tp_rank_ == 0) {
    reduce[1] = pp_rank_ == pp_ - 1 ? local_loss : 0.0;
    reduce[2] = cp_rank_ == 0 ? local_aux_ : 0.0;
    reduce[3] = static_cast<double>(step_moe_.dropped);
    for (size_t i = 0; i < step_moe_.layers.size(); ++i) {
      const size_t at = static_cast<size_t>(std::lower_bound(moe_layers_.begin(), moe_layers_.end(), step_moe_.layers[i]) - moe_layers_.begin());
      for (size_t e = 0; e < E; ++e) reduce[4 + at * E + e] = static_cast<double>(step_moe_.load[i][e]);
    }
  }
  if (Status s = all_reduce_host(*groups_.world, *dev_, reduce.data(), reduce.size()); !s) return s;
  stats.lm_loss = reduce[1] / (dp_ * cp_);
  stats.aux_loss = reduce[2] / dp_;
  stats.loss = stats.lm_loss + stats.aux_loss;
  stats.moe_dropped = static_cast<int64_t>(reduce[3]);
  stats.moe_layers = moe_layers_;
  stats.moe_load.assign(moe_layers_.size(), std::vector<int64_t>(E, 0));
  for (size_t l = 0; l < moe_layers_.size(); ++l) {
    for (size_t e = 0; e < E; ++e) stats.moe_load[l][e] = static_cast<int64_t>(reduce[4 + l * E + e]);
  }
  stats.lr = lr_at(step_);
  // fp16: the gradients hold the loss scale. A non-finite one anywhere makes the world's sum of
  // squares non-finite, so every rank skips the same step.
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_) {
    stats.skipped = !scaler_->update(std::isfinite(reduce[0]));
    stats.loss_scale = scaler_->scale();
    if (stats.skipped) {
      stats.grad_norm = 0;
      ++skipped_;
      return dev_->synchronize();
    }
  }
  stats.grad_norm = std::sqrt(reduce[0]) / loss_scale;
  // Clip and step (the update divides the loss scale out of the gradients).
  const double clip = config_.train.grad_clip;
  const double clip_scale = clip > 0 && stats.grad_norm > clip ? clip / (stats.grad_norm + 1e-6) : 1.0;
  const float grad_scale = static_cast<float>(clip_scale / loss_scale);
  AdamWOptions opt;
  opt.lr = static_cast<float>(stats.lr);
  opt.beta1 = static_cast<float>(config_.train.beta1);
  opt.beta2 = static_cast<float>(config_.train.beta2);
  opt.weight_decay = static_cast<float>(config_.train.weight_decay);
  k.adamw_update_segments(params, exp_avg_.data(), exp_avg_sq_.data(), grads, update_segments_.list(), opt, step_ + 1 - skipped_,
                          grad_scale);
  if (stage_->num_expert_params()) {
    k.adamw_update_segments(stage_->expert_params(), expert_avg_.data(), expert_avg_sq_.data(), stage_->expert_grads(),
                            expert_update_segments_.list(), opt, step_ + 1 - skipped_, grad_scale);
    if (expert_shard_.on) return gather_expert_params();
  }
  return Status::OK();
}

Status Trainer::gather_expert_params() {
  auto gathered = gather_updated_shards(*expert_dp_, *dev_, stage_->expert_params(), stage_->num_expert_params(), expert_shard_.per,
                                        expert_shard_.begin, expert_shard_.end);
  if (!gathered.ok()) return gathered.status().with_context("zero: the experts' all-gather");
  update_buffer_peak_ = std::max(update_buffer_peak_, gathered.value());
  return Status::OK();
}

Result<StepStats> Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  timing_ = StepTiming{};
  if (record_timing_) {
    timing_.start_unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  (void)stage_->take_recompute_seconds();
  (void)stage_->take_aux_loss();  // what an evaluation's forwards left
  (void)stage_->take_moe_stats();
  if (Status s = stage_->zero_grads(); !s) return s;
  if (shards_) {
    if (Status s = shards_->begin_step(); !s) return s;
  }
  stage_->reset_peak();
  dev_->reset_peak();
  double local_loss = 0;
  if (Status s = run_schedule(local_loss); !s) return s;
  local_aux_ = stage_->take_aux_loss() / m_;
  step_moe_ = stage_->take_moe_stats();
  StepStats stats;
  if (Status s = exchange_and_update(local_loss, stats); !s) return s;
  ++step_;
  const double tokens = static_cast<double>(config_.train.global_batch) * config_.model.seq_len;
  tokens_ += tokens;
  stats.step = step_;
  stats.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  stats.tokens_per_s = stats.step_ms > 0 ? tokens / (stats.step_ms / 1000.0) : 0.0;
  // A device that counts its allocations (CUDA) reports its high-water mark; on the CPU it is the
  // state, the activations' peak and the larger of the step's two sets of buffers (zero 2 and 3:
  // the schedule's with the units in flight at their peak).
  const size_t in_flight = shards_ ? shards_->peak_unit_bytes() : 0;
  stats.mem_bytes = dev_->peak_bytes() > 0 ? dev_->peak_bytes()
                                           : state_bytes() + stage_->peak_activation_bytes() +
                                                 std::max(schedule_buffer_peak_ + in_flight, update_buffer_peak_);
  if (record_timing_) {
    timing_.recompute_ms = stage_->take_recompute_seconds() * 1e3;
    stats.timing = std::move(timing_);
  }
  timing_ = StepTiming{};
  return stats;
}

}  // namespace stagecraft::runtime
