// GptStage: the GPT-2 layers of one rank, forward and backward. See gpt_stage.h.
//
// Legend: B micro-batch, T sequence length, C hidden, NH heads, HS = C / NH, t TP size,
// NHl = NH / t and Cl = C / t (this rank's heads and attention width), F ffn_hidden, Fl = F / t,
// V vocabulary, BT = B * T.
#include "stagecraft/runtime/gpt_stage.h"

#include <algorithm>
#include <cstring>

#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/rng.h"

namespace stagecraft::runtime {

namespace k = cpu;

// What one layer's forward keeps for its backward, for one micro-batch.
struct GptStage::LayerActs {
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // (BT, C), (BT), (BT)
  std::vector<float> qkv;                      // (BT, 3 Cl)
  std::vector<float> att;                      // (B, NHl, T, T)
  std::vector<float> atty;                     // (BT, Cl)
  std::vector<float> res2;                     // (BT, C): x + attention output
  std::vector<float> ln2, ln2_mean, ln2_rstd;  // (BT, C), (BT), (BT)
  std::vector<float> fch, fch_gelu;            // (BT, Fl) each

  size_t bytes() const {
    return sizeof(float) * (ln1.size() + ln1_mean.size() + ln1_rstd.size() + qkv.size() + att.size() + atty.size() + res2.size() +
                            ln2.size() + ln2_mean.size() + ln2_rstd.size() + fch.size() + fch_gelu.size());
  }
};

// What forward(chunk, mb) keeps until backward(chunk, mb).
struct GptStage::ChunkActs {
  std::vector<std::vector<float>> inputs;            // per layer: its input x (BT, C)
  std::vector<std::unique_ptr<LayerActs>> layers;    // per layer, unless recomputing
  std::vector<int32_t> tokens;                       // (BT) for the embedding's backward
  std::vector<float> dhead;                          // (BT, C): gradient at the head's input
  size_t bytes = 0;
};

namespace {

size_t sz(long long v) { return static_cast<size_t>(v); }

}  // namespace

Result<std::unique_ptr<GptStage>> GptStage::create(const StageSpec& spec, TpReducer* tp) {
  const auto& m = spec.model;
  if (spec.tp < 1 || m.heads % spec.tp != 0 || m.ffn() % spec.tp != 0) {
    return Status::invalid_input("gpt: tp=" + std::to_string(spec.tp) + " must divide heads and ffn_hidden");
  }
  if (m.hidden % m.heads != 0) return Status::invalid_input("gpt: heads must divide hidden");
  if (spec.chunks.empty() || spec.chunks.size() != spec.chunk_layers.size() || spec.chunks.size() != spec.chunk_first_layer.size()) {
    return Status::internal("gpt: stage spec without chunks");
  }
  std::unique_ptr<GptStage> s(new GptStage());
  s->spec_ = spec;
  s->tp_ = tp;
  const bool first = spec.chunks.front() == 0;
  const bool last = spec.chunks.back() == spec.num_chunks - 1;
  std::vector<bool> mine(static_cast<size_t>(m.layers), false);
  for (size_t i = 0; i < spec.chunks.size(); ++i) {
    for (int l = spec.chunk_first_layer[i]; l < spec.chunk_first_layer[i] + spec.chunk_layers[i]; ++l) mine[static_cast<size_t>(l)] = true;
  }
  size_t offset = 0;
  auto add = [&](const model::ParamSpec& p, bool head_copy) {
    ParamSlot slot;
    slot.spec = p;
    slot.offset = offset;
    slot.count = static_cast<size_t>(model::shard_numel(p, spec.tp));
    slot.head_copy = head_copy;
    offset += slot.count;
    s->slot_index_[p.name + (head_copy ? "#head" : "")] = s->slots_.size();
    s->slots_.push_back(std::move(slot));
  };
  const auto params = model::gpt_params(m);
  for (const auto& p : params) {
    const bool held = (p.place == model::Place::kFirstStage && first) || (p.place == model::Place::kLastStage && last) ||
                      (p.place == model::Place::kLayer && mine[static_cast<size_t>(p.layer)]);
    if (held) add(p, false);
  }
  if (last && m.tied_embeddings && !first) add(params.front(), true);  // wte for the head
  s->params_.assign(offset, 0.0f);
  s->grads_.assign(offset, 0.0f);

  const long long B = spec.micro_batch, T = m.seq_len, C = m.hidden, NHl = m.heads / spec.tp, Cl = C / spec.tp,
                  Fl = m.ffn() / spec.tp;
  s->scratch_att_.resize(sz(B * NHl * T * T));
  s->dres_a_.resize(sz(B * T * C));
  s->dres_b_.resize(sz(B * T * C));
  s->dtmp_c_.resize(sz(B * T * C));
  s->dtmp_f_.resize(sz(B * T * Fl));
  s->dtmp_3c_.resize(sz(B * T * 3 * Cl));
  s->dtmp_cl_.resize(sz(B * T * Cl));
  return s;
}

GptStage::~GptStage() = default;

const ParamSlot* GptStage::slot(const std::string& name, bool head_copy) const {
  auto it = slot_index_.find(name + (head_copy ? "#head" : ""));
  return it == slot_index_.end() ? nullptr : &slots_[it->second];
}

void GptStage::init_parameters(uint64_t seed) {
  for (const auto& s : slots_) {
    float* dst = params_.data() + s.offset;
    const auto& p = s.spec;
    const uint64_t stream = tensor_stream(p.name);
    for (size_t i = 0; i < s.count; ++i) {
      if (p.init_std > 0) {
        const int64_t full = model::full_index(p, spec_.tp, spec_.tp_rank, static_cast<int64_t>(i));
        dst[i] = static_cast<float>(p.init_std * rng_normal(seed, stream, static_cast<uint64_t>(full)));
      } else {
        dst[i] = p.init_value;
      }
    }
  }
}

void GptStage::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

int GptStage::chunk_index(int chunk) const {
  for (size_t i = 0; i < spec_.chunks.size(); ++i) {
    if (spec_.chunks[i] == chunk) return static_cast<int>(i);
  }
  return -1;
}

void GptStage::account(ptrdiff_t bytes) {
  live_bytes_ = static_cast<size_t>(static_cast<ptrdiff_t>(live_bytes_) + bytes);
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

GptStage::LayerActs* GptStage::new_layer_acts() {
  const auto& m = spec_.model;
  const size_t B = sz(spec_.micro_batch), T = sz(m.seq_len), C = sz(m.hidden), NHl = sz(m.heads / spec_.tp),
               Cl = C / sz(spec_.tp), Fl = sz(m.ffn() / spec_.tp), BT = B * T;
  auto* a = new LayerActs();
  a->ln1.resize(BT * C);
  a->ln1_mean.resize(BT);
  a->ln1_rstd.resize(BT);
  a->qkv.resize(BT * 3 * Cl);
  a->att.resize(B * NHl * T * T);
  a->atty.resize(BT * Cl);
  a->res2.resize(BT * C);
  a->ln2.resize(BT * C);
  a->ln2_mean.resize(BT);
  a->ln2_rstd.resize(BT);
  a->fch.resize(BT * Fl);
  a->fch_gelu.resize(BT * Fl);
  return a;
}

Status GptStage::layer_forward(int layer, const float* x, float* out, LayerActs& a) {
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, NHl = m.heads / spec_.tp, HS = m.hidden / m.heads, Cl = C / spec_.tp,
            Fl = m.ffn() / spec_.tp, BT = B * T;
  const std::string h = "h." + std::to_string(layer) + ".";
  const bool bias_here = spec_.tp_rank == 0;  // row-parallel biases: added once across the TP sum
  k::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p(h + "ln_1.weight"), p(h + "ln_1.bias"), BT, C);
  k::matmul_forward(a.qkv.data(), a.ln1.data(), p(h + "attn.c_attn.weight"), p(h + "attn.c_attn.bias"), BT, C, 3 * Cl);
  k::attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, NHl, HS);
  k::matmul_forward(a.res2.data(), a.atty.data(), p(h + "attn.c_proj.weight"), bias_here ? p(h + "attn.c_proj.bias") : nullptr, BT, Cl, C);
  if (spec_.tp > 1) {
    if (Status st = tp_->all_reduce_sum(a.res2.data(), a.res2.size()); !st) return st;
  }
  k::residual_forward(a.res2.data(), x, a.res2.data(), a.res2.size());
  k::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p(h + "ln_2.weight"), p(h + "ln_2.bias"), BT, C);
  k::matmul_forward(a.fch.data(), a.ln2.data(), p(h + "mlp.c_fc.weight"), p(h + "mlp.c_fc.bias"), BT, C, Fl);
  k::gelu_forward(a.fch_gelu.data(), a.fch.data(), a.fch.size());
  k::matmul_forward(out, a.fch_gelu.data(), p(h + "mlp.c_proj.weight"), bias_here ? p(h + "mlp.c_proj.bias") : nullptr, BT, Fl, C);
  if (spec_.tp > 1) {
    if (Status st = tp_->all_reduce_sum(out, static_cast<size_t>(BT) * C); !st) return st;
  }
  k::residual_forward(out, a.res2.data(), out, static_cast<size_t>(BT) * C);
  return Status::OK();
}

