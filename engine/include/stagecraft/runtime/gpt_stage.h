// GptStage: the part of a decoder-only transformer one rank holds and runs — the model chunks of
// its pipeline rank, sharded over its tensor-parallel rank — with forward and backward passes per
// micro-batch, for every architecture of the model description (model/model.h): GPT-2 and Llama.
//
// What it holds: parameters and gradients of its chunks in one flat buffer each (so data-
// parallel reduction and the optimizer see one contiguous range), in the description's order,
// every tensor as the TP shard of this rank, and typed handles to them (each layer's norms,
// projections and biases by role, resolved once when the stage is made; a tensor the layer code
// needs and the description lacks is an error then, not at a kernel call). Chunk 0 of the model
// adds the token embeddings (and GPT-2's learned positions); the last chunk the final norm and the
// head: tied (a copy of the embedding when it lives on another stage; the caller sums the two
// gradients) or its own lm_head.
// What it does not do: communicate between ranks other than through TpReducer, schedule micro-
// batches, or step the optimizer (trainer.h does).
//
// Tensor parallelism (Megatron 1D): the QKV projection and the MLP's first projection column-
// parallel (this rank's query heads, its key/value heads, its FFN columns; GPT-2's packed c_attn,
// Llama's q | k | v and gate | up as one GEMM each over adjacent shards), the attention output
// and the MLP's last projection row-parallel, followed by an all-reduce of the (B*T, C) output in
// forward (a row-parallel bias and the residual are added by TP rank 0 only, so the sum holds
// them once); the column-parallel layers' input gradients are all-reduced in backward. Everything
// else (norms, embeddings, head) is replicated and computed identically on every TP rank.
//
// Mixture of experts (model.moe, Llama only; src/runtime/moe_layer.h): an MoE layer's MLP is a
// router, top-k routed experts and the shared experts. The router and the shared experts are dense
// tensors like the others (replicated, and split over tp like the dense MLP); the routed experts'
// weights live apart, in an expert buffer of their own (expert_params(), expert_slots()): this
// rank's E / ep experts of every MoE layer it holds, whole (expert_tp 1), in the description's
// order, because their gradients reduce over the expert-data-parallel group rather than dp x cp
// and ZeRO does not shard them. The layer adds its load-balancing loss to the objective
// (take_aux_loss) and counts the tokens the router sent to each expert (take_moe_stats).
//
// Activations: forward(chunk, mb) keeps what backward(chunk, mb) needs, until that backward
// frees it; with train.recompute full only each layer's input is kept and the layer is run
// again in backward. The last chunk runs the head, the loss and the head's backward inside
// forward (the loss gradient is known then) and keeps only the gradient at its input.
//
// Memory: parameters, gradients and activations live on the stage's Device (device.h) and every
// kernel runs through its Ops table, so the same code trains on the CPU and on a GPU. tokens and
// targets are host arrays (the data reader's); input, output, dout and dinput are the device's.
// With a UnitStorage (parallel.zero 2 and 3, zero_shards.h) the gradients, or the parameters and
// the gradients, lie outside the flat buffers: the stage asks for each ParamUnit just before it
// runs it and gives it back right after.
//
// Not thread-safe; one per rank.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/model/model.h"
#include "stagecraft/runtime/device.h"

