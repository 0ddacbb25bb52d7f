// GptStage: the transformer layers of one rank, forward and backward. See gpt_stage.h.
//
// Legend: B micro-batch, T sequence length, C hidden, NH query heads, NKV key/value heads,
// HS = C / NH, t TP size, NHl = NH / t and NKVl = NKV / t (this rank's heads), Cl = NHl HS (its
// attention width), QKVl = (NHl + 2 NKVl) HS (its q | k | v), F ffn_hidden, Fl = F / t,
// UPl = Fl (GPT-2's c_fc) or 2 Fl (Llama's gate | up), V vocabulary, BT = B * T.
#include "stagecraft/runtime/gpt_stage.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "stagecraft/runtime/rng.h"
#include "runtime/context_attention.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/moe_layer.h"
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
// the QKV and first MLP projections' outputs are ActBuffers; the residual stream (res2, and each
// layer's input), the statistics and attention's state stay fp32.
struct GptStage::LayerActs {
  ActBuffer ln1;                          // (BT, C)
  Buffer<float> ln1_mean, ln1_rstd;       // (BT) each; RMSNorm keeps no mean (empty)
  ActBuffer qkv;                          // (BT, QKVl): q | k | v, after the rotary positions (Llama)
  Buffer<float> att;                      // (B, NHl, T, T), or with flash attention (B, NHl, T)
  ActBuffer atty;                         // (BT, Cl)
  Buffer<float> res2;                     // (BT, C): x + attention output
  ActBuffer ln2;                          // (BT, C)
  Buffer<float> ln2_mean, ln2_rstd;       // (BT) each; RMSNorm keeps no mean (empty)
  ActBuffer fch;                          // (BT, UPl): GELU's input, or gate | up
  ActBuffer fch_gelu;                     // (BT, Fl): GELU's or SwiGLU's output
  ActBuffer full_qkv, full_out;           // cp all_to_all: the whole sequence's q | k | v and output of
                                          // this rank's heads (context_attention.h); empty otherwise
  std::unique_ptr<MoeLayer::Acts> moe;    // an MoE layer's routing and experts' activations (moe_layer.h)

  size_t bytes() const {
    return ln1.bytes() + ln1_mean.bytes() + ln1_rstd.bytes() + qkv.bytes() + att.bytes() + atty.bytes() + res2.bytes() + ln2.bytes() +
           ln2_mean.bytes() + ln2_rstd.bytes() + fch.bytes() + fch_gelu.bytes() + full_qkv.bytes() + full_out.bytes() +
           (moe ? moe->bytes() : 0);
  }
};

// What forward(chunk, mb) keeps until backward(chunk, mb).
struct GptStage::ChunkActs {
  std::vector<Buffer<float>> inputs;              // per layer: its input x (BT, C)
  std::vector<std::unique_ptr<LayerActs>> layers;  // per layer, unless recomputing
  Buffer<int32_t> tokens;                          // (BT) for the embedding's backward
  Buffer<float> dhead;                             // (BT, C): gradient at the head's input
  float loss_scale = 0;                            // forward's: the MoE layers' aux gradient scales by it
  size_t bytes = 0;
};

namespace {

size_t sz(long long v) { return static_cast<size_t>(v); }

}  // namespace

size_t GptStage::attention_state_elems() const {
  if (cp_attn_) return cp_attn_->state_elems();
  const auto& m = spec_.model;
  const size_t B = sz(spec_.micro_batch), T = sz(local_seq()), NHl = sz(m.heads / spec_.tp);
  return B * NHl * T * (spec_.flash_attention ? 1 : T);
}

Status all_reduce_on_device(TpReducer& group, Device& device, float* data, size_t count, std::vector<float>& staging) {
  if (device.host_accessible() || group.device_memory()) return group.all_reduce_sum(data, count);
  staging.resize(count);
  if (Status s = device.copy_to_host(staging.data(), data, count * sizeof(float)); !s) return s;
  if (Status s = group.all_reduce_sum(staging.data(), count); !s) return s;
  return device.copy_from_host(data, staging.data(), count * sizeof(float));
}

