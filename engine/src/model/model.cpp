// The model description: tensors, counts, FLOPs and shards of every architecture. See model.h.
#include "stagecraft/model/model.h"

#include <cmath>
#include <iterator>
#include <cstring>
#include <optional>
#include <string_view>

#include "stagecraft/core/json.h"

namespace stagecraft::model {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<Arch> parse_arch(std::string_view name) {
  if (name == "gpt2" || name == "gpt") return Arch::kGpt2;
  if (name == "llama") return Arch::kLlama;
  return std::nullopt;
}

ModelDesc ModelDesc::from(const config::ModelConfig& m) {
  ModelDesc d;
  d.arch = parse_arch(m.arch).value_or(Arch::kGpt2);
  d.layers = m.layers;
  d.hidden = m.hidden;
  d.heads = m.heads;
  d.kv_heads = m.kv();
  d.head_dim = m.head_size();
  d.ffn = m.ffn();
  d.seq = m.seq_len;
  d.vocab = m.vocab;
  d.tied = m.tied_embeddings;
  d.qkv_bias = d.llama() && m.qkv_bias;
  d.rope_theta = m.rope_theta;
  d.norm_eps = m.norm_eps;
  d.qk_norm = d.llama() && m.qk_norm;
  if (d.llama() && m.moe.enabled()) {
    d.experts = m.moe.experts;
    d.top_k = m.moe.top_k;
    d.expert_ffn = m.moe_ffn();
    d.shared_experts = m.moe.shared_experts;
    d.shared_ffn = m.moe.shared_experts > 0 ? m.moe_shared_ffn() : 0;
    d.dense_layers = m.moe.dense_layers;
  }
  return d;
}

namespace {

// Appends the tensors of one architecture's part to `out`. `layer` < 0: the embeddings (first)
// or the final norm and head (last).
class Lister {
 public:
  Lister(const ModelDesc& d, std::vector<ParamSpec>& out) : d_(d), out_(out) {}

  void embeddings() {
    const int64_t V = d_.vocab, C = d_.hidden;
    if (d_.llama()) {
      add("model.embed_tokens.weight", {V, C}, Split::kReplicated, Place::kFirstStage, Role::kEmbedding, 0, -1, kStd, 0);
    } else {
      add("wte.weight", {V, C}, Split::kReplicated, Place::kFirstStage, Role::kEmbedding, 0, -1, kStd, 0);
      add("wpe.weight", {static_cast<int64_t>(d_.seq), C}, Split::kReplicated, Place::kFirstStage, Role::kPositions, 0, -1, kStd, 0);
    }
  }