namespace stagecraft::runtime {

class CommGroup;
class ContextAttention;
class MoeLayer;

// In-place sum over the ranks of a tensor-parallel group (identity for tp = 1).
class TpReducer {
 public:
  virtual ~TpReducer() = default;
  virtual Status all_reduce_sum(float* data, size_t count) = 0;
  // Where the group's calls read and write: false, host memory (Gloo); true, the memory of the
  // device the ranks train on, the transfers ordered on that device's stream (NCCL).
  virtual bool device_memory() const { return false; }
};

// In-place sum over `group` of `count` floats in `device`'s memory: directly where the group
// takes device memory or the host can reach it, else through `staging` (host memory, grown as
// needed).
Status all_reduce_on_device(TpReducer& group, Device& device, float* data, size_t count, std::vector<float>& staging);

struct StageSpec {
  config::ModelConfig model;
  int micro_batch = 1;               // B
  bool full_recompute = false;       // train.recompute == full
  bool flash_attention = false;      // fused attention (Ops::has_flash_attention): keeps (B, NH, T)
                                     // log-sum-exps instead of (B, NH, T, T) probabilities
  bool bf16_activations = false;     // keep the activations but the residual stream in bf16 (the
                                     // layernorms', attention's and GELU's outputs, q k v, GELU's
                                     // input, and the gradients at GELU's output and input, at
                                     // attention's output and at q k v) and give the GEMMs a bf16
                                     // copy of the weights: train.precision bf16 on a GPU
  int tp = 1, tp_rank = 0;
  int cp = 1, cp_rank = 0;           // context parallel: this rank holds seq_len / cp tokens of each
                                     // sequence, chunks cp_rank and 2 cp - 1 - cp_rank of 2 cp
                                     // (context_attention.h), at their positions in the sequence
  bool cp_ring = true;               // parallel.cp_comm: ring (K/V around the group), else all_to_all
  int pp = 1;                        // pipeline ranks
  int ep = 1, ep_rank = 0;           // expert parallel (model.moe): this rank holds experts
                                     // [ep_rank E / ep, (ep_rank + 1) E / ep) of every MoE layer
  int num_chunks = 1;                // model chunks in all (pp x virtual stages)
  std::vector<int> chunks;           // global chunk ids this rank runs, ascending
  std::vector<int> chunk_first_layer;  // per entry of `chunks`
  std::vector<int> chunk_layers;       // per entry of `chunks`

  // The whole model as one stage on one rank (no parallelism): what eval and the single-rank
  // references run.
  static StageSpec whole_model(const config::ModelConfig& model, int micro_batch = 1) {
    StageSpec s;
    s.model = model;
    s.micro_batch = micro_batch;
    s.chunks = {0};
    s.chunk_first_layer = {0};
    s.chunk_layers = {model.layers};
    return s;
  }
};

// Where a parameter tensor sits in the flat buffers.
struct ParamSlot {
  model::ParamSpec spec;
  size_t offset = 0;   // in floats
  size_t count = 0;    // shard elements
  bool head_copy = false;  // the last stage's copy of the token embedding for the tied head
};

// The parameters a ZeRO stage gathers, and reduces the gradients of, as one (zero_shards.h): one
// transformer layer's tensors, or one tensor outside the layers (so the token embedding is a unit
// alone and its tied copies on the first and last stage shard alike). Contiguous in the flat
// buffers, ascending, together the whole buffer.
struct ParamUnit {
  size_t begin = 0, end = 0;  // floats of the flat layout, [begin, end)
  int layer = -1;             // its transformer layer; -1 outside the layers
};

// Where a unit's tensors lie while the stage runs it, when they do not stay in the stage's flat
// buffers (GptStage::set_unit_storage). The stage calls acquire before it reads a unit's parameters
// or writes its gradients, and release once done, in an order fixed by the schedule (the same on
// every rank of one (tp, pp) position), so that both may run collectives over those ranks:
//   kForward   a forward reads the parameters;
//   kBackward  a backward (a layer's, with its recomputed forward; the head's, inside the last
//              chunk's forward; the embeddings') reads them and adds to zeroed gradients, which
//              release may then reduce.
// A unit is acquired at most once at a time. A View's nullptr fields mean the stage's own buffers.
class UnitStorage {
 public:
  enum class Use { kForward, kBackward };
  struct View {
    float* params = nullptr;           // (end - begin) floats
    const bf16* params_low = nullptr;  // their bf16 copy, with bf16 activations
    float* grads = nullptr;            // kBackward: (end - begin) floats, zeroed
  };
  virtual ~UnitStorage() = default;
  virtual Result<View> acquire(int unit, Use use) = 0;
  virtual Status release(int unit, Use use) = 0;
};

class GptStage {
 public:
  // `device` (default: the host's CPU device) must outlive the stage. `tp` reduces host memory:
  // on a device that is not host_accessible the stage stages its TP all-reduces through the host.
  // `cp`, the context-parallel group, is needed where spec.cp > 1, and `ep`, the expert-parallel
  // group, where spec.ep > 1; they must outlive the stage.
  static Result<std::unique_ptr<GptStage>> create(const StageSpec& spec, TpReducer* tp, Device* device = nullptr, CommGroup* cp = nullptr,
                                                  CommGroup* ep = nullptr);
  ~GptStage();

