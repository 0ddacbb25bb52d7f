// ModelDesc: the one description of a model that the whole product reads — the cost model, the
// balanced partition, the engine's stages, checkpoints and the window. For an architecture it
// gives every parameter tensor (its Hugging Face name, full shape, how Megatron 1D tensor
// parallelism splits it, its role in the layer, its initialisation and optimizer group), the
// parameter counts, the GEMMs and FLOPs of a layer, the element-wise traffic and the activations
// a layer keeps. Nothing else spells a formula or a tensor name: adding an architecture is one
// description here plus its kernels.
//
// Legend: L layers, C = h hidden, NH query heads, NKV key/value heads, HS head size (C / NH),
// Q = NH HS and K = NKV HS the query and key/value widths, F ffn_hidden, V vocabulary, P
// positions (seq_len), t the TP size.
//
// Architectures (model.arch):
//   gpt2  Hugging Face GPT-2 (GPT2LMHeadModel): pre-LayerNorm, learned positions, GELU (tanh) MLP,
//         biases everywhere, packed c_attn, weights stored (in, out) as Conv1D; tied head by
//         default. Tensors:
//           wte.weight [V, C]  wpe.weight [P, C]                                  replicated
//           h.{i}.ln_1.weight/bias [C]   h.{i}.ln_2.weight/bias [C]               replicated
//           h.{i}.attn.c_attn.weight [C, 3C]  .bias [3C]  column-parallel by head: TP rank r holds
//                columns [rC/t, (r+1)C/t) of each of the q, k and v thirds
//           h.{i}.attn.c_proj.weight [C, C]  row-parallel; .bias [C] replicated
//           h.{i}.mlp.c_fc.weight [C, F]  .bias [F]       column-parallel
//           h.{i}.mlp.c_proj.weight [F, C]  row-parallel; .bias [C] replicated
//           ln_f.weight/bias [C]                                                  replicated
//           lm_head.weight [V, C]   untied only                                   replicated
//         Initialisation: weights N(0, 0.02), the two c_proj weights N(0, 0.02 / sqrt(2 L)),
//         biases 0, LayerNorm weights 1.
//   llama Hugging Face Llama (LlamaForCausalLM; Qwen2ForCausalLM with model.qkv_bias): RMSNorm,
//         rotary positions (rotate-half), SwiGLU MLP, grouped-query attention, no biases but the
//         optional q/k/v ones, weights stored (out, in) as nn.Linear. Tensors:
//           model.embed_tokens.weight [V, C]                                      replicated
//           model.layers.{i}.input_layernorm.weight [C]                           replicated
//           model.layers.{i}.self_attn.q_proj.weight [Q, C]   column-parallel (rows split)
//           model.layers.{i}.self_attn.k_proj.weight [K, C]   column-parallel (kv heads split)
//           model.layers.{i}.self_attn.v_proj.weight [K, C]   column-parallel
//           model.layers.{i}.self_attn.{q,k,v}_proj.bias [Q], [K], [K]   qkv_bias only, split so
//           model.layers.{i}.self_attn.o_proj.weight [C, Q]   row-parallel (columns split)
//           model.layers.{i}.post_attention_layernorm.weight [C]                  replicated
//           model.layers.{i}.mlp.gate_proj.weight [F, C]      column-parallel
//           model.layers.{i}.mlp.up_proj.weight [F, C]        column-parallel
//           model.layers.{i}.mlp.down_proj.weight [C, F]      row-parallel
//           model.norm.weight [C]                                                 replicated
//           lm_head.weight [V, C]   untied only                                   replicated
//         With model.qk_norm (Qwen3), after o_proj:
//           model.layers.{i}.self_attn.q_norm.weight [HS]  .k_norm.weight [HS]   replicated
//         model.head_dim sets HS apart from C / NH (Qwen3: Q = NH HS need not be C).
//         Mixture of experts (model.moe, Qwen3-MoE's names): layer i >= dense_layers has, in place
//         of the dense MLP, with E experts of width FE and S shared ones of width FS each:
//           model.layers.{i}.mlp.gate.weight [E, C]                               replicated (router)
//           model.layers.{i}.mlp.experts.{j}.gate_proj.weight [FE, C]  .up_proj [FE, C]
//                .down_proj [C, FE]       j < E; split as the dense MLP's
//           model.layers.{i}.mlp.shared_experts.gate_proj.weight [S FS, C]  .up_proj [S FS, C]
//                .down_proj [C, S FS]     S > 0 only, the shared experts as one MLP (DeepSeek's)
//         A token passes the router, top_k of the E experts and every shared one: a layer's
//         active parameters count top_k experts, its total all E.
//         Initialisation (transformers' LlamaPreTrainedModel): every matrix N(0, 0.02), biases 0,
//         norm weights 1.
//
// Fused groups: q, k and v (and their biases), and gate and up, are listed next to each other, so
// a rank's shards of them lie side by side in its flat buffer and form one (Q + 2K)/t x C (or
// 2F/t x C) matrix in (out, in) layout: one GEMM each, whose output is q | k | v (gate | up).
//
// Each element's initial value is a function of (seed, tensor name, full element index), so a
// shard or a stage initialises exactly as the whole model would.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"