Result<std::unique_ptr<GptStage>> GptStage::create(const StageSpec& spec, TpReducer* tp, Device* device, CommGroup* cp, CommGroup* ep) {
  const auto& m = spec.model;
  const model::ModelDesc d = model::ModelDesc::from(m);
  if (spec.tp < 1 || m.heads % spec.tp != 0 || d.kv_heads % spec.tp != 0 || m.ffn() % spec.tp != 0) {
    return Status::invalid_input("model: tp=" + std::to_string(spec.tp) + " must divide heads, kv_heads and ffn_hidden");
  }
  if (m.hidden % m.heads != 0) return Status::invalid_input("model: heads must divide hidden");
  if (d.heads % d.kv_heads != 0) return Status::invalid_input("model: kv_heads must divide heads");
  if (spec.chunks.empty() || spec.chunks.size() != spec.chunk_layers.size() || spec.chunks.size() != spec.chunk_first_layer.size()) {
    return Status::internal("model: stage spec without chunks");
  }
  if (d.moe()) {
    if (spec.ep < 1 || d.experts % spec.ep != 0) {
      return Status::invalid_input("parallel.ep=" + std::to_string(spec.ep) + ": must divide model.moe.experts=" + std::to_string(d.experts));
    }
    if (d.shared_experts > 0 && (static_cast<int64_t>(d.shared_experts) * d.shared_ffn) % spec.tp != 0) {
      return Status::invalid_input("model.moe: tp=" + std::to_string(spec.tp) + " must divide the shared experts' width " +
                                   std::to_string(d.shared_experts * d.shared_ffn));
    }
    if (spec.bf16_activations) {
      return Status::invalid_input("train.precision=bf16: the engine trains mixture-of-experts layers with fp32 activations; "
                                   "set train.precision: fp32 (train.tf32 for the tensor cores)");
    }
  } else if (spec.ep != 1) {
    return Status::invalid_input("parallel.ep=" + std::to_string(spec.ep) + ": the model has no experts (model.moe.experts: 0)");
  }
  if (spec.cp > 1) {
    if (m.seq_len % (2 * spec.cp) != 0) {
      return Status::invalid_input("parallel.cp=" + std::to_string(spec.cp) + ": model.seq_len=" + std::to_string(m.seq_len) +
                                   " must be a multiple of 2 x cp (each rank holds two chunks of every sequence)");
    }
    if (!cp) return Status::internal("parallel.cp=" + std::to_string(spec.cp) + ": the stage has no context-parallel group");
    if (spec.cp_ring && spec.flash_attention) {
      return Status::invalid_input("parallel.cp_comm=ring: the ring's block attention is not the fused kernel train.attention=flash asks for; "
                                   "set parallel.cp_comm: all_to_all, or train.attention: standard");
    }
  }
  std::unique_ptr<GptStage> s(new GptStage());
  s->spec_ = spec;
  s->desc_ = d;
  s->layout_ = d.weights_out_in() ? Layout::kOutIn : Layout::kInOut;
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
  size_t offset = 0, expert_offset = 0;
  const int held_experts = d.moe() ? d.experts / spec.ep : 0, first_expert = spec.ep_rank * held_experts;
  auto expert_of = [](const model::ParamSpec& p) { return p.role == model::Role::kExpertUp ? p.part / 2 : p.part; };
  auto add = [&](const model::ParamSpec& p, bool head_copy) {
    if (p.role == model::Role::kExpertUp || p.role == model::Role::kExpertDown) {  // whole, in the expert buffer
      const int j = expert_of(p);
      if (j < first_expert || j >= first_expert + held_experts) return;
      ParamSlot slot;
      slot.spec = p;
      slot.offset = expert_offset;
      slot.count = static_cast<size_t>(p.numel());
      expert_offset += slot.count;
      s->expert_slots_.push_back(std::move(slot));
      return;
    }
    ParamSlot slot;
    slot.spec = p;
    slot.offset = offset;
    slot.count = static_cast<size_t>(model::shard_numel(p, spec.tp));
    slot.head_copy = head_copy;
    offset += slot.count;
    s->slots_.push_back(std::move(slot));
  };
  const auto params = d.params();
  for (const auto& p : params) {
    const bool held = (p.place == model::Place::kFirstStage && first) || (p.place == model::Place::kLastStage && last) ||
                      (p.place == model::Place::kLayer && mine[static_cast<size_t>(p.layer)]);
    if (held) add(p, false);
  }
  if (last && m.tied_embeddings && !first) add(params.front(), true);  // the token embedding for the head
  s->num_params_ = offset;
  s->num_expert_params_ = expert_offset;
  // The units: a layer's slots together, every other slot alone.
  s->layer_unit_.assign(static_cast<size_t>(std::max(0, m.layers)), -1);
  for (const auto& slot : s->slots_) {
    const int layer = slot.spec.place == model::Place::kLayer ? slot.spec.layer : -1;
    if (layer >= 0 && !s->units_.empty() && s->units_.back().layer == layer) {
      s->units_.back().end = slot.offset + slot.count;
      continue;
    }
    if (layer >= 0) s->layer_unit_[static_cast<size_t>(layer)] = static_cast<int>(s->units_.size());
    s->units_.push_back({slot.offset, slot.offset + slot.count, layer});
  }
  if (Status st = s->resolve_handles(); !st) return st;
  if (d.moe()) {
    MoeLayer::Shape ms;
    ms.N = spec.micro_batch * (m.seq_len / spec.cp);
    ms.C = m.hidden;
    ms.E = d.experts;
    ms.K = d.top_k;
    ms.FE = d.expert_ffn;
    ms.FSl = static_cast<int>(static_cast<int64_t>(d.shared_experts) * d.shared_ffn / spec.tp);
    ms.tp = spec.tp;
    ms.tp_rank = spec.tp_rank;
    ms.ep = spec.ep;
    ms.ep_rank = spec.ep_rank;
    ms.cp = spec.cp;
    ms.route.experts = d.experts;
    ms.route.top_k = d.top_k;
    ms.route.norm_topk = m.moe.norm_topk;
    ms.route.capacity_factor = m.moe.capacity_factor;
    ms.aux_coef = m.moe.aux_loss;
    auto made = MoeLayer::create(ms, *s->dev_, tp, ep, cp);
    if (!made.ok()) return made.status();
    s->moe_ = std::move(made).value();
    for (Status st : {allocate_buffer(s->expert_params_, *s->dev_, expert_offset, true), allocate_buffer(s->expert_grads_, *s->dev_, expert_offset, true)}) {
      if (!st) return st.with_context("the experts' " + std::to_string(expert_offset) + " parameters");
    }
  }
  if (spec.cp > 1) {
    ContextAttention::Shape cs;
    cs.B = spec.micro_batch;
    cs.T = m.seq_len / spec.cp;
    cs.NH = d.heads / spec.tp;
    cs.NKV = d.kv_heads / spec.tp;
    cs.HS = d.head_dim;
    cs.cp = spec.cp;
    cs.cp_rank = spec.cp_rank;
    cs.ring = spec.cp_ring;
    cs.flash = spec.flash_attention;
    auto made = ContextAttention::create(cs, *cp, dev);
    if (!made.ok()) return made.status();
    s->cp_attn_ = std::move(made).value();
  }
  const long long B = spec.micro_batch, T = m.seq_len / spec.cp, C = m.hidden, Cl = d.q_width() / spec.tp, QKVl = d.qkv_width() / spec.tp,
                  Fl = m.ffn() / spec.tp, UPl = d.up_width() / spec.tp;
  for (Status st : {allocate_buffer(s->params_, dev, offset, true),
                    allocate_buffer(s->grads_, dev, offset, true),
                    allocate_buffer(s->weights_low_, dev, spec.bf16_activations ? offset : 0),
                    allocate_buffer(s->scratch_att_, dev, s->attention_state_elems()),
                    allocate_buffer(s->dtmp_c_, dev, sz(B * T * C)),
                    allocate_buffer(s->out_, dev, sz(B * T * C)),
                    allocate_buffer(s->dres_, dev, sz(B * T * C)),
                    allocate_buffer(s->dres_low_, dev, spec.bf16_activations ? sz(B * T * C) : 0),
                    allocate_buffer(s->targets_, dev, sz(B * T))}) {
    if (!st) return st.with_context("model stage of " + std::to_string(offset) + " parameters");
  }
  s->bound_.resize(s->units_.size());
  for (size_t u = 0; u < s->units_.size(); ++u) s->bind_own(u);
  s->dtmp_f_ = std::make_unique<ActBuffer>();
  s->dtmp_up_ = std::make_unique<ActBuffer>();
  s->dtmp_3c_ = std::make_unique<ActBuffer>();
  s->dtmp_cl_ = std::make_unique<ActBuffer>();
  for (Status st : {s->dtmp_f_->allocate(dev, sz(B * T * Fl), spec.bf16_activations),
                    s->dtmp_up_->allocate(dev, d.swiglu() ? sz(B * T * UPl) : 0, spec.bf16_activations),
                    s->dtmp_3c_->allocate(dev, sz(B * T * QKVl), spec.bf16_activations),
                    s->dtmp_cl_->allocate(dev, sz(B * T * Cl), spec.bf16_activations)}) {
    if (!st) return st.with_context("model stage of " + std::to_string(offset) + " parameters");
  }
  return s;
}

