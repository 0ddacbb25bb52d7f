// Trainer: one rank's training loop — the plan's pipeline schedule over micro-batches,
// gradient synchronisation, clipping by the global norm, AdamW with warm-up and cosine decay,
// and checkpoints.
//
// A step (global batch of step k, a function of (seed, k) — token_data.h):
//   1. DP rank d takes its contiguous slice of the batch; micro-batch i its next micro_batch samples.
//      With context parallelism (parallel.cp) every cp rank of the replica reads the same samples
//      and keeps its 2 of the 2 cp chunks of each sequence (context_attention.h), seq_len / cp
//      tokens, which every stage of the pipeline works on; attention sees the whole sequence
//      through the cp group.
//   2. The pipeline schedule (pipeline_schedule.h) runs forward and backward of this rank's
//      chunks; activations go to the next chunk's rank and gradients back, tagged by
//      (micro-batch, chunk, direction).
//   3. The tied embedding's two copies (first and last stage) sum their gradients; gradients are
//      averaged over DP (all-reduce; with parallel.zero 1 a reduce-scatter, each DP rank then
//      updates its 1/dp of the parameters and an all-gather brings them back; with zero 2 and 3
//      each micro-batch's gradients are reduce-scattered during the backward into this rank's
//      shard, and zero 3 gathers each layer's weights before it runs instead of gathering them
//      after the update: zero_shards.h). Without ZeRO and
//      with parallel.overlap_grad_reduce, the all-reduce runs in buckets that start during the
//      last micro-batch's backward, as each bucket's layers finish (grad_reducer.h).
//   4. The global gradient norm counts every parameter once (replicated TP tensors from TP rank 0,
//      the head's wte copy not at all); gradients are scaled so the norm is at most grad_clip.
//   5. AdamW (weight decay on matrices only), lr warm-up then cosine to min_lr.
//   The norm and the update are one Ops call each over every parameter tensor of the rank's
//   shard (ops.h: sum_of_squares_segments, adamw_update_segments), on segment lists built once
//   when the trainer is created.
// The loss reported is the mean over the whole global batch, the same on every rank; with cp each
// rank's loss and gradients are the mean over its own tokens, averaged over dp x cp.
//
// Determinism: parameters are a function of the seed (gpt_layout.h) and batches of (seed, step),
// so every (dp, tp, pp, schedule, micro_batch) trains the same model up to float summation order.
//
// Not thread-safe; one per rank.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/runtime/comm_group.h"
#include "stagecraft/runtime/gpt_stage.h"
#include "stagecraft/runtime/grad_reducer.h"
#include "stagecraft/runtime/loss_scaler.h"
#include "stagecraft/runtime/rank_layout.h"
#include "stagecraft/runtime/segment_table.h"
#include "stagecraft/runtime/token_data.h"
#include "stagecraft/runtime/zero_shards.h"