  const StageSpec& spec() const { return spec_; }
  const std::vector<ParamSlot>& param_slots() const { return slots_; }
  Device& device() const { return *dev_; }
  // The flat parameter and gradient buffers, on the device. With bf16 activations the GEMMs read a
  // bf16 copy of the weights, made at the first forward after they change: every call of params()
  // counts as a change (the trainer's update writes through it), as does upload_params.
  float* params() {
    weights_low_stale_ = true;
    return params_.data();
  }
  float* grads() { return grads_.data(); }
  size_t num_params() const { return num_params_; }

  // The routed experts' parameters and gradients (an MoE model; empty otherwise): this rank's
  // experts of its MoE layers, whole, in a flat buffer apart from the dense ones, offsets of
  // expert_slots() into it. zero_grads() zeroes them too; init_parameters() initialises them.
  const std::vector<ParamSlot>& expert_slots() const { return expert_slots_; }
  float* expert_params() { return expert_params_.data(); }
  float* expert_grads() { return expert_grads_.data(); }
  size_t num_expert_params() const { return num_expert_params_; }
  [[nodiscard]] Status init_expert_parameters(uint64_t seed);
  [[nodiscard]] Status download_expert_params(float* host) const;  // num_expert_params() floats
  [[nodiscard]] Status upload_expert_params(const float* host);

  // The load-balancing loss of the MoE layers this stage ran forward since the last call, summed
  // over layers and micro-batches (each micro-batch's over its whole sequences: with cp the sums
  // of the cp group), and reset. Repeated forwards (full recompute) are not counted again.
  double take_aux_loss() {
    const double a = aux_loss_;
    aux_loss_ = 0;
    return a;
  }
  // Tokens the router sent to each expert (before capacity) per MoE layer this stage holds, summed
  // over the forwards since the last call, and the assignments dropped for capacity; reset.
  struct MoeStats {
    std::vector<int> layers;                 // the MoE layers held, ascending
    std::vector<std::vector<int64_t>> load;  // per entry of layers: (E) assignments per expert
    int64_t dropped = 0;
  };
  MoeStats take_moe_stats();

  // The units of the flat layout (ParamUnit), ascending.
  const std::vector<ParamUnit>& param_units() const { return units_; }
  // Hands the gradients, and with `params_too` the parameters, to `storage` (which must outlive
  // the stage) and frees the flat buffers that held them: from now on params() (with params_too),
  // grads() and zero_grads() have nothing to work on, and download_params/upload_params fail with
  // params_too. The bytes the stage still holds in flat buffers: flat_bytes().
  void set_unit_storage(UnitStorage* storage, bool params_too);
  size_t flat_bytes() const { return params_.bytes() + grads_.bytes(); }

  // The description's initialisation from (seed, name, full index) (model.h), identical to the
  // unsharded model's values.
  [[nodiscard]] Status init_parameters(uint64_t seed);
  // The same values into `host` (num_params() floats), for parameters held outside the stage.
  [[nodiscard]] Status initial_parameters(uint64_t seed, float* host) const;
  [[nodiscard]] Status zero_grads();
  // Copies of the parameters (or gradients) to and from host memory of num_params() floats.
  [[nodiscard]] Status download_params(float* host) const;
  [[nodiscard]] Status upload_params(const float* host);

  bool has_embedding() const { return spec_.chunks.front() == 0; }
  bool has_head() const { return spec_.chunks.back() == spec_.num_chunks - 1; }

  // Forward of `chunk` for micro-batch `mb`. T is this rank's tokens of a sequence: seq_len / cp.
  //   first chunk: tokens (B, T); other chunks: input (B, T, C) from the previous chunk.
  //   last chunk: targets (B, T); runs the loss and its gradient scaled by loss_scale (1 / (B T m)
  //   for a mean over m micro-batches) and returns the mean loss over its B T tokens in *loss.
  //   other chunks: writes output (B, T, C).
  [[nodiscard]] Status forward(int chunk, int mb, const int32_t* tokens, const float* input, const int32_t* targets, float loss_scale,
                 float* output, double* loss);
  // Backward of `chunk` for `mb`: dout (B, T, C) is the gradient of its output (ignored for the
  // last chunk); writes dinput (B, T, C) unless this is chunk 0. Parameter gradients accumulate.
  // `layer_done`, when given, is called with each transformer layer's index as soon as that
  // layer's parameter gradients are written (issued, on an asynchronous device), from the last
  // layer down; an error it returns ends the backward. The trainer passes it on a chunk's last
  // micro-batch to start data-parallel buckets early (grad_reducer.h).
  using LayerDone = std::function<Status(int layer)>;
  [[nodiscard]] Status backward(int chunk, int mb, const float* dout, float* dinput, const LayerDone* layer_done = nullptr);