// Each held tensor's offset under its role; every role the layer code calls for must be there,
// and a fused group's parts must follow one another (model.h lists them so).
Status GptStage::resolve_handles() {
  using model::Role;
  layer_handles_.assign(static_cast<size_t>(std::max(0, spec_.model.layers)), LayerHandles{});
  const ParamSlot* prev = nullptr;
  for (const auto& s : slots_) {
    const auto& p = s.spec;
    if (p.part > 0 && (!prev || prev->spec.role != p.role || prev->spec.part != p.part - 1 || prev->offset + prev->count != s.offset)) {
      return Status::internal("model: " + p.name + " does not follow the rest of its fused group in the stage's buffer");
    }
    prev = &s;
    if (p.part > 0) continue;  // reached through the group's first part
    if (p.place != model::Place::kLayer) {
      switch (p.role) {
        case Role::kEmbedding:
          if (!s.head_copy) end_.embedding = s.offset;
          break;
        case Role::kPositions: end_.positions = s.offset; break;
        case Role::kFinalNorm: end_.final_norm = s.offset; break;
        case Role::kFinalNormBias: end_.final_norm_bias = s.offset; break;
        case Role::kHead: end_.head = s.offset; break;
        default: return Status::internal("model: " + p.name + " has a layer's role outside the layers");
      }
      continue;
    }
    LayerHandles& h = layer_handles_[static_cast<size_t>(p.layer)];
    switch (p.role) {
      case Role::kNorm1: h.norm1 = s.offset; break;
      case Role::kNorm1Bias: h.norm1_bias = s.offset; break;
      case Role::kQkv: h.qkv = s.offset; break;
      case Role::kQkvBias: h.qkv_bias = s.offset; break;
      case Role::kOut: h.out = s.offset; break;
      case Role::kOutBias: h.out_bias = s.offset; break;
      case Role::kNorm2: h.norm2 = s.offset; break;
      case Role::kNorm2Bias: h.norm2_bias = s.offset; break;
      case Role::kUp: h.up = s.offset; break;
      case Role::kUpBias: h.up_bias = s.offset; break;
      case Role::kDown: h.down = s.offset; break;
      case Role::kDownBias: h.down_bias = s.offset; break;
      case Role::kRouter: h.router = s.offset; break;
      case Role::kSharedUp: h.shared_up = s.offset; break;
      case Role::kSharedDown: h.shared_down = s.offset; break;
      default: return Status::internal("model: " + p.name + " has a role the " + desc_.name() + " layer code does not run");
    }
  }
  // The held experts' gate | up (adjacent, as the description lists them) and down.
  const int held = desc_.moe() ? desc_.experts / spec_.ep : 0, first_expert = spec_.ep_rank * held;
  for (size_t i = 0; i < expert_slots_.size(); ++i) {
    const ParamSlot& s = expert_slots_[i];
    LayerHandles& h = layer_handles_[static_cast<size_t>(s.spec.layer)];
    if (h.expert_up.empty()) {
      h.expert_up.assign(static_cast<size_t>(held), kAbsent);
      h.expert_down.assign(static_cast<size_t>(held), kAbsent);
    }
    if (s.spec.role == Role::kExpertDown) {
      h.expert_down[static_cast<size_t>(s.spec.part - first_expert)] = s.offset;
    } else if (s.spec.part % 2 == 0) {
      const ParamSlot* up = i + 1 < expert_slots_.size() ? &expert_slots_[i + 1] : nullptr;
      if (!up || up->spec.role != Role::kExpertUp || up->spec.part != s.spec.part + 1 || up->offset != s.offset + s.count) {
        return Status::internal("model: " + s.spec.name + " is not followed by its expert's up projection in the expert buffer");
      }
      h.expert_up[static_cast<size_t>(s.spec.part / 2 - first_expert)] = s.offset;
    }
  }
  // The head's matrix: lm_head, or the tied embedding (this stage's copy when the embedding lives
  // on another).
  if (has_head() && desc_.tied) {
    for (const auto& s : slots_) {
      if (s.spec.role == Role::kEmbedding && (s.head_copy || end_.head == kAbsent)) end_.head = s.offset;
    }
  }
  for (size_t i = 0; i < spec_.chunks.size(); ++i) {
    for (int l = spec_.chunk_first_layer[i]; l < spec_.chunk_first_layer[i] + spec_.chunk_layers[i]; ++l) {
      const LayerHandles& h = layer_handles_[static_cast<size_t>(l)];
      const bool moe = desc_.moe_layer(l);
      for (size_t off : {h.norm1, h.qkv, h.out, h.norm2, moe ? h.router : h.up, moe ? h.router : h.down}) {
        if (off == kAbsent) return Status::internal("model: layer " + std::to_string(l) + " lacks a tensor the " + desc_.name() + " layer needs");
      }
      if (moe && (h.expert_up.size() != static_cast<size_t>(held) ||
                  std::count(h.expert_up.begin(), h.expert_up.end(), kAbsent) + std::count(h.expert_down.begin(), h.expert_down.end(), kAbsent) > 0 ||
                  (desc_.shared_experts > 0 && (h.shared_up == kAbsent || h.shared_down == kAbsent)))) {
        return Status::internal("model: MoE layer " + std::to_string(l) + " lacks an expert's tensors");
      }
    }
  }
  if (has_embedding() && end_.embedding == kAbsent) return Status::internal("model: the first stage has no token embedding");
  if (has_head() && (end_.final_norm == kAbsent || end_.head == kAbsent)) return Status::internal("model: the last stage has no final norm or head");
  return Status::OK();
}