namespace stagecraft::runtime {

// The groups of one rank, borrowed: they must outlive the trainer. comm/process_groups.h builds
// them (build_process_groups) and hands them over with trainer_groups().
struct TrainerGroups {
  CommGroup* world = nullptr;
  CommGroup* tp = nullptr;
  CommGroup* dp = nullptr;
  CommGroup* pp = nullptr;
  CommGroup* embedding = nullptr;  // first and last pipeline rank of this (dp, tp); null if not tied across stages
  CommGroup* cp = nullptr;         // the other parts of this rank's sequences; null with cp = 1
  CommGroup* grad = nullptr;       // dp x cp, which reduces gradients; null means dp (cp = 1)
  // Mixture of experts: the ranks that hold the other experts of this rank's MoE layers (null with
  // ep = 1), and those that hold the same experts and reduce their gradients (expert data
  // parallelism; null means the gradient group, where that is the same ranks).
  CommGroup* ep = nullptr;
  CommGroup* expert_dp = nullptr;
};

// One forward or backward of the pipeline schedule on this rank, in milliseconds from the
// step's start.
struct PipeOpTime {
  bool backward = false;
  int chunk = 0;
  int micro_batch = 0;
  double start_ms = 0, end_ms = 0;
};

// Where one rank's step went, in milliseconds by the host's clock (on a GPU, work still queued
// shows where the host next waits for it). Recorded on every step: a clock read around each
// operation, measured by tests/bench/bench_train.cpp at well under 1% of a step.
//   step = forward + backward + pp_wait + pp_send + dp + optimizer + sync + the rest (data
//   batches, zeroing gradients, copies), where forward and backward include their TP
//   collectives (tp) and context-parallel exchanges (cp), and backward includes full recompute's
//   repeated forwards (recompute); zero 2 and 3's gathers and reduce-scatters inside them count in
//   dp, not in forward or backward.
struct StepTiming {
  double start_unix_s = 0;   // the wall clock at the step's start, to align ranks on one timeline
  double forward_ms = 0;
  double backward_ms = 0;
  double recompute_ms = 0;   // part of backward_ms
  double tp_ms = 0;          // part of forward_ms and backward_ms
  double pp_wait_ms = 0;     // blocked receiving from a neighbour stage: its bubble and transfers
  double pp_send_ms = 0;     // sending to neighbours, and waiting for the sends at the step's end
  double dp_ms = 0;          // DP gradient reduction (ZeRO's all-gather too), the tied embedding's sum
  double cp_ms = 0;          // context-parallel exchanges (attention's K/V ring or head all-to-all): part of
                             // forward_ms and backward_ms
  double ep_ms = 0;          // expert-parallel dispatch and combine (the counts and the rows' all_to_all_v):
                             // part of forward_ms and backward_ms
  double optimizer_ms = 0;   // gradient norm, clipping and AdamW
  double sync_ms = 0;        // the step's closing all-reduce of loss and norm: waiting for the slowest rank
  std::vector<PipeOpTime> ops;  // every forward and backward of the step, in order
};

struct StepStats {
  int64_t step = 0;         // 1-based: the step just taken (an fp16 step skipped for overflow counts)
  double loss = 0;          // mean over the global batch: lm_loss + aux_loss, the objective
  double lm_loss = 0;       // the language model's cross-entropy, mean over the global batch
  double aux_loss = 0;      // mixture of experts: the load-balancing loss, summed over the MoE layers,
                            // mean over the micro-batches (docs/engine.md); 0 without experts
  double lr = 0;
  double grad_norm = 0;     // before clipping
  double step_ms = 0;
  double tokens_per_s = 0;  // global batch tokens / step time
  // This rank's engine memory. On a device that counts its allocations (CUDA), its high-water
  // mark. On the CPU: weights, grads, optimizer state, the activations at their peak,
  // and the larger of the step's two sets of buffers: the pipeline schedule's (token ids, the
  // received activation and gradient, the sends in flight until the step's end) and the ZeRO
  // update's (the padded gradient and the gathered shards). Zero 2 and 3: the gradient (and
  // parameter) shards instead of the full buffers, the schedule's buffers with the most that the
  // units in flight held at once (the bucket filling and the one reducing, the gathered layer in
  // use with its gradient and the next one gathered ahead: zero_shards.h), and for
  // zero 2 the update's parameter shard and one group's gather. Activations and schedule buffers are
  // added at their peaks, an upper bound on their sum at any one moment. Not counted: the
  // process itself (code, libraries, thread stacks), the same for every config.
  size_t mem_bytes = 0;
  StepTiming timing;
  // train.precision fp16 (loss_scaler.h): the loss scale after this step, and whether the step
  // was skipped (a non-finite gradient: no update, grad_norm reported as 0). 0 and false otherwise.
  double loss_scale = 0;
  bool skipped = false;
  // Mixture of experts, over the whole step and every rank (each MoE layer's counts summed over
  // the ranks that route different tokens, dp x cp): per MoE layer of the model (moe_layers, the
  // layer indices, ascending), the (token, expert) assignments the router made to each of its E
  // experts, before capacity; and the assignments dropped for capacity over all of them. Empty
  // and 0 without experts.
  std::vector<int> moe_layers;
  std::vector<std::vector<int64_t>> moe_load;
  int64_t moe_dropped = 0;
};

class Trainer {
 public:
  ~Trainer();
  // Whether the engine can train this config on this data (no dropout, tp_mode 1d, no sequence
  // parallelism yet, a vocabulary that holds the data's tokens); the launcher asks before it
  // starts any worker. `data` may be null to skip the data rules.
  static Status check(const config::RunConfig& config, const TokenData* data);

  // `layout` is this rank's (comm::rank_layout_of derives it from a plan); `groups` and `data`
  // must outlive the trainer. Fails as check() does, or kInvalidInput when the layout is not
  // consistent (check_rank_layout) or a group that the layout needs is missing.
  // `device` (default: the host's CPU device) holds the stage, its gradients and the AdamW state;
  // the groups communicate host memory, staged through the host where the device needs it.
  static Result<std::unique_ptr<Trainer>> create(const config::RunConfig& config, const RankLayout& layout,
                                                 TrainerGroups groups, const TokenData* data, Device* device = nullptr);

  // Fresh parameters from the seed, or train.resume's checkpoint (any layout wrote it).
  Status start();
  int64_t step() const { return step_; }

  Result<StepStats> train_step();

  // Gathers the model and optimizer state to world rank 0, which writes the checkpoint
  // directory; every rank must call it. Returns the directory.
  Result<std::string> save_checkpoint();

  // The lr of step `step` (0-based; skipped fp16 steps count, as in PyTorch's usual loop, so the
  // schedule and the data move on past them, where Megatron-LM holds its schedule).
  double lr_at(int64_t step) const;

  // Whether steps record their StepTiming (default on); off only to measure what it costs.
  void set_record_timing(bool on) { record_timing_ = on; }

