// GptStage: the GPT-2 layers of one rank, forward and backward. See gpt_stage.h.
//
// Legend: B micro-batch, T sequence length, C hidden, NH heads, HS = C / NH, t TP size,
// NHl = NH / t and Cl = C / t (this rank's heads and attention width), F ffn_hidden, Fl = F / t,
// V vocabulary, BT = B * T.
#include "stagecraft/runtime/gpt_stage.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "stagecraft/runtime/rng.h"
#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime {

// An activation the GEMMs read: fp32, or bf16 where the stage keeps GEMM inputs in 16 bits
// (StageSpec::bf16_activations).
class GptStage::ActBuffer {
 public:
  Status allocate(Device& device, size_t n, bool low) { return low ? allocate_buffer(low_, device, n) : allocate_buffer(f32_, device, n); }
  ActOut out() { return low_.size() ? ActOut(low_.data()) : ActOut(f32_.data()); }
  ActIn in() const { return low_.size() ? ActIn(low_.data()) : ActIn(f32_.data()); }
  size_t bytes() const { return f32_.bytes() + low_.bytes(); }

 private:
  Buffer<float> f32_;
  Buffer<bf16> low_;
};

// What one layer's forward keeps for its backward, for one micro-batch. What the GEMMs read and
// c_attn's and c_fc's outputs are ActBuffers; the residual stream (res2, and each layer's input),
// the statistics and attention's state stay fp32.
struct GptStage::LayerActs {
  ActBuffer ln1;                          // (BT, C)
  Buffer<float> ln1_mean, ln1_rstd;       // (BT), (BT)
  ActBuffer qkv;                          // (BT, 3 Cl)
  Buffer<float> att;                      // (B, NHl, T, T), or with flash attention (B, NHl, T)
  ActBuffer atty;                         // (BT, Cl)
  Buffer<float> res2;                     // (BT, C): x + attention output
  ActBuffer ln2;                          // (BT, C)
  Buffer<float> ln2_mean, ln2_rstd;       // (BT), (BT)
  ActBuffer fch;                          // (BT, Fl)
  ActBuffer fch_gelu;                     // (BT, Fl)

  size_t bytes() const {
    return ln1.bytes() + ln1_mean.bytes() + ln1_rstd.bytes() + qkv.bytes() + att.bytes() + atty.bytes() + res2.bytes() + ln2.bytes() +
           ln2_mean.bytes() + ln2_rstd.bytes() + fch.bytes() + fch_gelu.bytes();
  }
};

// What forward(chunk, mb) keeps until backward(chunk, mb).
struct GptStage::ChunkActs {
  std::vector<Buffer<float>> inputs;              // per layer: its input x (BT, C)
  std::vector<std::unique_ptr<LayerActs>> layers;  // per layer, unless recomputing
  Buffer<int32_t> tokens;                          // (BT) for the embedding's backward
  Buffer<float> dhead;                             // (BT, C): gradient at the head's input
  size_t bytes = 0;
};

namespace {

size_t sz(long long v) { return static_cast<size_t>(v); }

}  // namespace

size_t GptStage::attention_state_elems() const {
  const auto& m = spec_.model;
  const size_t B = sz(spec_.micro_batch), T = sz(m.seq_len), NHl = sz(m.heads / spec_.tp);
  return B * NHl * T * (spec_.flash_attention ? 1 : T);
}

Status all_reduce_on_device(TpReducer& group, Device& device, float* data, size_t count, std::vector<float>& staging) {
  if (device.host_accessible() || group.device_memory()) return group.all_reduce_sum(data, count);
  staging.resize(count);
  if (Status s = device.copy_to_host(staging.data(), data, count * sizeof(float)); !s) return s;
  if (Status s = group.all_reduce_sum(staging.data(), count); !s) return s;
  return device.copy_from_host(data, staging.data(), count * sizeof(float));
}