namespace stagecraft::model {

enum class Arch { kGpt2, kLlama };

// The architecture model.arch names ("gpt" is gpt2's older name); nullopt for another name.
std::optional<Arch> parse_arch(std::string_view name);

enum class Split {
  kReplicated,  // every TP rank holds all of it
  kColumn,      // last dimension split in t contiguous parts
  kQkvColumn,   // last dimension is q | k | v; each third split in t parts (heads): GPT-2's c_attn
  kRow,         // first dimension split in t contiguous parts
};

enum class Place { kFirstStage, kLayer, kLastStage };

// What a tensor is to the layer code, which holds typed handles to its tensors by role.
enum class Role : uint8_t {
  kEmbedding,     // token embedding (V, C)
  kPositions,     // learned positions (P, C)
  kFinalNorm,     // final norm's weight
  kFinalNormBias,
  kHead,          // untied LM head (V, C)
  kNorm1,         // the attention's input norm: weight
  kNorm1Bias,
  kQkv,           // the QKV projection: GPT-2's packed c_attn, or Llama's q, k, v (parts 0, 1, 2)
  kQkvBias,
  kOut,           // attention's output projection
  kOutBias,
  kNorm2,         // the MLP's input norm: weight
  kNorm2Bias,
  kUp,            // the MLP's first projection: c_fc, or Llama's gate and up (parts 0, 1)
  kUpBias,
  kDown,          // the MLP's output projection
  kDownBias,
  kQNorm,         // Qwen3's RMSNorm over each head of q: weight (HS)
  kKNorm,         // and of k
  kRouter,        // a mixture-of-experts layer's router (E, C)
  kExpertUp,      // expert `part / 2`'s gate (part even) or up (part odd) (FE, C)
  kExpertDown,    // expert `part`'s down (C, FE)
  kSharedUp,      // the shared experts' gate (part 0) and up (part 1) (S FS, C)
  kSharedDown,    // the shared experts' down (C, S FS)
};

struct ParamSpec {
  std::string name;             // Hugging Face name
  std::vector<int64_t> shape;   // full, unsharded
  Split split = Split::kReplicated;
  Place place = Place::kLayer;
  Role role = Role::kEmbedding;
  int part = 0;                 // position in a fused group (q 0, k 1, v 2; gate 0, up 1)
  int layer = -1;               // transformer block index for kLayer
  double init_std = 0.0;        // > 0: N(0, init_std); else every element init_value
  float init_value = 0.0f;
  bool weight_decay = false;    // AdamW decays matrices, not biases or norms
  uint64_t id = 0;              // stable per name, for the initialisation streams

