// A tiny GPT-2 composed of the CPU kernels the way a model assembler composes them (one dresidual
// buffer, parameter gradients accumulating, the tied head), in float or double. Test-only: the
// engine's real model is runtime/gpt_stage; this one exists to check the kernels against PyTorch
// (tst_kernels, tests/engine/ref/gpt_ref.py) without depending on it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/rng.h"

namespace tiny_gpt {

namespace rt = stagecraft::runtime;
namespace cpu = stagecraft::runtime::cpu;
using cpu::Layout;

struct GptDims {
  int B, T, C, NH, V, L;
};

// Parameter tensors in Hugging Face order and shape; gpt_ref.py lists the same.
inline std::vector<std::pair<std::string, size_t>> gpt_tensors(const GptDims& d) {
  const size_t C = d.C;
  std::vector<std::pair<std::string, size_t>> t = {{"wte", size_t(d.V) * C}, {"wpe", size_t(d.T) * C}};
  for (int l = 0; l < d.L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (auto [n, s] : std::vector<std::pair<const char*, size_t>>{
             {"ln_1.weight", C}, {"ln_1.bias", C}, {"attn.c_attn.weight", C * 3 * C},
             {"attn.c_attn.bias", 3 * C}, {"attn.c_proj.weight", C * C}, {"attn.c_proj.bias", C},
             {"ln_2.weight", C}, {"ln_2.bias", C}, {"mlp.c_fc.weight", C * 4 * C},
             {"mlp.c_fc.bias", 4 * C}, {"mlp.c_proj.weight", 4 * C * C}, {"mlp.c_proj.bias", C}})
      t.push_back({p + n, s});
  }
  t.push_back({"ln_f.weight", C});
  t.push_back({"ln_f.bias", C});
  return t;
}

template <typename Real>
struct TinyGpt {
  GptDims d;
  std::vector<Real> params, grads;
  std::vector<Real*> p, g;  // per tensor, in gpt_tensors order
  // activations
  std::vector<Real> res, ln1, mean1, rstd1, qkv, atty, att, xmid, ln2, mean2, rstd2, fch, fcg, lnf,
      meanf, rstdf, logits, losses;
  // gradients of activations and scratch, reused by every layer
  std::vector<Real> dres, dln, dqkv, datty, dfch, dfcg, dlnf, scratch;

  explicit TinyGpt(const GptDims& dims, const std::vector<double>& init) : d(dims) {
    params.assign(init.begin(), init.end());
    grads.assign(init.size(), Real(0));
    size_t off = 0;
    for (auto& [name, n] : gpt_tensors(d)) {
      p.push_back(params.data() + off);
      g.push_back(grads.data() + off);
      off += n;
    }
    const size_t BT = size_t(d.B) * d.T, C = d.C, L = d.L;
    res.resize((L + 1) * BT * C);
    ln1.resize(L * BT * C), mean1.resize(L * BT), rstd1.resize(L * BT), qkv.resize(L * BT * 3 * C);
    atty.resize(L * BT * C), att.resize(L * d.B * d.NH * size_t(d.T) * d.T);
    xmid.resize(L * BT * C), ln2.resize(L * BT * C), mean2.resize(L * BT), rstd2.resize(L * BT);
    fch.resize(L * BT * 4 * C), fcg.resize(L * BT * 4 * C);
    lnf.resize(BT * C), meanf.resize(BT), rstdf.resize(BT), logits.resize(BT * d.V), losses.resize(BT);
    dres.resize(BT * C), dln.resize(BT * C), dqkv.resize(BT * 3 * C), datty.resize(BT * C);
    dfch.resize(BT * 4 * C), dfcg.resize(BT * 4 * C), dlnf.resize(BT * C), scratch.resize(att.size() / L);
  }