  void layer(int i) {
    const int64_t C = d_.hidden, F = d_.ffn;
    if (d_.llama()) {
      const int64_t Q = d_.q_width(), K = d_.kv_width();
      const std::string h = "model.layers." + std::to_string(i) + ".";
      add(h + "input_layernorm.weight", {C}, Split::kReplicated, Place::kLayer, Role::kNorm1, 0, i, 0, 1);
      add(h + "self_attn.q_proj.weight", {Q, C}, Split::kRow, Place::kLayer, Role::kQkv, 0, i, kStd, 0);
      add(h + "self_attn.k_proj.weight", {K, C}, Split::kRow, Place::kLayer, Role::kQkv, 1, i, kStd, 0);
      add(h + "self_attn.v_proj.weight", {K, C}, Split::kRow, Place::kLayer, Role::kQkv, 2, i, kStd, 0);
      if (d_.qkv_bias) {
        add(h + "self_attn.q_proj.bias", {Q}, Split::kRow, Place::kLayer, Role::kQkvBias, 0, i, 0, 0);
        add(h + "self_attn.k_proj.bias", {K}, Split::kRow, Place::kLayer, Role::kQkvBias, 1, i, 0, 0);
        add(h + "self_attn.v_proj.bias", {K}, Split::kRow, Place::kLayer, Role::kQkvBias, 2, i, 0, 0);
      }
      add(h + "self_attn.o_proj.weight", {C, Q}, Split::kColumn, Place::kLayer, Role::kOut, 0, i, kStd, 0);
      if (d_.qk_norm) {
        const int64_t HS = d_.head_dim;
        add(h + "self_attn.q_norm.weight", {HS}, Split::kReplicated, Place::kLayer, Role::kQNorm, 0, i, 0, 1);
        add(h + "self_attn.k_norm.weight", {HS}, Split::kReplicated, Place::kLayer, Role::kKNorm, 0, i, 0, 1);
      }
      add(h + "post_attention_layernorm.weight", {C}, Split::kReplicated, Place::kLayer, Role::kNorm2, 0, i, 0, 1);
      if (!d_.moe_layer(i)) {
        add(h + "mlp.gate_proj.weight", {F, C}, Split::kRow, Place::kLayer, Role::kUp, 0, i, kStd, 0);
        add(h + "mlp.up_proj.weight", {F, C}, Split::kRow, Place::kLayer, Role::kUp, 1, i, kStd, 0);
        add(h + "mlp.down_proj.weight", {C, F}, Split::kColumn, Place::kLayer, Role::kDown, 0, i, kStd, 0);
        return;
      }
      const int64_t E = d_.experts, FE = d_.expert_ffn;
      add(h + "mlp.gate.weight", {E, C}, Split::kReplicated, Place::kLayer, Role::kRouter, 0, i, kStd, 0);
      for (int j = 0; j < d_.experts; ++j) {
        const std::string e = h + "mlp.experts." + std::to_string(j) + ".";
        add(e + "gate_proj.weight", {FE, C}, Split::kRow, Place::kLayer, Role::kExpertUp, 2 * j, i, kStd, 0);
        add(e + "up_proj.weight", {FE, C}, Split::kRow, Place::kLayer, Role::kExpertUp, 2 * j + 1, i, kStd, 0);
        add(e + "down_proj.weight", {C, FE}, Split::kColumn, Place::kLayer, Role::kExpertDown, j, i, kStd, 0);
      }
      if (d_.shared_experts > 0) {
        const int64_t FS = static_cast<int64_t>(d_.shared_experts) * d_.shared_ffn;
        add(h + "mlp.shared_experts.gate_proj.weight", {FS, C}, Split::kRow, Place::kLayer, Role::kSharedUp, 0, i, kStd, 0);
        add(h + "mlp.shared_experts.up_proj.weight", {FS, C}, Split::kRow, Place::kLayer, Role::kSharedUp, 1, i, kStd, 0);
        add(h + "mlp.shared_experts.down_proj.weight", {C, FS}, Split::kColumn, Place::kLayer, Role::kSharedDown, 0, i, kStd, 0);
      }
      return;
    }
    const double std_proj = kStd / std::sqrt(2.0 * d_.layers);
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", {C}, Split::kReplicated, Place::kLayer, Role::kNorm1, 0, i, 0, 1);
    add(h + "ln_1.bias", {C}, Split::kReplicated, Place::kLayer, Role::kNorm1Bias, 0, i, 0, 0);
    add(h + "attn.c_attn.weight", {C, 3 * C}, Split::kQkvColumn, Place::kLayer, Role::kQkv, 0, i, kStd, 0);
    add(h + "attn.c_attn.bias", {3 * C}, Split::kQkvColumn, Place::kLayer, Role::kQkvBias, 0, i, 0, 0);
    add(h + "attn.c_proj.weight", {C, C}, Split::kRow, Place::kLayer, Role::kOut, 0, i, std_proj, 0);
    add(h + "attn.c_proj.bias", {C}, Split::kReplicated, Place::kLayer, Role::kOutBias, 0, i, 0, 0);
    add(h + "ln_2.weight", {C}, Split::kReplicated, Place::kLayer, Role::kNorm2, 0, i, 0, 1);
    add(h + "ln_2.bias", {C}, Split::kReplicated, Place::kLayer, Role::kNorm2Bias, 0, i, 0, 0);
    add(h + "mlp.c_fc.weight", {C, F}, Split::kColumn, Place::kLayer, Role::kUp, 0, i, kStd, 0);
    add(h + "mlp.c_fc.bias", {F}, Split::kColumn, Place::kLayer, Role::kUpBias, 0, i, 0, 0);
    add(h + "mlp.c_proj.weight", {F, C}, Split::kRow, Place::kLayer, Role::kDown, 0, i, std_proj, 0);
    add(h + "mlp.c_proj.bias", {C}, Split::kReplicated, Place::kLayer, Role::kDownBias, 0, i, 0, 0);
  }