// dres_in (BT, C): gradient of the layer's output. dres_out (BT, C): gradient of its input x,
// overwritten. Parameter gradients accumulate.
Status GptStage::layer_backward(int layer, const float* x, const LayerActs& a, float* dres_out, float* dres_in) {
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, NHl = m.heads / spec_.tp, HS = m.hidden / m.heads, Cl = C / spec_.tp,
            Fl = m.ffn() / spec_.tp, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  const std::string h = "h." + std::to_string(layer) + ".";
  float* dres2 = dres_out;  // first holds the gradient at res2, then becomes the one at x
  // MLP: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))).
  std::memcpy(dres2, dres_in, n * sizeof(float));
  k::matmul_backward(dtmp_f_.data(), g(h + "mlp.c_proj.weight"), g(h + "mlp.c_proj.bias"), dres_in, a.fch_gelu.data(),
                     p(h + "mlp.c_proj.weight"), BT, Fl, C);
  k::gelu_backward(dtmp_f_.data(), a.fch.data(), dtmp_f_.data(), dtmp_f_.size());
  k::matmul_backward(dtmp_c_.data(), g(h + "mlp.c_fc.weight"), g(h + "mlp.c_fc.bias"), dtmp_f_.data(), a.ln2.data(),
                     p(h + "mlp.c_fc.weight"), BT, C, Fl);
  if (spec_.tp > 1) {
    if (Status st = tp_->all_reduce_sum(dtmp_c_.data(), n); !st) return st;
  }
  k::layernorm_backward(dres2, g(h + "ln_2.weight"), g(h + "ln_2.bias"), dtmp_c_.data(), a.res2.data(), p(h + "ln_2.weight"),
                        a.ln2_mean.data(), a.ln2_rstd.data(), BT, C);
  // Attention: res2 = x + c_proj(attn(c_attn(ln_1(x)))). The gradient at x starts as the one at
  // res2 (the residual path); dres2 is copied aside so dres_out can accumulate in place.
  std::memcpy(dres_a_.data(), dres2, n * sizeof(float));
  const float* dres2_copy = dres_a_.data();
  k::matmul_backward(dtmp_cl_.data(), g(h + "attn.c_proj.weight"), g(h + "attn.c_proj.bias"), dres2_copy, a.atty.data(),
                     p(h + "attn.c_proj.weight"), BT, Cl, C);
  k::attention_backward(dtmp_3c_.data(), scratch_att_.data(), dtmp_cl_.data(), a.qkv.data(), a.att.data(), B, T, NHl, HS);
  k::matmul_backward(dtmp_c_.data(), g(h + "attn.c_attn.weight"), g(h + "attn.c_attn.bias"), dtmp_3c_.data(), a.ln1.data(),
                     p(h + "attn.c_attn.weight"), BT, C, 3 * Cl);
  if (spec_.tp > 1) {
    if (Status st = tp_->all_reduce_sum(dtmp_c_.data(), n); !st) return st;
  }
  k::layernorm_backward(dres_out, g(h + "ln_1.weight"), g(h + "ln_1.bias"), dtmp_c_.data(), x, p(h + "ln_1.weight"), a.ln1_mean.data(),
                        a.ln1_rstd.data(), BT, C);
  return Status::OK();
}