GptStage::~GptStage() = default;

ActIn GptStage::w(size_t offset) const {
  if (offset == kAbsent) return ActIn(nullptr);
  const size_t u = unit_at(offset);
  const Bound& b = bound_[u];
  if (spec_.bf16_activations) return ActIn(b.params_low + (offset - units_[u].begin));
  return ActIn(b.params + (offset - units_[u].begin));
}

void GptStage::norm_forward(ActOut out, float* mean, float* rstd, const float* x, size_t weight, size_t bias, int N) {
  if (desc_.rmsnorm()) {
    k_->rmsnorm_forward(out, rstd, x, p(weight), N, spec_.model.hidden, static_cast<float>(desc_.norm_eps));
  } else {
    k_->layernorm_forward(out, mean, rstd, x, p(weight), p(bias), N, spec_.model.hidden);
  }
}

void GptStage::norm_backward(float* dx, size_t weight, size_t bias, const float* dout, const float* x, const float* mean, const float* rstd,
                             int N, bf16* dx_low) {
  if (desc_.rmsnorm()) {
    k_->rmsnorm_backward(dx, g(weight), dout, x, p(weight), rstd, N, spec_.model.hidden, dx_low);
  } else {
    k_->layernorm_backward(dx, g(weight), g(bias), dout, x, p(weight), mean, rstd, N, spec_.model.hidden, dx_low);
  }
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
  const size_t B = sz(spec_.micro_batch), T = sz(local_seq()), C = sz(m.hidden), t = sz(spec_.tp), Cl = sz(desc_.q_width()) / t,
               QKVl = sz(desc_.qkv_width()) / t, Fl = sz(m.ffn()) / t, UPl = sz(desc_.up_width()) / t, BT = B * T;
  const size_t means = desc_.rmsnorm() ? 0 : BT;
  auto a = std::make_unique<LayerActs>();
  Device& d = *dev_;
  const bool low = spec_.bf16_activations;
  for (Status st : {a->ln1.allocate(d, BT * C, low),
                    allocate_buffer(a->ln1_mean, d, means),
                    allocate_buffer(a->ln1_rstd, d, BT),
                    a->qkv.allocate(d, BT * QKVl, low),
                    allocate_buffer(a->att, d, attention_state_elems()),
                    a->atty.allocate(d, BT * Cl, low),
                    allocate_buffer(a->res2, d, BT * C),
                    a->ln2.allocate(d, BT * C, low),
                    allocate_buffer(a->ln2_mean, d, means),
                    allocate_buffer(a->ln2_rstd, d, BT),
                    a->fch.allocate(d, BT * UPl, low),
                    a->fch_gelu.allocate(d, BT * Fl, low),
                    a->full_qkv.allocate(d, cp_attn_ ? cp_attn_->full_qkv_elems() : 0, low),
                    a->full_out.allocate(d, cp_attn_ ? cp_attn_->full_out_elems() : 0, low)}) {
    if (!st) return st.with_context("activations of one layer");
  }
  return a;
}