  void head() {
    const int64_t V = d_.vocab, C = d_.hidden;
    if (d_.llama()) {
      add("model.norm.weight", {C}, Split::kReplicated, Place::kLastStage, Role::kFinalNorm, 0, -1, 0, 1);
    } else {
      add("ln_f.weight", {C}, Split::kReplicated, Place::kLastStage, Role::kFinalNorm, 0, -1, 0, 1);
      add("ln_f.bias", {C}, Split::kReplicated, Place::kLastStage, Role::kFinalNormBias, 0, -1, 0, 0);
    }
    if (!d_.tied) add("lm_head.weight", {V, C}, Split::kReplicated, Place::kLastStage, Role::kHead, 0, -1, kStd, 0);
  }

 private:
  static constexpr double kStd = 0.02;  // both architectures' initializer_range

  void add(std::string name, std::vector<int64_t> shape, Split split, Place place, Role role, int part, int layer, double stdv,
           float value) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.split = split;
    p.place = place;
    p.role = role;
    p.part = part;
    p.layer = layer;
    p.init_std = stdv;
    p.init_value = value;
    p.weight_decay = p.shape.size() == 2;
    p.id = fnv1a(p.name);
    out_.push_back(std::move(p));
  }

  const ModelDesc& d_;
  std::vector<ParamSpec>& out_;
};

double sum_numel(const std::vector<ParamSpec>& ps) {
  double n = 0;
  for (const auto& p : ps) n += static_cast<double>(p.numel());
  return n;
}

}  // namespace

std::vector<ParamSpec> ModelDesc::params() const {
  std::vector<ParamSpec> out;
  Lister l(*this, out);
  l.embeddings();
  for (int i = 0; i < layers; ++i) l.layer(i);
  l.head();
  return out;
}

double ModelDesc::layer_params(int i) const {
  std::vector<ParamSpec> ps;
  Lister(*this, ps).layer(i);
  return sum_numel(ps);
}

// Only the MoE layers differ from one another by what they hold, and all of them alike: the
// counts of one dense and one MoE layer stand for every layer.
double ModelDesc::total_params() const {
  double n = embedding_params() + head_params();
  if (layers <= 0) return n;
  const int moe_layers = moe() ? std::max(0, layers - std::min(dense_layers, layers)) : 0;
  if (moe_layers > 0) n += moe_layers * layer_params(layers - 1);
  if (layers - moe_layers > 0) n += (layers - moe_layers) * layer_params(0);
  return n;
}

double ModelDesc::active_layer_params(int i) const {
  const double n = layer_params(i);
  if (!moe_layer(i)) return n;
  // One expert's gate, up and down: 3 FE C.
  return n - static_cast<double>(experts - top_k) * 3.0 * expert_ffn * hidden;
}

double ModelDesc::active_params() const {
  double n = embedding_params() + head_params();
  if (layers <= 0) return n;
  const int moe_layers = moe() ? std::max(0, layers - std::min(dense_layers, layers)) : 0;
  if (moe_layers > 0) n += moe_layers * active_layer_params(layers - 1);
  if (layers - moe_layers > 0) n += (layers - moe_layers) * active_layer_params(0);
  return n;
}