  int64_t numel() const;
};

// One GEMM of a layer's forward, per token: out (n) = in (k) W. Under Megatron 1D TP a column-
// parallel GEMM splits n, a row-parallel one k.
struct LayerGemm {
  const char* name;
  double n = 0, k = 0;
  bool row_parallel = false;
  bool routed = false;  // a routed experts' GEMM: top_k experts' side by side (the cost model runs
                        // them per expert at the tokens each receives, over ep and expert_tp)
};

// Element-wise traffic of one layer's forward, in elements per token (each read and write
// counted): `replicated` is held whole by every TP rank under 1D TP (sharded with sequence
// parallelism), `sharded` is split t ways; `kernels` the element-wise launches.
// An MoE layer's routed experts are apart in `routed` (per token, for its top_k experts: SwiGLU
// over their widths and the permutation of the token's copies to them and back), since their
// tokens follow the router rather than the tp split.
struct LayerTraffic {
  double replicated = 0, sharded = 0;
  int kernels = 0;
  double routed = 0;
};

// Activations one layer keeps for its backward, in elements per token, as Korthikanti et al.
// 2022 count them (Table 2): `replicated` under 1D TP (the norms' inputs, the QKV and MLP inputs),
// `sharded` split t ways (q k v, attention's output, the MLP's hidden activations), besides
// attention's core (scores, or flash attention's statistics), which the estimate counts by head.
// An MoE layer's routed experts keep, per token, `routed_input` (the top_k copies of the token
// that the experts' first GEMM read: k C) and `routed` (gate | up and SwiGLU's output of each:
// 3 k FE), and the router `router` (its logits and probabilities, 2 E); neither is in `sharded`.
struct LayerActivations {
  double replicated = 0, sharded = 0;
  double routed_input = 0, routed = 0, router = 0;
};

// A layer's parameters by how they shard: whole on every tp rank (norms, the router, row-parallel
// biases), split over tp (attention, the dense MLP, the shared experts), and the routed experts'
// (split over ep and expert_tp; model::sharding_of's `expert`).
struct LayerParamSplit {
  double replicated = 0, tp_split = 0, expert = 0;
  double total() const { return replicated + tp_split + expert; }
};

struct ModelDesc {
  Arch arch = Arch::kGpt2;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, seq = 0, vocab = 0;
  bool tied = true;
  bool qkv_bias = false;        // llama: biases on q, k and v (Qwen2)
  double rope_theta = 10000.0;  // llama
  double norm_eps = 1e-5;
  bool qk_norm = false;         // llama: RMSNorm over each head of q and k (Qwen3)
  // Mixture of experts (llama): experts 0 = every layer dense.
  int experts = 0, top_k = 0, expert_ffn = 0, shared_experts = 0, shared_ffn = 0, dense_layers = 0;

  static ModelDesc from(const config::ModelConfig& m);

  bool moe() const { return experts > 0; }
  // Whether layer i's MLP is a mixture of experts (else the dense MLP of ffn).
  bool moe_layer(int i) const { return moe() && i >= dense_layers; }
  // The layer the per-layer figures below describe: an MoE layer when the model has experts.
  int typical_layer() const { return moe() ? std::max(0, layers - 1) : 0; }
  // The MLP width a token passes through in layer i: ffn, or top_k experts' plus the shared ones'.
  double active_mlp_width(int i) const {
    return moe_layer(i) ? static_cast<double>(top_k) * expert_ffn + static_cast<double>(shared_experts) * shared_ffn : ffn;
  }

  bool llama() const { return arch == Arch::kLlama; }
  bool learned_positions() const { return arch == Arch::kGpt2; }
  bool rmsnorm() const { return arch == Arch::kLlama; }
  bool swiglu() const { return arch == Arch::kLlama; }
  bool rope() const { return arch == Arch::kLlama; }
  bool norm_bias() const { return arch == Arch::kGpt2; }
  // Weights stored (out, in), as nn.Linear (Llama), or (in, out), as GPT-2's Conv1D.
  bool weights_out_in() const { return arch == Arch::kLlama; }
  const char* name() const { return arch == Arch::kLlama ? "llama" : "gpt2"; }