Result<std::unique_ptr<GptStage>> GptStage::create(const StageSpec& spec, TpReducer* tp, Device* device) {
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
  s->dev_ = device ? device : &host_device();
  s->k_ = &s->dev_->ops();
  Device& dev = *s->dev_;
  if (spec.flash_attention) {
    if (!s->k_->has_flash_attention()) {
      return Status::invalid_input("train.attention=flash: " + dev.name() + " has no fused attention; set train.attention: standard");
    }
    if (m.hidden / m.heads > s->k_->max_flash_head()) {
      return Status::invalid_input("train.attention=flash: head size " + std::to_string(m.hidden / m.heads) + " is above the fused kernel's " +
                                   std::to_string(s->k_->max_flash_head()) + "; set train.attention: standard");
    }
  }
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
  const long long B = spec.micro_batch, T = m.seq_len, C = m.hidden, Cl = C / spec.tp,
                  Fl = m.ffn() / spec.tp;
  for (Status st : {allocate_buffer(s->params_, dev, offset, true),
                    allocate_buffer(s->grads_, dev, offset, true),
                    allocate_buffer(s->weights_low_, dev, spec.bf16_activations ? offset : 0),
                    allocate_buffer(s->scratch_att_, dev, s->attention_state_elems()),
                    allocate_buffer(s->dtmp_c_, dev, sz(B * T * C)),
                    allocate_buffer(s->out_, dev, sz(B * T * C)),
                    allocate_buffer(s->dres_, dev, sz(B * T * C)),
                    allocate_buffer(s->dres_low_, dev, spec.bf16_activations ? sz(B * T * C) : 0),
                    allocate_buffer(s->targets_, dev, sz(B * T))}) {
    if (!st) return st.with_context("gpt stage of " + std::to_string(offset) + " parameters");
  }
  s->dtmp_f_ = std::make_unique<ActBuffer>();
  s->dtmp_3c_ = std::make_unique<ActBuffer>();
  s->dtmp_cl_ = std::make_unique<ActBuffer>();
  for (Status st : {s->dtmp_f_->allocate(dev, sz(B * T * Fl), spec.bf16_activations),
                    s->dtmp_3c_->allocate(dev, sz(B * T * 3 * Cl), spec.bf16_activations),
                    s->dtmp_cl_->allocate(dev, sz(B * T * Cl), spec.bf16_activations)}) {
    if (!st) return st.with_context("gpt stage of " + std::to_string(offset) + " parameters");
  }
  return s;
}

GptStage::~GptStage() = default;

const ParamSlot* GptStage::slot(const std::string& name, bool head_copy) const {
  auto it = slot_index_.find(name + (head_copy ? "#head" : ""));
  return it == slot_index_.end() ? nullptr : &slots_[it->second];
}