double ModelDesc::layer_params_1d(double t, int i) const {
  std::vector<ParamSpec> ps;
  Lister(*this, ps).layer(i);
  double n = 0;
  for (const auto& p : ps) n += static_cast<double>(p.numel()) / (p.split == Split::kReplicated ? 1.0 : t);
  return n;
}

LayerParamSplit ModelDesc::layer_param_split(int i) const {
  std::vector<ParamSpec> ps;
  Lister(*this, ps).layer(i);
  LayerParamSplit out;
  for (const auto& p : ps) {
    const auto n = static_cast<double>(p.numel());
    const ParamSharding sh = sharding_of(p);
    (sh.expert ? out.expert : sh.tp_split ? out.tp_split : out.replicated) += n;
  }
  return out;
}

double ModelDesc::embedding_params() const {
  std::vector<ParamSpec> ps;
  Lister(*this, ps).embeddings();
  return sum_numel(ps);
}

double ModelDesc::head_params() const {
  std::vector<ParamSpec> ps;
  Lister(*this, ps).head();
  return sum_numel(ps);
}

std::vector<LayerGemm> ModelDesc::layer_gemms(int i) const {
  const double C = hidden, F = ffn;
  std::vector<LayerGemm> g = {{"qkv", static_cast<double>(qkv_width()), C, false},
                              {"attention out", C, static_cast<double>(q_width()), true}};
  if (!moe_layer(i)) {
    g.push_back({swiglu() ? "gate and up" : "fc1", static_cast<double>(up_width()), C, false});
    g.push_back({swiglu() ? "down" : "fc2", C, F, true});
    return g;
  }
  // The router's weight is replicated, so every TP rank computes all E logits; at E C per token
  // it is small beside the experts, and the estimate splits it t ways like the GEMMs beside it.
  const double FE = static_cast<double>(top_k) * expert_ffn;
  g.push_back({"router", static_cast<double>(experts), C, false});
  g.push_back({"experts gate and up", 2.0 * FE, C, false, true});
  g.push_back({"experts down", C, FE, true, true});
  if (shared_experts > 0) {
    const double FS = static_cast<double>(shared_experts) * shared_ffn;
    g.push_back({"shared gate and up", 2.0 * FS, C, false});
    g.push_back({"shared down", C, FS, true});
  }
  return g;
}

double ModelDesc::layer_gemm_flops_per_token(int i) const {
  double f = 0;
  for (const auto& g : layer_gemms(i)) f += 2.0 * g.n * g.k;
  return f;
}

double ModelDesc::layer_forward_flops(int i) const { return seq * layer_gemm_flops_per_token(i) + attention_flops(seq); }

double ModelDesc::model_layers_forward_flops() const {
  if (layers <= 0) return 0.0;
  const int moe_layers = moe() ? std::max(0, layers - std::min(dense_layers, layers)) : 0;
  double f = 0;
  if (moe_layers > 0) f += moe_layers * layer_forward_flops(layers - 1);
  if (layers - moe_layers > 0) f += (layers - moe_layers) * layer_forward_flops(0);
  return f;
}

// GPT-2: two LayerNorms 4 C and two bias + residual adds 6 C (replicated); the QKV bias and the
// heads' split and merge 6 C, bias + GELU 2 F (sharded). Llama: two RMSNorms and two residual
// adds, the same 10 C; the heads' split and merge 2 (Q + 2K), RoPE over q and k 2 (Q + K), SwiGLU
// reading gate | up and writing its product 3 F.
// An MoE layer: the shared experts' SwiGLU in `sharded` (3 S FS), the routed experts' apart, per
// token: SwiGLU over top_k widths (3 k FE) and the permutation of its k copies to the experts and
// back (read and write k C each way: 4 k C).
LayerTraffic ModelDesc::layer_traffic(int i) const {
  const double C = hidden;
  if (llama() && moe_layer(i)) {
    const double FS = static_cast<double>(shared_experts) * shared_ffn, k = top_k;
    return {10 * C, 2.0 * qkv_width() + 2.0 * (q_width() + kv_width()) + 3 * FS, 12 + (shared_experts > 0 ? 1 : 0) + 3,
            k * (3.0 * expert_ffn + 4.0 * C)};
  }
  const double F = active_mlp_width(i);
  if (llama()) return {10 * C, 2.0 * qkv_width() + 2.0 * (q_width() + kv_width()) + 3 * F, 12};
  return {10 * C, 6 * C + 2 * F, 11};
}