Status GptStage::forward(int chunk, int mb, const int32_t* tokens, const float* input, const int32_t* targets, float loss_scale,
                         float* output, double* loss) {
  const int ci = chunk_index(chunk);
  if (ci < 0) return Status::internal("gpt: chunk " + std::to_string(chunk) + " is not on this rank");
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, V = m.vocab, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  auto acts = std::make_unique<ChunkActs>();
  const int first_layer = spec_.chunk_first_layer[static_cast<size_t>(ci)];
  const int layers = spec_.chunk_layers[static_cast<size_t>(ci)];
  acts->inputs.resize(static_cast<size_t>(layers));
  for (auto& v : acts->inputs) v.resize(n);
  acts->bytes = n * sizeof(float) * static_cast<size_t>(layers);
  // The chunk's input: embeddings, or what the previous chunk sent.
  if (layers > 0) {
    if (chunk == 0) {
      acts->tokens.assign(tokens, tokens + BT);
      acts->bytes += acts->tokens.size() * sizeof(int32_t);
      k::encoder_forward(acts->inputs[0].data(), tokens, p("wte.weight"), p("wpe.weight"), B, T, C);
    } else {
      std::memcpy(acts->inputs[0].data(), input, n * sizeof(float));
    }
  }
  std::vector<float> out(n);
  for (int i = 0; i < layers; ++i) {
    LayerActs* a;
    std::unique_ptr<LayerActs> own;
    if (spec_.full_recompute) {
      if (!recompute_acts_) {
        recompute_acts_.reset(new_layer_acts());  // the one layer rebuilt at a time, held for good
        account(static_cast<ptrdiff_t>(recompute_acts_->bytes()));
      }
      a = recompute_acts_.get();
    } else {
      if (!free_layer_acts_.empty()) {
        own = std::move(free_layer_acts_.back());
        free_layer_acts_.pop_back();
      } else {
        own.reset(new_layer_acts());
      }
      a = own.get();
      acts->bytes += a->bytes();
    }
    float* dst = i + 1 < layers ? acts->inputs[static_cast<size_t>(i + 1)].data() : out.data();
    if (Status st = layer_forward(first_layer + i, acts->inputs[static_cast<size_t>(i)].data(), dst, *a); !st) return st;
    if (own) acts->layers.push_back(std::move(own));
  }
  if (chunk == spec_.num_chunks - 1) {
    // Head: ln_f, logits against wte (tied) or lm_head, cross-entropy, and their backward now.
    std::vector<float> lnf(n), mean(static_cast<size_t>(BT)), rstd(static_cast<size_t>(BT));
    std::vector<float> logits(static_cast<size_t>(BT) * V), losses(static_cast<size_t>(BT)), dlnf(n);
    const float* x = layers > 0 ? out.data() : input;
    const ParamSlot* head = m.tied_embeddings ? (slot("wte.weight", true) ? slot("wte.weight", true) : slot("wte.weight")) : slot("lm_head.weight");
    k::layernorm_forward(lnf.data(), mean.data(), rstd.data(), x, p("ln_f.weight"), p("ln_f.bias"), BT, C);
    k::matmul_forward(logits.data(), lnf.data(), params_.data() + head->offset, static_cast<const float*>(nullptr), BT, C, V, k::Layout::kOutIn);
    const double l = k::crossentropy_forward(losses.data(), logits.data(), logits.data(), targets, BT, V);
    if (loss) *loss = l;
    k::crossentropy_backward(logits.data(), logits.data(), targets, loss_scale, BT, V);
    k::matmul_backward(dlnf.data(), grads_.data() + head->offset, static_cast<float*>(nullptr), logits.data(), lnf.data(), params_.data() + head->offset, BT, C, V,
                       k::Layout::kOutIn);
    acts->dhead.assign(n, 0.0f);
    k::layernorm_backward(acts->dhead.data(), g("ln_f.weight"), g("ln_f.bias"), dlnf.data(), x, p("ln_f.weight"), mean.data(), rstd.data(),
                          BT, C);
    acts->bytes += n * sizeof(float);
  } else if (output) {
    std::memcpy(output, layers > 0 ? out.data() : input, n * sizeof(float));
  }
  account(static_cast<ptrdiff_t>(acts->bytes));
  acts_[{chunk, mb}] = std::move(acts);
  return Status::OK();
}

