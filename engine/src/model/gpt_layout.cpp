// The GPT-2 parameter table and its tensor-parallel shards. See gpt_layout.h.
#include "stagecraft/model/gpt_layout.h"

#include <cmath>
#include <cstring>

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

std::vector<ParamSpec> gpt_params(const config::ModelConfig& m) {
  const int64_t C = m.hidden, F = m.ffn(), V = m.vocab, P = m.seq_len;
  const double std_w = 0.02;
  const double std_proj = 0.02 / std::sqrt(2.0 * m.layers);
  std::vector<ParamSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, Split split, Place place, int layer, double stdv, float value) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.split = split;
    p.place = place;
    p.layer = layer;
    p.init_std = stdv;
    p.init_value = value;
    p.weight_decay = p.shape.size() == 2;
    p.id = fnv1a(p.name);
    out.push_back(std::move(p));
  };
  add("wte.weight", {V, C}, Split::kReplicated, Place::kFirstStage, -1, std_w, 0);
  add("wpe.weight", {P, C}, Split::kReplicated, Place::kFirstStage, -1, std_w, 0);
  for (int i = 0; i < m.layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", {C}, Split::kReplicated, Place::kLayer, i, 0, 1);
    add(h + "ln_1.bias", {C}, Split::kReplicated, Place::kLayer, i, 0, 0);
    add(h + "attn.c_attn.weight", {C, 3 * C}, Split::kQkvColumn, Place::kLayer, i, std_w, 0);
    add(h + "attn.c_attn.bias", {3 * C}, Split::kQkvColumn, Place::kLayer, i, 0, 0);
    add(h + "attn.c_proj.weight", {C, C}, Split::kRow, Place::kLayer, i, std_proj, 0);
    add(h + "attn.c_proj.bias", {C}, Split::kReplicated, Place::kLayer, i, 0, 0);
    add(h + "ln_2.weight", {C}, Split::kReplicated, Place::kLayer, i, 0, 1);
    add(h + "ln_2.bias", {C}, Split::kReplicated, Place::kLayer, i, 0, 0);
    add(h + "mlp.c_fc.weight", {C, F}, Split::kColumn, Place::kLayer, i, std_w, 0);
    add(h + "mlp.c_fc.bias", {F}, Split::kColumn, Place::kLayer, i, 0, 0);
    add(h + "mlp.c_proj.weight", {F, C}, Split::kRow, Place::kLayer, i, std_proj, 0);
    add(h + "mlp.c_proj.bias", {C}, Split::kReplicated, Place::kLayer, i, 0, 0);
  }
  add("ln_f.weight", {C}, Split::kReplicated, Place::kLastStage, -1, 0, 1);
  add("ln_f.bias", {C}, Split::kReplicated, Place::kLastStage, -1, 0, 0);
  if (!m.tied_embeddings) add("lm_head.weight", {V, C}, Split::kReplicated, Place::kLastStage, -1, std_w, 0);
  return out;
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

std::string hf_config_json(const config::ModelConfig& m) {
  Json j = Json::object();
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