Status GptStage::head_scratch() {
  if (logits_.size() != 0) return Status::OK();
  const auto& m = spec_.model;
  const size_t BT = sz(spec_.micro_batch) * sz(local_seq()), C = sz(m.hidden), V = sz(m.vocab);
  Device& d = *dev_;
  lnf_ = std::make_unique<ActBuffer>();
  if (spec_.bf16_activations) {
    dlogits_ = std::make_unique<ActBuffer>();
    if (Status st = dlogits_->allocate(d, BT * V, true); !st) return st.with_context("the head's logits");
  }
  for (Status st : {lnf_->allocate(d, BT * C, spec_.bf16_activations),
                    allocate_buffer(lnf_mean_, d, desc_.rmsnorm() ? 0 : BT),
                    allocate_buffer(lnf_rstd_, d, BT),
                    allocate_buffer(logits_, d, BT * V),
                    allocate_buffer(losses_, d, BT),
                    allocate_buffer(dlnf_, d, BT * C)}) {
    if (!st) return st.with_context("the head's logits");
  }
  return Status::OK();
}

void GptStage::rope(ActOut qkv, bool backward) {
  const auto& d = desc_;
  const int B = spec_.micro_batch, T = local_seq(), t = spec_.tp, NHl = d.heads / t, NKVl = d.kv_heads / t, HS = d.head_dim,
            QKVl = d.qkv_width() / t;
  const float theta = static_cast<float>(d.rope_theta);
  auto apply = [&](ActOut x, int rows_b, int rows_t, int first) {
    if (backward) {
      k_->rope_backward(x, rows_b, rows_t, NHl, NKVl, HS, theta, first);
    } else {
      k_->rope_forward(x, rows_b, rows_t, NHl, NKVl, HS, theta, first);
    }
  };
  if (spec_.cp == 1) return apply(qkv, B, T, 0);
  // Each chunk of each sequence at its positions: chunks cp_rank and 2 cp - 1 - cp_rank of c.
  const int c = T / 2;
  for (int b = 0; b < B; ++b) {
    for (int k = 0; k < 2; ++k) {
      const int chunk = k == 0 ? spec_.cp_rank : 2 * spec_.cp - 1 - spec_.cp_rank;
      apply(qkv.at((sz(b) * sz(T) + sz(k * c)) * sz(QKVl)), 1, c, chunk * c);
    }
  }
}

template <typename Weights>
void GptStage::fill_moe_weights(int layer, Weights& w) {
  const LayerHandles& h = layer_handles_[static_cast<size_t>(layer)];
  w.router = p(h.router);
  w.drouter = g(h.router);
  w.shared_up = p(h.shared_up);
  w.dshared_up = g(h.shared_up);
  w.shared_down = p(h.shared_down);
  w.dshared_down = g(h.shared_down);
  w.up.clear();
  w.dup.clear();
  w.down.clear();
  w.ddown.clear();
  for (size_t j = 0; j < h.expert_up.size(); ++j) {
    w.up.push_back(expert_params_.data() + h.expert_up[j]);
    w.dup.push_back(expert_grads_.data() + h.expert_up[j]);
    w.down.push_back(expert_params_.data() + h.expert_down[j]);
    w.ddown.push_back(expert_grads_.data() + h.expert_down[j]);
  }
}

// out (BT, C) = res2 + the MoE MLP of ln2: this tp rank's part of the sum (moe_layer.h).
Status GptStage::moe_forward(int layer, float* out, LayerActs& a) {
  if (!a.moe) a.moe = std::make_unique<MoeLayer::Acts>();
  MoeLayer::Weights wt;
  fill_moe_weights(layer, wt);
  if (Status st = moe_->forward(out, a.ln2.in().f32(), a.res2.data(), wt, *a.moe); !st) return st;
  if (recomputing_) return Status::OK();
  const MoeRouting& r = a.moe->routing;
  aux_loss_ += a.moe->aux;
  auto& load = moe_load_[layer];
  if (load.empty()) load.assign(static_cast<size_t>(desc_.experts), 0);
  for (size_t e = 0; e < load.size(); ++e) load[e] += r.routed[e];
  moe_dropped_ += r.dropped;
  return Status::OK();
}

Status GptStage::moe_backward(int layer, const LayerActs& a, const float* dres, double aux_scale) {
  MoeLayer::Weights wt;
  fill_moe_weights(layer, wt);
  return moe_->backward(dtmp_c_.data(), dres, a.ln2.in().f32(), wt, *a.moe, aux_scale);
}