  // Drops what forward(chunk, mb) kept, without a backward (evaluation).
  void discard(int chunk, int mb);

  // Bytes of the bf16 copy of the weights (0 without bf16 activations).
  size_t weight_copy_bytes() const { return weights_low_.bytes(); }

  // Bytes held now by activations, and the most held at once since the last reset.
  size_t activation_bytes() const { return live_bytes_; }
  size_t peak_activation_bytes() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = live_bytes_; }

  // Seconds spent repeating forwards inside backward() (full recompute) since the last call; the
  // host's clock, so on a GPU it counts queueing, not the kernels' own time.
  double take_recompute_seconds() {
    const double s = recompute_s_;
    recompute_s_ = 0;
    return s;
  }

 private:
  class ActBuffer;
  struct LayerActs;
  struct ChunkActs;
  // Offsets in the flat buffers of one layer's tensors, by role (model::Role); kAbsent where the
  // architecture has none (Llama's biases, GPT-2's are all there). qkv and up are the first part
  // of a fused group whose other parts follow it (checked at create()).
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  struct LayerHandles {
    size_t norm1 = kAbsent, norm1_bias = kAbsent, qkv = kAbsent, qkv_bias = kAbsent, out = kAbsent, out_bias = kAbsent,
           norm2 = kAbsent, norm2_bias = kAbsent, up = kAbsent, up_bias = kAbsent, down = kAbsent, down_bias = kAbsent;
    // An MoE layer's dense tensors (router; shared experts' gate | up and down, kAbsent without),
    // and its held experts' offsets in the expert buffer (gate | up, down), by local index.
    size_t router = kAbsent, shared_up = kAbsent, shared_down = kAbsent;
    std::vector<size_t> expert_up, expert_down;
  };
  struct EndHandles {
    size_t embedding = kAbsent, positions = kAbsent, final_norm = kAbsent, final_norm_bias = kAbsent,
           head = kAbsent;  // the head's matrix: lm_head, the tied embedding or its copy
  };
  GptStage() = default;
  Status resolve_handles();
  int chunk_index(int chunk) const;
  Status layer_forward(int layer, const float* x, float* out, LayerActs& a);
  bool moe_layer(int layer) const { return desc_.moe_layer(layer); }
  Status moe_forward(int layer, float* out, LayerActs& a);
  // dtmp_c_ = this tp rank's part of the gradient at the layer's ln2; aux_scale as MoeLayer's.
  Status moe_backward(int layer, const LayerActs& a, const float* dres, double aux_scale);
  template <typename Weights>
  void fill_moe_weights(int layer, Weights& w);  // a MoeLayer::Weights of the layer's tensors
  Status layer_backward(int layer, const float* x, const LayerActs& a, float* dres);
  Result<std::unique_ptr<LayerActs>> new_layer_acts();
  Status head_scratch();
  // The tensor at `offset`, kAbsent giving nullptr (an absent bias), where its unit lies now.
  size_t unit_at(size_t offset) const;
  float* p(size_t offset) { return offset == kAbsent ? nullptr : bound_[unit_at(offset)].params + (offset - units_[unit_at(offset)].begin); }
  float* g(size_t offset) { return offset == kAbsent ? nullptr : bound_[unit_at(offset)].grads + (offset - units_[unit_at(offset)].begin); }
  // The ZeRO hooks around a layer's (or the end tensors') forward and backward: acquire the units
  // from the UnitStorage and point the handles at them, then give them back. Nothing to do
  // without a storage. use_ends takes the end handles (kAbsent and repeats skipped).
  Status use_layer(int layer, UnitStorage::Use use);
  Status done_layer(int layer, UnitStorage::Use use);
  Status use_ends(std::vector<size_t> offsets, UnitStorage::Use use);
  Status done_ends(std::vector<size_t> offsets, UnitStorage::Use use);
  Status use_unit(size_t unit, UnitStorage::Use use);
  Status done_unit(size_t unit, UnitStorage::Use use);
  void bind_own(size_t unit);  // the unit's pointers into the stage's own buffers
  // A GEMM's weight, or the bias of a GEMM whose output is an activation: the bf16 copy with bf16
  // activations, else the fp32 parameter; nullptr for kAbsent. (The row-parallel biases stay fp32:
  // their GEMMs write the residual stream.)
  ActIn w(size_t offset) const;
  // The norms, by the architecture's kind (LayerNorm with its bias and mean, or RMSNorm).
  void norm_forward(ActOut out, float* mean, float* rstd, const float* x, size_t weight, size_t bias, int N);
  void norm_backward(float* dx, size_t weight, size_t bias, const float* dout, const float* x, const float* mean, const float* rstd, int N,
                     bf16* dx_low);
  void account(ptrdiff_t bytes);
  size_t attention_state_elems() const;  // what attention keeps per layer: probabilities or lse
  int local_seq() const { return spec_.model.seq_len / spec_.cp; }  // T: this rank's tokens of a sequence
  // The rotary positions (forward: sign 1, backward: -1) of this rank's tokens in the sequence.
  void rope(ActOut qkv, bool backward);