// A draw costs ~60 ns (Philox plus log and cos in double): 47 s on one thread for 774M parameters,
// so the values are drawn on every core, in pieces of 64K; each value depends on its index only
// (rng.h), so the result is the same on any number of threads.
Status GptStage::init_parameters(uint64_t seed) {
  std::unique_ptr<float[]> host(new (std::nothrow) float[params_.size()]);  // every element is written below
  if (!host) return Status::unavailable("initialising parameters: no host memory for " + std::to_string(params_.size() * 4 >> 20) + " MiB of fp32 weights");
  for (const auto& s : slots_) {
    float* dst = host.get() + s.offset;
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
  return upload_params(host.get());
}

Status GptStage::zero_grads() { return dev_->fill_zero(grads_.data(), grads_.bytes()); }

Status GptStage::download_params(float* host) const { return dev_->copy_to_host(host, params_.data(), params_.bytes()); }
Status GptStage::upload_params(const float* host) {
  weights_low_stale_ = true;
  return dev_->copy_from_host(params_.data(), host, params_.bytes());
}

ActIn GptStage::w(size_t offset) const {
  if (weights_low_.size()) return ActIn(weights_low_.data() + offset);
  return ActIn(params_.data() + offset);
}

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

Result<std::unique_ptr<GptStage::LayerActs>> GptStage::new_layer_acts() {
  const auto& m = spec_.model;
  const size_t B = sz(spec_.micro_batch), T = sz(m.seq_len), C = sz(m.hidden),
               Cl = C / sz(spec_.tp), Fl = sz(m.ffn() / spec_.tp), BT = B * T;
  auto a = std::make_unique<LayerActs>();
  Device& d = *dev_;
  const bool low = spec_.bf16_activations;
  for (Status st : {a->ln1.allocate(d, BT * C, low),
                    allocate_buffer(a->ln1_mean, d, BT),
                    allocate_buffer(a->ln1_rstd, d, BT),
                    a->qkv.allocate(d, BT * 3 * Cl, low),
                    allocate_buffer(a->att, d, attention_state_elems()),
                    a->atty.allocate(d, BT * Cl, low),
                    allocate_buffer(a->res2, d, BT * C),
                    a->ln2.allocate(d, BT * C, low),
                    allocate_buffer(a->ln2_mean, d, BT),
                    allocate_buffer(a->ln2_rstd, d, BT),
                    a->fch.allocate(d, BT * Fl, low),
                    a->fch_gelu.allocate(d, BT * Fl, low)}) {
    if (!st) return st.with_context("activations of one layer");
  }
  return a;
}

Status GptStage::head_scratch() {
  if (logits_.size() != 0) return Status::OK();
  const auto& m = spec_.model;
  const size_t BT = sz(spec_.micro_batch) * sz(m.seq_len), C = sz(m.hidden), V = sz(m.vocab);
  Device& d = *dev_;
  lnf_ = std::make_unique<ActBuffer>();
  if (spec_.bf16_activations) {
    dlogits_ = std::make_unique<ActBuffer>();
    if (Status st = dlogits_->allocate(d, BT * V, true); !st) return st.with_context("the head's logits");
  }
  for (Status st : {lnf_->allocate(d, BT * C, spec_.bf16_activations),
                    allocate_buffer(lnf_mean_, d, BT),
                    allocate_buffer(lnf_rstd_, d, BT),
                    allocate_buffer(logits_, d, BT * V),
                    allocate_buffer(losses_, d, BT),
                    allocate_buffer(dlnf_, d, BT * C)}) {
    if (!st) return st.with_context("the head's logits");
  }
  return Status::OK();
}

Status GptStage::layer_forward(int layer, const float* x, float* out, LayerActs& a) {
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, NHl = m.heads / spec_.tp, HS = m.hidden / m.heads, Cl = C / spec_.tp,
            Fl = m.ffn() / spec_.tp, BT = B * T;
  const std::string h = "h." + std::to_string(layer) + ".";
  const bool bias_here = spec_.tp_rank == 0;  // row-parallel biases: added once across the TP sum
  k_->layernorm_forward(a.ln1.out(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p(h + "ln_1.weight"), p(h + "ln_1.bias"), BT, C);
  k_->matmul_forward(a.qkv.out(), a.ln1.in(), w(h + "attn.c_attn.weight"), w(h + "attn.c_attn.bias"), BT, C, 3 * Cl);
  // GPT-2's attention: as many key/value heads as query heads (NKV = NHl).
  if (spec_.flash_attention) {
    k_->flash_attention_forward(a.atty.out(), a.att.data(), a.qkv.in(), B, T, NHl, HS, NHl);
  } else {
    k_->attention_forward(a.atty.out(), a.att.data(), a.qkv.in(), B, T, NHl, HS, NHl);
  }
  // res2 = x + c_proj(...): the residual comes in c_proj's GEMM, on one tp rank as the bias does,
  // so that the TP sum adds it once.
  k_->matmul_forward(a.res2.data(), a.atty.in(), w(h + "attn.c_proj.weight"), bias_here ? p(h + "attn.c_proj.bias") : nullptr, BT, Cl, C,
                     Layout::kInOut, bias_here ? x : nullptr);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, a.res2.data(), a.res2.size(), tp_host_); !st) return st;
  }
  k_->layernorm_forward(a.ln2.out(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p(h + "ln_2.weight"), p(h + "ln_2.bias"), BT, C);
  k_->matmul_gelu_forward(a.fch.out(), a.fch_gelu.out(), a.ln2.in(), w(h + "mlp.c_fc.weight"), w(h + "mlp.c_fc.bias"), BT, C, Fl);
  k_->matmul_forward(out, a.fch_gelu.in(), w(h + "mlp.c_proj.weight"), bias_here ? p(h + "mlp.c_proj.bias") : nullptr, BT, Fl, C,
                     Layout::kInOut, bias_here ? a.res2.data() : nullptr);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, out, static_cast<size_t>(BT) * C, tp_host_); !st) return st;
  }
  return Status::OK();
}