Status GptStage::layer_forward(int layer, const float* x, float* out, LayerActs& a) {
  const auto& d = desc_;
  const int B = spec_.micro_batch, T = local_seq(), C = d.hidden, t = spec_.tp, NHl = d.heads / t, NKVl = d.kv_heads / t, HS = d.head_dim,
            Cl = d.q_width() / t, QKVl = d.qkv_width() / t, Fl = d.ffn / t, UPl = d.up_width() / t, BT = B * T;
  const LayerHandles& h = layer_handles_[static_cast<size_t>(layer)];
  const bool bias_here = spec_.tp_rank == 0;  // row-parallel biases and the residual: added once across the TP sum
  norm_forward(a.ln1.out(), a.ln1_mean.data(), a.ln1_rstd.data(), x, h.norm1, h.norm1_bias, BT);
  k_->matmul_forward(a.qkv.out(), a.ln1.in(), w(h.qkv), w(h.qkv_bias), BT, C, QKVl, layout_);
  if (d.rope()) rope(a.qkv.out(), false);
  if (cp_attn_) {
    if (Status st = cp_attn_->forward(a.atty.out(), a.att.data(), a.qkv.in(), a.full_qkv.out(), a.full_out.out()); !st) return st;
  } else if (spec_.flash_attention) {
    k_->flash_attention_forward(a.atty.out(), a.att.data(), a.qkv.in(), B, T, NHl, HS, NKVl);
  } else {
    k_->attention_forward(a.atty.out(), a.att.data(), a.qkv.in(), B, T, NHl, HS, NKVl);
  }
  // res2 = x + out_proj(...): the residual comes in the GEMM, on one tp rank as the bias does, so
  // that the TP sum adds it once.
  k_->matmul_forward(a.res2.data(), a.atty.in(), w(h.out), bias_here ? p(h.out_bias) : nullptr, BT, Cl, C, layout_, bias_here ? x : nullptr);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, a.res2.data(), a.res2.size(), tp_host_); !st) return st;
  }
  norm_forward(a.ln2.out(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), h.norm2, h.norm2_bias, BT);
  if (moe_layer(layer)) {
    if (Status st = moe_forward(layer, out, a); !st) return st;
    if (spec_.tp > 1) return all_reduce_on_device(*tp_, *dev_, out, static_cast<size_t>(BT) * C, tp_host_);
    return Status::OK();
  }
  if (d.swiglu()) {
    k_->matmul_forward(a.fch.out(), a.ln2.in(), w(h.up), w(h.up_bias), BT, C, UPl, layout_);  // gate | up
    k_->swiglu_forward(a.fch_gelu.out(), a.fch.in(), BT, Fl);
  } else {
    k_->matmul_gelu_forward(a.fch.out(), a.fch_gelu.out(), a.ln2.in(), w(h.up), w(h.up_bias), BT, C, Fl, layout_);
  }
  k_->matmul_forward(out, a.fch_gelu.in(), w(h.down), bias_here ? p(h.down_bias) : nullptr, BT, Fl, C, layout_,
                     bias_here ? a.res2.data() : nullptr);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, out, static_cast<size_t>(BT) * C, tp_host_); !st) return st;
  }
  return Status::OK();
}