  int q_width() const { return heads * head_dim; }
  int kv_width() const { return kv_heads * head_dim; }
  int qkv_width() const { return q_width() + 2 * kv_width(); }
  // The MLP's first projection's output width: F, or gate | up = 2F.
  int up_width() const { return swiglu() ? 2 * ffn : ffn; }

  // Every parameter in Hugging Face order: the embeddings, layer 0 ... L-1, the final norm (and
  // the untied head).
  std::vector<ParamSpec> params() const;

  // Parameter counts, unsharded: a layer (layer i, or the typical layer: an MoE layer's with
  // every expert), the first stage's embeddings, the last stage's final norm and untied head, the
  // whole model (a tied embedding counted once).
  double layer_params() const { return layer_params(typical_layer()); }
  double layer_params(int i) const;
  double embedding_params() const;
  double head_params() const;
  double total_params() const;
  // The parameters one token passes through: layer i's without the experts the router does not
  // pick (E - top_k of them), and the whole model's so (the embedding as its row, counted whole as
  // Mixtral's and Qwen3's "active parameters" count it). Equal to the totals without experts.
  double active_layer_params(int i) const;
  double active_params() const;
  // One layer's parameters on one rank of Megatron 1D TP of size t: split tensors / t, the
  // replicated (norms, row-parallel biases, the router) whole.
  double layer_params_1d(double t) const { return layer_params_1d(t, typical_layer()); }
  double layer_params_1d(double t, int i) const;
  // Layer i's parameters by how they shard (LayerParamSplit); one listing of the layer.
  LayerParamSplit layer_param_split(int i) const;
  // The token embedding (or the untied head's matrix): V C.
  double vocab_matrix() const { return static_cast<double>(vocab) * hidden; }

  // A layer's forward GEMMs at their real shapes, and the FLOPs (2 per multiply-add) of one
  // sample of `seq` tokens: GEMMs plus attention's QK^T and AV over all query heads (s^2 per
  // head, the causal half not subtracted, as Narayanan et al. 2021 count). An MoE layer's are
  // the active ones a token passes: the router, top_k experts' GEMMs side by side as one of
  // top_k times the width, and the shared experts'. The typical layer's (an MoE one) unless i.
  std::vector<LayerGemm> layer_gemms() const { return layer_gemms(typical_layer()); }
  std::vector<LayerGemm> layer_gemms(int i) const;
  double layer_gemm_flops_per_token() const { return layer_gemm_flops_per_token(typical_layer()); }
  double layer_gemm_flops_per_token(int i) const;
  double attention_flops(double seq_len) const { return 4.0 * seq_len * seq_len * q_width(); }
  double layer_forward_flops() const { return layer_forward_flops(typical_layer()); }
  double layer_forward_flops(int i) const;
  // The forward FLOPs of one sample through every layer: the dense ones' and the MoE ones'.
  double model_layers_forward_flops() const;
  double head_forward_flops() const { return 2.0 * seq * hidden * static_cast<double>(vocab); }
  // The embedding lookup's traffic per token, forward and backward, in elements (the position
  // add of learned positions included).
  double embedding_traffic() const { return learned_positions() ? 6.0 * hidden : 4.0 * hidden; }
  LayerTraffic layer_traffic() const { return layer_traffic(typical_layer()); }
  LayerTraffic layer_traffic(int i) const;
  LayerActivations layer_activations() const { return layer_activations(typical_layer()); }
  LayerActivations layer_activations(int i) const;