// dres (BT, C): the gradient at the layer's output on entry, at its input x on return; each
// layernorm's backward adds its branch's gradient to it in place, after the GEMM that reads it
// has run (the residual path's gradient passes through unchanged). Parameter gradients
// accumulate.
Status GptStage::layer_backward(int layer, const float* x, const LayerActs& a, float* dres) {
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, NHl = m.heads / spec_.tp, HS = m.hidden / m.heads, Cl = C / spec_.tp,
            Fl = m.ffn() / spec_.tp, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  const std::string h = "h." + std::to_string(layer) + ".";
  // c_proj's GEMMs read dres as its bf16 copy with bf16 activations, which each layernorm's
  // backward writes beside dres (and backward() makes at a chunk's start).
  bf16* dres_low = dres_low_.size() ? dres_low_.data() : nullptr;
  const ActIn dres_gemm = dres_low ? ActIn(dres_low) : ActIn(dres);
  // MLP: out = res2 + c_proj(gelu(c_fc(ln_2(res2)))).
  // The gradients between GEMMs and the kernels beside them (at GELU's output and input, at
  // attention's output and at q, k, v) are ActBuffers: bf16 with bf16 activations, written so by
  // the kernel that makes them and read as they are by the next, with no cast between.
  ActBuffer& dfch = *dtmp_f_;  // at GELU's output, then in place at its input
  k_->matmul_backward(dfch.out(), g(h + "mlp.c_proj.weight"), g(h + "mlp.c_proj.bias"), dres_gemm, a.fch_gelu.in(),
                     w(h + "mlp.c_proj.weight"), BT, Fl, C);
  k_->gelu_backward(dfch.out(), a.fch.in(), dfch.in(), static_cast<size_t>(BT) * Fl);
  k_->matmul_backward(dtmp_c_.data(), g(h + "mlp.c_fc.weight"), g(h + "mlp.c_fc.bias"), dfch.in(), a.ln2.in(),
                     w(h + "mlp.c_fc.weight"), BT, C, Fl);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, dtmp_c_.data(), n, tp_host_); !st) return st;
  }
  k_->layernorm_backward(dres, g(h + "ln_2.weight"), g(h + "ln_2.bias"), dtmp_c_.data(), a.res2.data(), p(h + "ln_2.weight"),
                        a.ln2_mean.data(), a.ln2_rstd.data(), BT, C, dres_low);
  // dres is now the gradient at res2. Attention: res2 = x + c_proj(attn(c_attn(ln_1(x)))).
  k_->matmul_backward(dtmp_cl_->out(), g(h + "attn.c_proj.weight"), g(h + "attn.c_proj.bias"), dres_gemm, a.atty.in(),
                     w(h + "attn.c_proj.weight"), BT, Cl, C);
  if (spec_.flash_attention) {
    k_->flash_attention_backward(dtmp_3c_->out(), scratch_att_.data(), dtmp_cl_->in(), a.qkv.in(), a.atty.in(), a.att.data(), B, T,
                                 NHl, HS, NHl);
  } else {
    k_->attention_backward(dtmp_3c_->out(), scratch_att_.data(), dtmp_cl_->in(), a.qkv.in(), a.att.data(), B, T, NHl, HS, NHl);
  }
  k_->matmul_backward(dtmp_c_.data(), g(h + "attn.c_attn.weight"), g(h + "attn.c_attn.bias"), dtmp_3c_->in(), a.ln1.in(),
                     w(h + "attn.c_attn.weight"), BT, C, 3 * Cl);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, dtmp_c_.data(), n, tp_host_); !st) return st;
  }
  k_->layernorm_backward(dres, g(h + "ln_1.weight"), g(h + "ln_1.bias"), dtmp_c_.data(), x, p(h + "ln_1.weight"), a.ln1_mean.data(),
                        a.ln1_rstd.data(), BT, C, dres_low);
  return Status::OK();
}