  // Forward; returns the mean loss. logits keeps the logits (probs go to `probs_`).
  double forward(const int32_t* tokens, const int32_t* targets) {
    const int B = d.B, T = d.T, C = d.C, NH = d.NH, BT = B * T;
    const size_t a = size_t(BT) * C, att_l = size_t(B) * NH * T * T;
    cpu::encoder_forward(res.data(), tokens, p[0], p[1], B, T, C);
    for (int l = 0; l < d.L; ++l) {
      Real* const* w = p.data() + 2 + 12 * l;
      Real* x = res.data() + l * a;
      cpu::layernorm_forward(&ln1[l * a], &mean1[l * BT], &rstd1[l * BT], x, w[0], w[1], BT, C);
      cpu::matmul_forward(&qkv[l * 3 * a], &ln1[l * a], w[2], w[3], BT, C, 3 * C);
      cpu::attention_forward(&atty[l * a], &att[l * att_l], &qkv[l * 3 * a], B, T, NH, C / NH, NH);
      cpu::matmul_forward(&xmid[l * a], &atty[l * a], w[4], w[5], BT, C, C);
      cpu::residual_forward(&xmid[l * a], &xmid[l * a], x, a);
      cpu::layernorm_forward(&ln2[l * a], &mean2[l * BT], &rstd2[l * BT], &xmid[l * a], w[6], w[7], BT, C);
      cpu::matmul_forward(&fch[l * 4 * a], &ln2[l * a], w[8], w[9], BT, C, 4 * C);
      cpu::gelu_forward(&fcg[l * 4 * a], &fch[l * 4 * a], 4 * a);
      Real* next = res.data() + (l + 1) * a;
      cpu::matmul_forward(next, &fcg[l * 4 * a], w[10], w[11], BT, 4 * C, C);
      cpu::residual_forward(next, next, &xmid[l * a], a);
    }
    Real* const* f = p.data() + 2 + 12 * d.L;
    cpu::layernorm_forward(lnf.data(), meanf.data(), rstdf.data(), res.data() + d.L * a, f[0], f[1], BT, C);
    cpu::matmul_forward(logits.data(), lnf.data(), p[0], static_cast<const Real*>(nullptr), BT, C, d.V,
                        Layout::kOutIn);
    probs_.resize(logits.size());
    return cpu::crossentropy_forward(losses.data(), probs_.data(), logits.data(), targets, BT, d.V);
  }

  // Backward of the mean loss; parameter gradients accumulate into grads.
  void backward(const int32_t* tokens, const int32_t* targets) {
    const int B = d.B, T = d.T, C = d.C, NH = d.NH, BT = B * T;
    const size_t a = size_t(BT) * C, att_l = size_t(B) * NH * T * T;
    // probs_ becomes dlogits in place
    cpu::crossentropy_backward(probs_.data(), probs_.data(), targets, Real(1) / BT, BT, d.V);
    cpu::matmul_backward(dlnf.data(), g[0], static_cast<Real*>(nullptr), probs_.data(), lnf.data(), p[0],
                         BT, C, d.V, Layout::kOutIn);
    Real* const* f = p.data() + 2 + 12 * d.L;
    Real* const* gf = g.data() + 2 + 12 * d.L;
    std::fill(dres.begin(), dres.end(), Real(0));
    cpu::layernorm_backward(dres.data(), gf[0], gf[1], dlnf.data(), res.data() + d.L * a, f[0],
                            meanf.data(), rstdf.data(), BT, C);
    for (int l = d.L - 1; l >= 0; --l) {
      Real* const* w = p.data() + 2 + 12 * l;
      Real* const* gw = g.data() + 2 + 12 * l;
      // dres = dL/dx_{l+1}: it is the gradient of the MLP output too
      cpu::matmul_backward(dfcg.data(), gw[10], gw[11], dres.data(), &fcg[l * 4 * a], w[10], BT, 4 * C, C);
      cpu::gelu_backward(dfch.data(), &fch[l * 4 * a], dfcg.data(), 4 * a);
      cpu::matmul_backward(dln.data(), gw[8], gw[9], dfch.data(), &ln2[l * a], w[8], BT, C, 4 * C);
      cpu::layernorm_backward(dres.data(), gw[6], gw[7], dln.data(), &xmid[l * a], w[6], &mean2[l * BT],
                              &rstd2[l * BT], BT, C);
      // dres = dL/dx_mid
      cpu::matmul_backward(datty.data(), gw[4], gw[5], dres.data(), &atty[l * a], w[4], BT, C, C);
      cpu::attention_backward(dqkv.data(), scratch.data(), datty.data(), &qkv[l * 3 * a], &att[l * att_l],
                              B, T, NH, C / NH, NH);
      cpu::matmul_backward(dln.data(), gw[2], gw[3], dqkv.data(), &ln1[l * a], w[2], BT, C, 3 * C);
      cpu::layernorm_backward(dres.data(), gw[0], gw[1], dln.data(), res.data() + l * a, w[0],
                              &mean1[l * BT], &rstd1[l * BT], BT, C);
    }
    cpu::encoder_backward(g[0], g[1], dres.data(), tokens, B, T, C);
  }

  std::vector<Real> probs_;
};

// GPT-2 init from the RNG (rng.h), into one flat vector in gpt_tensors order; LN weights 1. The
// scale is larger than GPT-2's 0.02 so that every nonlinearity is exercised.
inline std::vector<double> gpt_init(const GptDims& d) {
  std::vector<double> v;
  for (auto& [name, n] : gpt_tensors(d)) {
    const size_t off = v.size();
    v.resize(off + n);
    const bool ln_weight = name.find("ln_") != std::string::npos && name.ends_with(".weight");
    rt::fill_normal(v.data() + off, 0, rt::TensorBlock::range(0, int64_t(n), int64_t(n)),
                    ln_weight ? 1.0 : 0.0, ln_weight ? 0.1 : 0.3, 7, rt::tensor_stream(name));
  }
  return v;
}

}  // namespace tiny_gpt