  // The DP buckets reduced during the backward; null where there are none (dp 1, ZeRO, or
  // parallel.overlap_grad_reduce false).
  const GradReducer* grad_reducer() const { return reducer_.get(); }
  // ZeRO 2 and 3's shards (zero_shards.h); null where there are none (zero 0 or 1, or dp x cp 1).
  const ZeroShards* zero_shards() const { return shards_.get(); }

 private:
  class TimedGroup;
  Trainer();
  Status exchange_and_update(double local_loss, StepStats& stats);  // times the one below
  Status exchange_and_update_untimed(double local_loss, StepStats& stats);
  Status sharded_update(double local_loss, StepStats& stats);  // zero 2 and 3
  Status norm_and_step(double local_loss, StepStats& stats, float* params, const float* grads);
  Status reduce_expert_grads();  // over the expert-data-parallel group, averaged as the dense ones
  bool params_sharded() const;           // zero 3: the parameters live in shards_
  Status put_params(const float* full);  // num_params() floats into the stage or the shards
  Status run_schedule(double& local_loss);
  size_t state_bytes() const;
  StageSpec stage_spec(int tp_rank, int pp_rank) const;  // the stage of those coordinates

  config::RunConfig config_;
  int rank_ = 0, dp_ = 1, tp_ = 1, pp_ = 1, v_ = 1, m_ = 1;
  int dp_rank_ = 0, tp_rank_ = 0, pp_rank_ = 0;
  int cp_ = 1, cp_rank_ = 0;         // context parallel: each sequence split over cp ranks
  int grad_size_ = 1, grad_rank_ = 0;  // the gradient group (dp x cp): size and this rank's place
  std::vector<LayerRange> chunks_;   // every chunk of the model
  std::vector<int> replica0_ranks_;  // rank of (dp 0, tp, pp) at pp * tp_size + tp
  std::vector<int> expert_replica0_;  // RankLayout::expert_replica0_ranks
  TrainerGroups groups_;  // the timed wrappers below where timing is recorded
  std::vector<std::unique_ptr<TimedGroup>> timed_;  // tp, pp, dp, embedding, world
  bool record_timing_ = true;
  StepTiming timing_;  // of the step under way
  const TokenData* data_ = nullptr;
  Device* dev_ = nullptr;
  std::unique_ptr<GptStage> stage_;
  Buffer<float> exp_avg_, exp_avg_sq_;  // AdamW moments: all params, or this rank's shard (zero 1; zero 2, 3: shards_'s layout)
  size_t shard_per_ = 0;                     // ceil(params / dp): a ZeRO shard's (padded) size
  size_t shard_begin_ = 0, shard_end_ = 0;   // parameter range this rank updates
  SegmentTable update_segments_;  // every slot clipped to the shard; moments from shard_begin_
  SegmentTable norm_segments_;    // the slots this rank adds to the global norm, clipped likewise
  Buffer<float> io_in_, io_out_;   // a micro-batch's activations sent or received (device not host)
  std::vector<Buffer<float>> send_pool_;  // each (B, T, C): sends in flight on a device-memory pp group
  std::vector<float> staging_;      // host copy for a collective over device memory
  std::unique_ptr<GradReducer> reducer_;  // overlapped DP buckets (see grad_reducer())
  std::unique_ptr<ZeroShards> shards_;    // zero 2 and 3 with a gradient group of 2 or more
  // Mixture of experts: the expert buffer's AdamW moments (expert_shard_), its update and norm
  // segments, and the step's aux loss and load counts.
  Buffer<float> expert_avg_, expert_avg_sq_;  // the experts' AdamW moments: all, or this rank's shard (zero >= 1)
  // parallel.zero >= 1 with an expert-dp group of 2 or more: each of its ranks keeps the moments of
  // [begin, end) of the expert buffer (ceil(n / edp) = per each, the last short), updates those
  // parameters and all-gathers them (Megatron's distributed optimizer over expert-dp).
  struct ExpertShard {
    bool on = false;
    size_t per = 0, begin = 0, end = 0;
  } expert_shard_;
  Status gather_expert_params();  // the updated shards into every rank's expert buffer
  SegmentTable expert_update_segments_, expert_norm_segments_;
  CommGroup* expert_dp_ = nullptr;  // expert gradients' group; null: none (a group of one)
  int ep_ = 1, ep_rank_ = 0;
  double local_aux_ = 0;
  std::vector<int> moe_layers_;  // every MoE layer of the model
  GptStage::MoeStats step_moe_;  // this rank's, of the step under way

  int64_t step_ = 0;
  double tokens_ = 0;
  size_t schedule_buffer_peak_ = 0;  // bytes, this step: see StepStats::mem_bytes
  size_t update_buffer_peak_ = 0;
  std::optional<LossScaler> scaler_;  // train.precision fp16 only
  int64_t skipped_ = 0;               // steps skipped by the scaler: AdamW's count leaves them out
};

}  // namespace stagecraft::runtime