Status GptStage::forward(int chunk, int mb, const int32_t* tokens, const float* input, const int32_t* targets, float loss_scale,
                         float* output, double* loss) {
  const int ci = chunk_index(chunk);
  if (ci < 0) return Status::internal("gpt: chunk " + std::to_string(chunk) + " is not on this rank");
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden, V = m.vocab, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  Device& dev = *dev_;
  if (weights_low_stale_ && weights_low_.size()) {  // the weights changed since the last copy
    k_->round_to_bf16(weights_low_.data(), params_.data(), params_.size());
    weights_low_stale_ = false;
  }
  auto acts = std::make_unique<ChunkActs>();
  const int first_layer = spec_.chunk_first_layer[static_cast<size_t>(ci)];
  const int layers = spec_.chunk_layers[static_cast<size_t>(ci)];
  acts->inputs.resize(static_cast<size_t>(layers));
  for (auto& v : acts->inputs) {
    if (Status st = allocate_buffer(v, dev, n); !st) return st.with_context("activations of chunk " + std::to_string(chunk));
  }
  acts->bytes = n * sizeof(float) * static_cast<size_t>(layers);
  // The chunk's input: embeddings, or what the previous chunk sent.
  if (layers > 0) {
    if (chunk == 0) {
      if (Status st = allocate_buffer(acts->tokens, dev, static_cast<size_t>(BT)); !st) return st;
      if (Status st = dev.copy_from_host(acts->tokens.data(), tokens, acts->tokens.bytes()); !st) return st;
      acts->bytes += acts->tokens.bytes();
      k_->encoder_forward(acts->inputs[0].data(), acts->tokens.data(), p("wte.weight"), p("wpe.weight"), B, T, C);
    } else {
      if (Status st = dev.copy(acts->inputs[0].data(), input, n * sizeof(float)); !st) return st;
    }
  }
  for (int i = 0; i < layers; ++i) {
    LayerActs* a;
    std::unique_ptr<LayerActs> own;
    if (spec_.full_recompute) {
      if (!recompute_acts_) {  // the one layer rebuilt at a time, held for good
        auto fresh = new_layer_acts();
        if (!fresh.ok()) return fresh.status();
        recompute_acts_ = std::move(fresh).value();
        account(static_cast<ptrdiff_t>(recompute_acts_->bytes()));
      }
      a = recompute_acts_.get();
    } else {
      if (!free_layer_acts_.empty()) {
        own = std::move(free_layer_acts_.back());
        free_layer_acts_.pop_back();
      } else {
        auto fresh = new_layer_acts();
        if (!fresh.ok()) return fresh.status();
        own = std::move(fresh).value();
      }
      a = own.get();
      acts->bytes += a->bytes();
    }
    float* dst = i + 1 < layers ? acts->inputs[static_cast<size_t>(i + 1)].data() : out_.data();
    if (Status st = layer_forward(first_layer + i, acts->inputs[static_cast<size_t>(i)].data(), dst, *a); !st) return st;
    if (own) acts->layers.push_back(std::move(own));
  }
  if (chunk == spec_.num_chunks - 1) {
    // Head: ln_f, logits against wte (tied) or lm_head, cross-entropy, and their backward now.
    if (Status st = head_scratch(); !st) return st;
    if (Status st = dev.copy_from_host(targets_.data(), targets, targets_.bytes()); !st) return st;
    const float* x = layers > 0 ? out_.data() : input;
    const ParamSlot* head = m.tied_embeddings ? (slot("wte.weight", true) ? slot("wte.weight", true) : slot("wte.weight")) : slot("lm_head.weight");
    float* logits = logits_.data();
    k_->layernorm_forward(lnf_->out(), lnf_mean_.data(), lnf_rstd_.data(), x, p("ln_f.weight"), p("ln_f.bias"), BT, C);
    k_->matmul_forward(logits, lnf_->in(), w(head->offset), nullptr, BT, C, V, Layout::kOutIn);
    // The loss, and its gradient at the logits: over them in place, or into a bf16 buffer with
    // bf16 activations, so that the head's GEMMs read it as it is.
    const ActOut dlogits = dlogits_ ? dlogits_->out() : ActOut(logits);
    const double l = k_->crossentropy_forward_backward(losses_.data(), dlogits, logits, targets_.data(), loss_scale, BT, V);
    if (loss) *loss = l;
    k_->matmul_backward(dlnf_.data(), grads_.data() + head->offset, nullptr, dlogits, lnf_->in(), w(head->offset), BT, C, V,
                        Layout::kOutIn);
    if (Status st = allocate_buffer(acts->dhead, dev, n, true); !st) return st;
    k_->layernorm_backward(acts->dhead.data(), g("ln_f.weight"), g("ln_f.bias"), dlnf_.data(), x, p("ln_f.weight"), lnf_mean_.data(),
                           lnf_rstd_.data(), BT, C);
    acts->bytes += n * sizeof(float);
  } else if (output) {
    if (Status st = dev.copy(output, layers > 0 ? out_.data() : input, n * sizeof(float)); !st) return st;
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

Status GptStage::backward(int chunk, int mb, const float* dout, float* dinput, const LayerDone* layer_done) {
  auto it = acts_.find({chunk, mb});
  if (it == acts_.end()) return Status::internal("gpt: backward of chunk " + std::to_string(chunk) + " before its forward");
  std::unique_ptr<ChunkActs> acts = std::move(it->second);
  acts_.erase(it);
  const int ci = chunk_index(chunk);
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = m.seq_len, C = m.hidden;
  const size_t n = static_cast<size_t>(B) * T * C;
  const int first_layer = spec_.chunk_first_layer[static_cast<size_t>(ci)];
  const int layers = spec_.chunk_layers[static_cast<size_t>(ci)];
  Device& dev = *dev_;
  // One buffer carries the gradient down the layers, each layer's backward updating it in place.
  float* dres = dres_.data();
  if (Status st = dev.copy(dres, chunk == spec_.num_chunks - 1 ? acts->dhead.data() : dout, n * sizeof(float)); !st) return st;
  if (dres_low_.size()) k_->round_to_bf16(dres_low_.data(), dres, n);  // the layers' layernorms keep it after
  for (int i = layers - 1; i >= 0; --i) {
    const float* x = acts->inputs[static_cast<size_t>(i)].data();
    LayerActs* a;
    if (spec_.full_recompute) {
      a = recompute_acts_.get();
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = layer_forward(first_layer + i, x, out_.data(), *a); !st) return st;
      recompute_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      a = acts->layers[static_cast<size_t>(i)].get();
    }
    if (Status st = layer_backward(first_layer + i, x, *a, dres); !st) return st;
    if (layer_done && *layer_done) {
      if (Status st = (*layer_done)(first_layer + i); !st) return st;
    }
  }
  // dres now holds the gradient at the chunk's input.
  if (chunk == 0) {
    if (layers > 0) k_->encoder_backward(g("wte.weight"), g("wpe.weight"), dres, acts->tokens.data(), B, T, C);
  } else if (dinput) {
    if (Status st = dev.copy(dinput, dres, n * sizeof(float)); !st) return st;
  }
  for (auto& l : acts->layers) free_layer_acts_.push_back(std::move(l));
  account(-static_cast<ptrdiff_t>(acts->bytes));
  return Status::OK();
}

}  // namespace stagecraft::runtime