void GptStage::discard(int chunk, int mb) {
  auto it = acts_.find({chunk, mb});
  if (it == acts_.end()) return;
  for (auto& l : it->second->layers) free_layer_acts_.push_back(std::move(l));
  account(-static_cast<ptrdiff_t>(it->second->bytes));
  acts_.erase(it);
}

Status GptStage::backward(int chunk, int mb, const float* dout, float* dinput) {
  auto it = acts_.find({chunk, mb});
  if (it == acts_.end()) return Status::internal("gpt: backward of chunk " + std::to_string(chunk) + " before its forward");
  std::unique_ptr<ChunkActs> acts = std::move(it->second);
  acts_.erase(it);
  const int ci = chunk_index(chunk);
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  const int first_layer = spec_.chunk_first_layer[static_cast<size_t>(ci)];
  const int layers = spec_.chunk_layers[static_cast<size_t>(ci)];
  // Gradients ping-pong between two buffers, layer by layer, from the output down.
  std::vector<float> grad_out(chunk == spec_.num_chunks - 1 ? acts->dhead : std::vector<float>(dout, dout + n));
  std::vector<float> grad_in(n);
  for (int i = layers - 1; i >= 0; --i) {
    const float* x = acts->inputs[static_cast<size_t>(i)].data();
    LayerActs* a;
    if (spec_.full_recompute) {
      a = recompute_acts_.get();
      std::vector<float> scratch_out(n);
      if (Status st = layer_forward(first_layer + i, x, scratch_out.data(), *a); !st) return st;
    } else {
      a = acts->layers[static_cast<size_t>(i)].get();
    }
    if (Status st = layer_backward(first_layer + i, x, *a, grad_in.data(), grad_out.data()); !st) return st;
    std::swap(grad_in, grad_out);
  }
  // grad_out now holds the gradient at the chunk's input.
  if (chunk == 0) {
    if (layers > 0) k::encoder_backward(g("wte.weight"), g("wpe.weight"), grad_out.data(), acts->tokens.data(), B, T, C);
  } else if (dinput) {
    std::memcpy(dinput, grad_out.data(), n * sizeof(float));
  }
  for (auto& l : acts->layers) free_layer_acts_.push_back(std::move(l));
  account(-static_cast<ptrdiff_t>(acts->bytes));
  return Status::OK();
}

}  // namespace stagecraft::runtime