// dres (BT, C): the gradient at the layer's output on entry, at its input x on return; each
// norm's backward adds its branch's gradient to it in place, after the GEMM that reads it has run
// (the residual path's gradient passes through unchanged). Parameter gradients accumulate.
Status GptStage::layer_backward(int layer, const float* x, const LayerActs& a, float* dres) {
  const auto& d = desc_;
  const int B = spec_.micro_batch, T = local_seq(), C = d.hidden, t = spec_.tp, NHl = d.heads / t, NKVl = d.kv_heads / t, HS = d.head_dim,
            Cl = d.q_width() / t, QKVl = d.qkv_width() / t, Fl = d.ffn / t, UPl = d.up_width() / t, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  const LayerHandles& h = layer_handles_[static_cast<size_t>(layer)];
  // The output projections' GEMMs read dres as its bf16 copy with bf16 activations, which each
  // norm's backward writes beside dres (and backward() makes at a chunk's start).
  bf16* dres_low = dres_low_.size() ? dres_low_.data() : nullptr;
  const ActIn dres_gemm = dres_low ? ActIn(dres_low) : ActIn(dres);
  // MLP: out = res2 + down(act(up(norm_2(res2)))).
  // The gradients between GEMMs and the kernels beside them (at the activation's output and
  // input, at attention's output and at q, k, v) are ActBuffers: bf16 with bf16 activations,
  // written so by the kernel that makes them and read as they are by the next, with no cast
  // between.
  // An MoE layer's MLP instead: dtmp_c_ = this tp rank's part of the gradient at ln2.
  ActBuffer& dfch = *dtmp_f_;  // at the activation's output (GELU: then in place at its input)
  if (moe_layer(layer)) {
    if (Status st = moe_backward(layer, a, dres, aux_scale_); !st) return st;
  } else if (d.swiglu()) {
    k_->matmul_backward(dfch.out(), g(h.down), g(h.down_bias), dres_gemm, a.fch_gelu.in(), w(h.down), BT, Fl, C, layout_);
    k_->swiglu_backward(dtmp_up_->out(), a.fch.in(), dfch.in(), BT, Fl);
    k_->matmul_backward(dtmp_c_.data(), g(h.up), g(h.up_bias), dtmp_up_->in(), a.ln2.in(), w(h.up), BT, C, UPl, layout_);
  } else {
    k_->matmul_backward(dfch.out(), g(h.down), g(h.down_bias), dres_gemm, a.fch_gelu.in(), w(h.down), BT, Fl, C, layout_);
    k_->gelu_backward(dfch.out(), a.fch.in(), dfch.in(), static_cast<size_t>(BT) * Fl);
    k_->matmul_backward(dtmp_c_.data(), g(h.up), g(h.up_bias), dfch.in(), a.ln2.in(), w(h.up), BT, C, Fl, layout_);
  }
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, dtmp_c_.data(), n, tp_host_); !st) return st;
  }
  norm_backward(dres, h.norm2, h.norm2_bias, dtmp_c_.data(), a.res2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), BT, dres_low);
  // dres is now the gradient at res2. Attention: res2 = x + out_proj(attn(rope(qkv(norm_1(x))))).
  k_->matmul_backward(dtmp_cl_->out(), g(h.out), g(h.out_bias), dres_gemm, a.atty.in(), w(h.out), BT, Cl, C, layout_);
  if (cp_attn_) {
    if (Status st = cp_attn_->backward(dtmp_3c_->out(), dtmp_cl_->in(), a.qkv.in(), a.atty.in(), a.att.data(), a.full_qkv.in(), a.full_out.in());
        !st) {
      return st;
    }
  } else if (spec_.flash_attention) {
    k_->flash_attention_backward(dtmp_3c_->out(), scratch_att_.data(), dtmp_cl_->in(), a.qkv.in(), a.atty.in(), a.att.data(), B, T,
                                 NHl, HS, NKVl);
  } else {
    k_->attention_backward(dtmp_3c_->out(), scratch_att_.data(), dtmp_cl_->in(), a.qkv.in(), a.att.data(), B, T, NHl, HS, NKVl);
  }
  if (d.rope()) rope(dtmp_3c_->out(), true);
  k_->matmul_backward(dtmp_c_.data(), g(h.qkv), g(h.qkv_bias), dtmp_3c_->in(), a.ln1.in(), w(h.qkv), BT, C, QKVl, layout_);
  if (spec_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, *dev_, dtmp_c_.data(), n, tp_host_); !st) return st;
  }
  norm_backward(dres, h.norm1, h.norm1_bias, dtmp_c_.data(), x, a.ln1_mean.data(), a.ln1_rstd.data(), BT, dres_low);
  return Status::OK();
}