// GPT-2: the two LayerNorms' inputs, QKV's input and fc1's input (4 C) replicated; q k v 3 C,
// attention-out's input C, GELU's input and output 2 F sharded. Llama: the same four replicated;
// q k v (Q + 2K), attention-out's input Q, gate | up 2 F and SwiGLU's output F sharded.
// An MoE layer: the shared experts' 3 S FS in `sharded`, the routed experts' top_k copies of the
// token (k C) and their 3 k FE, and the router's logits and probabilities (2 E) apart.
LayerActivations ModelDesc::layer_activations(int i) const {
  const double C = hidden;
  if (llama() && moe_layer(i)) {
    const double FS = static_cast<double>(shared_experts) * shared_ffn, k = top_k;
    return {4 * C, static_cast<double>(qkv_width()) + q_width() + 3 * FS, k * C, 3.0 * k * expert_ffn, 2.0 * experts};
  }
  const double F = active_mlp_width(i);
  if (llama()) return {4 * C, static_cast<double>(qkv_width()) + q_width() + 3 * F};
  return {4 * C, 4 * C + 2 * F};
}

std::string ModelDesc::summary() const {
  std::string s = std::string(name()) + ": " + std::to_string(layers) + " layers, hidden " + std::to_string(hidden) + ", " +
                  std::to_string(heads) + " heads";
  if (kv_heads != heads) s += " (" + std::to_string(kv_heads) + " key/value)";
  s += ", FFN " + std::to_string(ffn) + (swiglu() ? " (SwiGLU)" : " (GELU)");
  if (head_dim * heads != hidden) s += ", head size " + std::to_string(head_dim);
  if (qkv_bias) s += ", q/k/v biases";
  if (qk_norm) s += ", q/k norm";
  if (moe()) {
    s += ", " + std::to_string(experts) + " experts of FFN " + std::to_string(expert_ffn) + ", top " + std::to_string(top_k);
    if (shared_experts > 0) s += ", " + std::to_string(shared_experts) + " shared of FFN " + std::to_string(shared_ffn);
    if (dense_layers > 0) s += ", first " + std::to_string(dense_layers) + " layers dense";
  }
  s += ", vocabulary " + std::to_string(vocab) + (tied ? ", tied head" : ", untied head");
  return s;
}

ParamSharding sharding_of(const ParamSpec& p) {
  ParamSharding s;
  s.tp_split = p.split != Split::kReplicated;
  s.expert = p.role == Role::kExpertUp || p.role == Role::kExpertDown;
  if (!s.expert) s.replicated_over.assign(std::begin(kReplicaAxes), std::end(kReplicaAxes));
  return s;
}

bool counts_in_norm(const ParamSpec& p, int tp_rank, bool head_copy) {
  if (head_copy) return false;
  return sharding_of(p).tp_split || tp_rank == 0;
}

std::vector<int64_t> shard_shape(const ParamSpec& p, int tp) {
  std::vector<int64_t> s = p.shape;
  switch (p.split) {
    case Split::kReplicated: break;
    case Split::kColumn:
    case Split::kQkvColumn: s.back() /= tp; break;
    case Split::kRow: s.front() /= tp; break;
  }
  return s;
}

int64_t shard_numel(const ParamSpec& p, int tp) {
  int64_t n = 1;
  for (int64_t d : shard_shape(p, tp)) n *= d;
  return n;
}