  StageSpec spec_;
  model::ModelDesc desc_;
  Layout layout_ = Layout::kInOut;  // the weights as stored: GPT-2 (in, out), Llama (out, in)
  TpReducer* tp_ = nullptr;
  Device* dev_ = nullptr;
  const Ops* k_ = nullptr;
  std::vector<ParamSlot> slots_;
  size_t num_params_ = 0;
  std::vector<ParamUnit> units_;
  std::vector<int> layer_unit_;  // by global layer index: its unit, -1 for layers not held
  struct Bound {
    float* params = nullptr;
    const bf16* params_low = nullptr;
    float* grads = nullptr;
  };
  std::vector<Bound> bound_;  // per unit: where its tensors lie now
  UnitStorage* storage_ = nullptr;
  std::vector<LayerHandles> layer_handles_;  // by global layer index; filled for this rank's layers
  EndHandles end_;
  Buffer<float> params_, grads_;
  Buffer<bf16> weights_low_;        // bf16 copy of params_ (bf16 activations only), in the same layout
  bool weights_low_stale_ = true;
  std::map<std::pair<int, int>, std::unique_ptr<ChunkActs>> acts_;  // (chunk, mb)
  std::vector<std::unique_ptr<LayerActs>> free_layer_acts_;
  std::unique_ptr<LayerActs> recompute_acts_;
  // Scratch, held for the stage's life: backward's temporaries, the chunk output, the gradient
  // that backward carries down the layers, the head (allocated at the first forward of the last
  // chunk), the targets.
  Buffer<float> scratch_att_, dtmp_c_, out_, dres_;
  // Backward's gradients between GEMMs and the kernels beside them, bf16 with bf16 activations:
  // (BT, Fl) at the MLP's activation output (GELU's in place to its input), (BT, 2 Fl) at SwiGLU's
  // input (gate | up; Llama only), (BT, QKVl) at q | k | v, (BT, Ql) at attention's output.
  std::unique_ptr<ActBuffer> dtmp_f_, dtmp_up_, dtmp_3c_, dtmp_cl_;
  Buffer<bf16> dres_low_;  // (BT, C): dres rounded to bf16, for c_proj's GEMMs (bf16 activations only)
  std::unique_ptr<ActBuffer> lnf_, dlogits_;  // dlogits_: bf16 activations only
  Buffer<float> lnf_mean_, lnf_rstd_, logits_, losses_, dlnf_;
  Buffer<int32_t> targets_;
  std::vector<float> tp_host_;  // staging for TP all-reduces of a device's memory
  size_t live_bytes_ = 0, peak_bytes_ = 0;
  double recompute_s_ = 0;
  std::unique_ptr<ContextAttention> cp_attn_;  // cp > 1
  // Mixture of experts: the layer code, the expert buffers and what the step recorded.
  std::unique_ptr<MoeLayer> moe_;
  std::vector<ParamSlot> expert_slots_;
  size_t num_expert_params_ = 0;
  Buffer<float> expert_params_, expert_grads_;
  double aux_loss_ = 0;
  double aux_scale_ = 0;  // the backward under way: its forward's loss scale x B x seq_len (moe_layer.h)
  std::map<int, std::vector<int64_t>> moe_load_;
  int64_t moe_dropped_ = 0;
  bool recomputing_ = false;  // inside backward's repeated forward: statistics are not counted again
};

}  // namespace stagecraft::runtime