  // One line for people: "llama: 32 layers, hidden 4096, 32 heads (8 key/value), FFN 14336
  // (SwiGLU), vocabulary 128256, untied head"; an MoE model's adds "8 experts of FFN 14336, top 2".
  std::string summary() const;
};

// ---- Which ranks hold which part of a parameter: the one place the gradient norm, ZeRO,
// checkpoints and the cost model's memory count from. ----
//
// A parameter is split over tp by its Split (kReplicated: whole on every tp rank), sits on the
// pipeline stage of its layer (Place), and is replicated over the replica axes, dp and cp: their
// ranks hold the same values, sum its gradient, and are the group parallel.zero shards it over
// (plan::gradient_axes). A new axis is a name in config::Axis plus its line here.
inline constexpr config::Axis kReplicaAxes[] = {config::Axis::kDp, config::Axis::kCp};
//
// A routed expert's tensors (kExpertUp, kExpertDown) follow the expert layers' mapping instead
// (plan/topology.h): each ep rank holds experts / ep whole experts, tp_split means split over
// parallel.expert_tp, and the ranks that hold the same shard are one expert-dp group
// (replicated_over empty: no dense axis). The router and the shared experts are dense tensors.
struct ParamSharding {
  bool tp_split = false;                      // split over the tp (experts: expert_tp) ranks, else a whole copy on each
  std::vector<config::Axis> replicated_over;  // the axes whose ranks hold the same shard
  bool expert = false;                        // a routed expert's: split over ep, replicated over expert-dp
};
ParamSharding sharding_of(const ParamSpec& p);
// Whether TP rank `tp_rank` adds p's gradient to the global norm, so that every element counts
// once over the tp ranks: a split tensor on each, a whole one on tp rank 0; `head_copy` (the last
// stage's copy of a tied embedding) never, the first stage's counts it. Over the replica axes
// the optimizer adds one replica's, or every ZeRO shard once.
bool counts_in_norm(const ParamSpec& p, int tp_rank, bool head_copy);

// Shape of TP rank's shard.
std::vector<int64_t> shard_shape(const ParamSpec& p, int tp);
int64_t shard_numel(const ParamSpec& p, int tp);
// Flat index in the full tensor of element `i` of TP rank's shard.
int64_t full_index(const ParamSpec& p, int tp, int tp_rank, int64_t i);
// Copy a shard out of a full tensor and back.
void extract_shard(const ParamSpec& p, int tp, int tp_rank, const float* full, float* shard);
void insert_shard(const ParamSpec& p, int tp, int tp_rank, const float* shard, float* full);

// The Hugging Face class a model is written as (checkpoints, config.json): GPT2LMHeadModel;
// LlamaForCausalLM, or Qwen2ForCausalLM for a llama with q/k/v biases; a mixture of experts as
// MixtralForCausalLM where it has Mixtral's form (every layer sparse, no shared experts, experts as
// wide as model.ffn_hidden, the top k renormalised, no q/k/v biases or norms), else
// Qwen3MoeForCausalLM (Qwen3-MoE's names, which the description uses).
std::string hf_architecture(const config::ModelConfig& model);
// A tensor's name in the checkpoint files of `model` (any prefix, such as "exp_avg.", kept): the
// description's, or for a Mixtral the MoE layers' under Mixtral's names:
//   model.layers.{i}.mlp.gate.weight                -> model.layers.{i}.block_sparse_moe.gate.weight
//   model.layers.{i}.mlp.experts.{j}.gate_proj.weight -> ...block_sparse_moe.experts.{j}.w1.weight
//   up_proj -> w3, down_proj -> w2
std::string hf_file_name(const config::ModelConfig& model, const std::string& name);
// The description's name of a tensor named either way: Mixtral's mapped back, others as they are.
std::string description_name(const std::string& file_name);

// The Hugging Face config.json of the model (hf_architecture's class). A Qwen3MoeForCausalLM adds
// the shared experts as num_shared_experts and shared_expert_intermediate_size, which
// transformers' Qwen3-MoE does not have.
std::string hf_config_json(const config::ModelConfig& model);

}  // namespace stagecraft::model