Status GptStage::forward(int chunk, int mb, const int32_t* tokens, const float* input, const int32_t* targets, float loss_scale,
                         float* output, double* loss) {
  const int ci = chunk_index(chunk);
  if (ci < 0) return Status::internal("gpt: chunk " + std::to_string(chunk) + " is not on this rank");
  const auto& m = spec_.model;
  const int B = spec_.micro_batch, T = local_seq(), C = m.hidden, V = m.vocab, BT = B * T;
  const size_t n = static_cast<size_t>(BT) * C;
  Device& dev = *dev_;
  if (weights_low_stale_ && weights_low_.size()) {  // the weights changed since the last copy
    k_->round_to_bf16(weights_low_.data(), params_.data(), params_.size());
    weights_low_stale_ = false;
  }
  auto acts = std::make_unique<ChunkActs>();
  acts->loss_scale = loss_scale;
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
      if (Status st = use_ends({end_.embedding, end_.positions}, UnitStorage::Use::kForward); !st) return st;
      if (spec_.cp == 1 || end_.positions == kAbsent) {
        k_->encoder_forward(acts->inputs[0].data(), acts->tokens.data(), p(end_.embedding), p(end_.positions), B, T, C);
      } else {  // each chunk of each sequence with its positions' rows of wpe
        const std::vector<int32_t> pos = ContextAttention::positions(m.seq_len, spec_.cp, spec_.cp_rank);
        for (int b = 0; b < B; ++b) {
          for (int k = 0; k < 2; ++k) {
            const size_t row = sz(b) * sz(T) + sz(k * T / 2);
            k_->encoder_forward(acts->inputs[0].data() + row * sz(C), acts->tokens.data() + row, p(end_.embedding),
                                p(end_.positions) + sz(pos[sz(k * T / 2)]) * sz(C), 1, T / 2, C);
          }
        }
      }
      if (Status st = done_ends({end_.embedding, end_.positions}, UnitStorage::Use::kForward); !st) return st;
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
    }
    float* dst = i + 1 < layers ? acts->inputs[static_cast<size_t>(i + 1)].data() : out_.data();
    const size_t held_before = a->bytes();  // an MoE layer's activations grow with its routing
    if (Status st = use_layer(first_layer + i, UnitStorage::Use::kForward); !st) return st;
    if (Status st = layer_forward(first_layer + i, acts->inputs[static_cast<size_t>(i)].data(), dst, *a); !st) return st;
    if (Status st = done_layer(first_layer + i, UnitStorage::Use::kForward); !st) return st;
    if (own) {
      acts->bytes += a->bytes();
    } else if (a->bytes() > held_before) {
      account(static_cast<ptrdiff_t>(a->bytes() - held_before));
    }
    if (own) acts->layers.push_back(std::move(own));
  }
  if (chunk == spec_.num_chunks - 1) {
    // Head: the final norm, logits against the embedding (tied) or lm_head, cross-entropy, and
    // their backward now.
    if (Status st = head_scratch(); !st) return st;
    if (Status st = dev.copy_from_host(targets_.data(), targets, targets_.bytes()); !st) return st;
    const float* x = layers > 0 ? out_.data() : input;
    float* logits = logits_.data();
    const std::vector<size_t> head_units = {end_.final_norm, end_.final_norm_bias, end_.head};
    if (Status st = use_ends(head_units, UnitStorage::Use::kBackward); !st) return st;
    norm_forward(lnf_->out(), lnf_mean_.data(), lnf_rstd_.data(), x, end_.final_norm, end_.final_norm_bias, BT);
    k_->matmul_forward(logits, lnf_->in(), w(end_.head), nullptr, BT, C, V, Layout::kOutIn);
    // The loss, and its gradient at the logits: over them in place, or into a bf16 buffer with
    // bf16 activations, so that the head's GEMMs read it as it is.
    const ActOut dlogits = dlogits_ ? dlogits_->out() : ActOut(logits);
    const double l = k_->crossentropy_forward_backward(losses_.data(), dlogits, logits, targets_.data(), loss_scale, BT, V);
    if (loss) *loss = l;
    k_->matmul_backward(dlnf_.data(), g(end_.head), nullptr, dlogits, lnf_->in(), w(end_.head), BT, C, V, Layout::kOutIn);
    if (Status st = allocate_buffer(acts->dhead, dev, n, true); !st) return st;
    norm_backward(acts->dhead.data(), end_.final_norm, end_.final_norm_bias, dlnf_.data(), x, lnf_mean_.data(), lnf_rstd_.data(), BT,
                  nullptr);
    if (Status st = done_ends(head_units, UnitStorage::Use::kBackward); !st) return st;
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
  const int B = spec_.micro_batch, T = local_seq(), C = m.hidden;
  const size_t n = static_cast<size_t>(B) * T * C;
  const int first_layer = spec_.chunk_first_layer[static_cast<size_t>(ci)];
  const int layers = spec_.chunk_layers[static_cast<size_t>(ci)];
  Device& dev = *dev_;
  // The MoE layers' load-balancing gradient: per micro-batch's aux, as the LM loss's per token
  // times the micro-batch's tokens over its whole sequences (B seq_len: with cp the sum over the
  // cp ranks' gradients is the micro-batch's, which the dp x cp average then divides like the rest).
  aux_scale_ = static_cast<double>(acts->loss_scale) * B * m.seq_len;
  // One buffer carries the gradient down the layers, each layer's backward updating it in place.
  float* dres = dres_.data();
  if (Status st = dev.copy(dres, chunk == spec_.num_chunks - 1 ? acts->dhead.data() : dout, n * sizeof(float)); !st) return st;
  if (dres_low_.size()) k_->round_to_bf16(dres_low_.data(), dres, n);  // the layers' layernorms keep it after
  for (int i = layers - 1; i >= 0; --i) {
    const float* x = acts->inputs[static_cast<size_t>(i)].data();
    if (Status st = use_layer(first_layer + i, UnitStorage::Use::kBackward); !st) return st;
    LayerActs* a;
    if (spec_.full_recompute) {
      a = recompute_acts_.get();
      const auto t0 = std::chrono::steady_clock::now();
      recomputing_ = true;
      const Status st = layer_forward(first_layer + i, x, out_.data(), *a);
      recomputing_ = false;
      if (!st) return st;
      recompute_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      a = acts->layers[static_cast<size_t>(i)].get();
    }
    if (Status st = layer_backward(first_layer + i, x, *a, dres); !st) return st;
    if (Status st = done_layer(first_layer + i, UnitStorage::Use::kBackward); !st) return st;
    if (layer_done && *layer_done) {
      if (Status st = (*layer_done)(first_layer + i); !st) return st;
    }
  }
  // dres now holds the gradient at the chunk's input.
  if (chunk == 0) {
    if (layers > 0) {
      if (Status st = use_ends({end_.embedding, end_.positions}, UnitStorage::Use::kBackward); !st) return st;
      if (spec_.cp == 1 || end_.positions == kAbsent) {
        k_->encoder_backward(g(end_.embedding), g(end_.positions), dres, acts->tokens.data(), B, T, C);
      } else {
        const std::vector<int32_t> pos = ContextAttention::positions(m.seq_len, spec_.cp, spec_.cp_rank);
        for (int b = 0; b < B; ++b) {
          for (int k = 0; k < 2; ++k) {
            const size_t row = sz(b) * sz(T) + sz(k * T / 2);
            k_->encoder_backward(g(end_.embedding), g(end_.positions) + sz(pos[sz(k * T / 2)]) * sz(C), dres + row * sz(C),
                                 acts->tokens.data() + row, 1, T / 2, C);
          }
        }
      }
      if (Status st = done_ends({end_.embedding, end_.positions}, UnitStorage::Use::kBackward); !st) return st;
    }
  } else if (dinput) {
    if (Status st = dev.copy(dinput, dres, n * sizeof(float)); !st) return st;
  }
  for (auto& l : acts->layers) free_layer_acts_.push_back(std::move(l));
  account(-static_cast<ptrdiff_t>(acts->bytes));
  return Status::OK();
}

}  // namespace stagecraft::runtime