int64_t full_index(const ParamSpec& p, int tp, int tp_rank, int64_t i) {
  switch (p.split) {
    case Split::kReplicated: return i;
    case Split::kRow: return static_cast<int64_t>(tp_rank) * shard_numel(p, tp) + i;
    case Split::kColumn: {
      const int64_t cols = p.shape.back(), local = cols / tp;
      const int64_t row = i / local, col = i % local;
      return row * cols + tp_rank * local + col;
    }
    case Split::kQkvColumn: {
      // Columns of the shard: [q part | k part | v part], each C/t wide.
      const int64_t cols = p.shape.back(), third = cols / 3, part = third / tp, local = cols / tp;
      const int64_t row = i / local, col = i % local;
      const int64_t which = col / part, within = col % part;
      return row * cols + which * third + tp_rank * part + within;
    }
  }
  return i;
}

void extract_shard(const ParamSpec& p, int tp, int tp_rank, const float* full, float* shard) {
  const int64_t n = shard_numel(p, tp);
  if (p.split == Split::kReplicated || p.split == Split::kRow) {
    std::memcpy(shard, full + full_index(p, tp, tp_rank, 0), static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) shard[i] = full[full_index(p, tp, tp_rank, i)];
}

void insert_shard(const ParamSpec& p, int tp, int tp_rank, const float* shard, float* full) {
  const int64_t n = shard_numel(p, tp);
  if (p.split == Split::kReplicated || p.split == Split::kRow) {
    std::memcpy(full + full_index(p, tp, tp_rank, 0), shard, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) full[full_index(p, tp, tp_rank, i)] = shard[i];
}

namespace {

bool mixtral_form(const config::ModelConfig& m, const ModelDesc& d) {
  return d.moe() && d.shared_experts == 0 && d.dense_layers == 0 && d.expert_ffn == d.ffn && m.moe.norm_topk && !d.qkv_bias && !d.qk_norm &&
         d.head_dim * d.heads == d.hidden;
}

// Replaces the first `from` in s by `to`; whether there was one.
bool swap_part(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) return false;
  s.replace(at, from.size(), to);
  return true;
}

}  // namespace

std::string hf_architecture(const config::ModelConfig& m) {
  const ModelDesc d = ModelDesc::from(m);
  if (!d.llama()) return "GPT2LMHeadModel";
  if (d.moe()) return mixtral_form(m, d) ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM";
  return d.qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}

std::string hf_file_name(const config::ModelConfig& m, const std::string& name) {
  if (hf_architecture(m) != "MixtralForCausalLM") return name;
  std::string s = name;
  if (swap_part(s, ".mlp.gate.weight", ".block_sparse_moe.gate.weight")) return s;
  if (s.find(".mlp.experts.") == std::string::npos) return s;
  swap_part(s, ".mlp.experts.", ".block_sparse_moe.experts.");
  swap_part(s, ".gate_proj.", ".w1.") || swap_part(s, ".up_proj.", ".w3.") || swap_part(s, ".down_proj.", ".w2.");
  return s;
}

std::string description_name(const std::string& file_name) {
  std::string s = file_name;
  if (swap_part(s, ".block_sparse_moe.gate.weight", ".mlp.gate.weight")) return s;
  if (!swap_part(s, ".block_sparse_moe.experts.", ".mlp.experts.")) return s;
  swap_part(s, ".w1.", ".gate_proj.") || swap_part(s, ".w3.", ".up_proj.") || swap_part(s, ".w2.", ".down_proj.");
  return s;
}

std::string hf_config_json(const config::ModelConfig& m) {
  const ModelDesc d = ModelDesc::from(m);
  Json j = Json::object();
  if (d.llama()) {
    // transformers' LlamaConfig (Qwen2Config for q/k/v biases, which Qwen2's attention always has;
    // MixtralConfig or Qwen3MoeConfig for a mixture of experts).
    const std::string arch = hf_architecture(m);
    const bool mixtral = arch == "MixtralForCausalLM", qwen3_moe = arch == "Qwen3MoeForCausalLM";
    j.set("architectures", Json(Json::Array{Json(arch)}));
    j.set("model_type", mixtral ? "mixtral" : qwen3_moe ? "qwen3_moe" : d.qkv_bias ? "qwen2" : "llama");
    j.set("hidden_size", d.hidden);
    j.set("intermediate_size", d.ffn);
    if (mixtral) {
      j.set("num_local_experts", d.experts);
      j.set("num_experts_per_tok", d.top_k);
      j.set("router_aux_loss_coef", m.moe.aux_loss);
      j.set("output_router_logits", false);
      j.set("sliding_window", nullptr);
    } else if (qwen3_moe) {
      j.set("num_experts", d.experts);
      j.set("num_experts_per_tok", d.top_k);
      j.set("moe_intermediate_size", d.expert_ffn);
      j.set("norm_topk_prob", m.moe.norm_topk);
      j.set("router_aux_loss_coef", m.moe.aux_loss);
      j.set("output_router_logits", false);
      j.set("decoder_sparse_step", 1);
      Json::Array dense;
      for (int i = 0; i < d.dense_layers; ++i) dense.push_back(Json(i));
      j.set("mlp_only_layers", Json(dense));
      j.set("use_sliding_window", false);
      if (d.shared_experts > 0) {
        j.set("num_shared_experts", d.shared_experts);
        j.set("shared_expert_intermediate_size", d.shared_ffn);
      }
    }
    j.set("num_hidden_layers", d.layers);
    j.set("num_attention_heads", d.heads);
    j.set("num_key_value_heads", d.kv_heads);
    j.set("head_dim", d.head_dim);
    j.set("max_position_embeddings", d.seq);
    j.set("vocab_size", d.vocab);
    j.set("hidden_act", "silu");
    j.set("rms_norm_eps", d.norm_eps);
    // As transformers writes it: an integral base as a whole number, not 5e+05.
    if (d.rope_theta == std::floor(d.rope_theta) && d.rope_theta < 1e15) {
      j.set("rope_theta", static_cast<int64_t>(d.rope_theta));
    } else {
      j.set("rope_theta", d.rope_theta);
    }
    j.set("rope_scaling", nullptr);
    j.set("tie_word_embeddings", d.tied);
    if (d.qkv_bias) {
      j.set("use_sliding_window", false);
    } else if (!mixtral) {
      j.set("attention_bias", false);
      j.set("mlp_bias", false);
    }
    j.set("attention_dropout", 0.0);
    j.set("initializer_range", 0.02);
    j.set("torch_dtype", "float32");
    j.set("bos_token_id", 0);
    j.set("eos_token_id", 0);
    return j.dump(2) + "\n";
  }
  j.set("architectures", Json(Json::Array{Json("GPT2LMHeadModel")}));
  j.set("model_type", "gpt2");
  j.set("n_layer", m.layers);
  j.set("n_embd", m.hidden);
  j.set("n_head", m.heads);
  j.set("n_positions", m.seq_len);
  j.set("n_ctx", m.seq_len);
  j.set("vocab_size", m.vocab);
  if (m.ffn_hidden > 0 && m.ffn_hidden != 4 * m.hidden) {
    j.set("n_inner", m.ffn_hidden);
  } else {
    j.set("n_inner", nullptr);
  }
  j.set("activation_function", "gelu_new");
  j.set("layer_norm_epsilon", 1e-5);
  j.set("initializer_range", 0.02);
  j.set("resid_pdrop", 0.0);
  j.set("embd_pdrop", 0.0);
  j.set("attn_pdrop", 0.0);
  j.set("tie_word_embeddings", m.tied_embeddings);
  j.set("bos_token_id", m.vocab - 1);
  j.set("eos_token_id", m.vocab - 1);
  return j.dump(2) + "\n";
}

}  // namespace stagecraft::model
