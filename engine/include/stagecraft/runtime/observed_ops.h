// ObservedOps: an Ops table that forwards every kernel to another table and lets a subclass see
// each call — its kernel name and shape before, its end after — or change one kernel.
//
// What it is for: ProfiledDevice (profiled_device.h) times every kernel of a run through it;
// test devices inject faults into one kernel and forward the rest. base() is looked up on every
// call, so a decorator over a Device's table follows the table the device hands out now (a
// device's table changes with set_precision).
#pragma once

#include <cstdint>
#include <string>

#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime {

// What a call of a kernel is: its name (the Ops function's), its shape in words, and its
// floating-point operations where it is a GEMM or the fused attention (0 otherwise).
struct KernelCall {
  const char* name = "";
  std::string shape;
  double flops = 0;
};

class ObservedOps : public Ops {
 public:
  void matmul_forward(ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC, Layout layout,
                      const float* residual) const override {
    Scope s(*this, {"matmul_forward", gemm_shape(BT, C, OC, layout), 2.0 * BT * C * OC});
    base().matmul_forward(out, inp, weight, bias, BT, C, OC, layout, residual);
  }
  void matmul_gelu_forward(ActOut pre, ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC,
                           Layout layout) const override {
    Scope s(*this, {"matmul_gelu_forward", gemm_shape(BT, C, OC, layout), 2.0 * BT * C * OC});
    base().matmul_gelu_forward(pre, out, inp, weight, bias, BT, C, OC, layout);
  }
  void matmul_backward(ActOut dinp, float* dweight, float* dbias, ActIn dout, ActIn inp, ActIn weight, int BT, int C, int OC,
                       Layout layout) const override {
    Scope s(*this, {"matmul_backward", gemm_shape(BT, C, OC, layout), 2.0 * BT * C * OC * ((dinp.data ? 1 : 0) + (dweight ? 1 : 0))});
    base().matmul_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout);
  }
  void layernorm_forward(ActOut out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N,
                         int C) const override {
    Scope s(*this, {"layernorm_forward", rows(N, C)});
    base().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C, bf16* dinp_low) const override {
    Scope s(*this, {"layernorm_backward", rows(N, C)});
    base().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dinp_low);
  }
  void attention_forward(ActOut out, float* att, ActIn qkv, int B, int T, int NH, int HS, int NKV) const override {
    Scope s(*this, {"attention_forward", heads(B, T, NH, HS, NKV)});
    base().attention_forward(out, att, qkv, B, T, NH, HS, NKV);
  }
  void attention_backward(ActOut dqkv, float* scratch, ActIn dout, ActIn qkv, const float* att, int B, int T, int NH,
                          int HS, int NKV) const override {
    Scope s(*this, {"attention_backward", heads(B, T, NH, HS, NKV)});
    base().attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, HS, NKV);
  }
  bool has_flash_attention() const override { return base().has_flash_attention(); }
  int max_flash_head() const override { return base().max_flash_head(); }
  void flash_attention_forward(ActOut out, float* lse, ActIn qkv, int B, int T, int NH, int HS, int NKV) const override {
    Scope s(*this, {"flash_attention_forward", heads(B, T, NH, HS, NKV), causal_flops(B, T, NH, HS, 2)});
    base().flash_attention_forward(out, lse, qkv, B, T, NH, HS, NKV);
  }
  void flash_attention_backward(ActOut dqkv, float* scratch, ActIn dout, ActIn qkv, ActIn out, const float* lse, int B, int T,
                                int NH, int HS, int NKV) const override {
    Scope s(*this, {"flash_attention_backward", heads(B, T, NH, HS, NKV), causal_flops(B, T, NH, HS, 5)});
    base().flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, NKV);
  }
  void attention_block_forward(float* out, float* lse, const float* q, const float* kv, const int32_t* q_pos, const int32_t* k_pos,
                               int B, int Tq, int Tk, int NH, int HS, int NKV) const override {
    Scope s(*this, {"attention_block_forward", blocks(B, Tq, Tk, NH, HS, NKV)});
    base().attention_block_forward(out, lse, q, kv, q_pos, k_pos, B, Tq, Tk, NH, HS, NKV);
  }
  void attention_block_merge(float* acc, float* acc_lse, const float* out, const float* lse, int B, int T, int NH,
                             int HS) const override {
    Scope s(*this, {"attention_block_merge", heads(B, T, NH, HS, NH)});
    base().attention_block_merge(acc, acc_lse, out, lse, B, T, NH, HS);
  }
  void attention_block_backward(float* dq, float* dkv, const float* dout, const float* q, const float* kv, const float* out,
                                const float* lse, const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                int NKV) const override {
    Scope s(*this, {"attention_block_backward", blocks(B, Tq, Tk, NH, HS, NKV)});
    base().attention_block_backward(dq, dkv, dout, q, kv, out, lse, q_pos, k_pos, B, Tq, Tk, NH, HS, NKV);
  }
  void copy_columns(ActOut dst, int ld_dst, ActIn src, int ld_src, int rows_, int width) const override {
    Scope s(*this, {"copy_columns", rows(rows_, width)});
    base().copy_columns(dst, ld_dst, src, ld_src, rows_, width);
  }
  void rmsnorm_forward(ActOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) const override {
    Scope s(*this, {"rmsnorm_forward", rows(N, C)});
    base().rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd,
                        int N, int C, bf16* dinp_low) const override {
    Scope s(*this, {"rmsnorm_backward", rows(N, C)});
    base().rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, dinp_low);
  }
  void rope_forward(ActOut qkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const override {
    Scope s(*this, {"rope_forward", heads(B, T, NH, HS, NKV)});
    base().rope_forward(qkv, B, T, NH, NKV, HS, theta, first);
  }
  void rope_backward(ActOut dqkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const override {
    Scope s(*this, {"rope_backward", heads(B, T, NH, HS, NKV)});
    base().rope_backward(dqkv, B, T, NH, NKV, HS, theta, first);
  }
  void swiglu_forward(ActOut out, ActIn inp, int N, int F) const override {
    Scope s(*this, {"swiglu_forward", rows(N, F)});
    base().swiglu_forward(out, inp, N, F);
  }
  void swiglu_backward(ActOut dinp, ActIn inp, ActIn dout, int N, int F) const override {
    Scope s(*this, {"swiglu_backward", rows(N, F)});
    base().swiglu_backward(dinp, inp, dout, N, F);
  }
  void gather_rows(float* out, const float* inp, const int32_t* index, const float* weight, int R, int C) const override {
    Scope s(*this, {"gather_rows", rows(R, C)});
    base().gather_rows(out, inp, index, weight, R, C);
  }
  void scatter_add_rows(float* out, const float* inp, const int32_t* index, const float* weight, int N, int K, int C) const override {
    Scope s(*this, {"scatter_add_rows", rows(N, C) + " from " + std::to_string(K) + " rows each"});
    base().scatter_add_rows(out, inp, index, weight, N, K, C);
  }
  void row_dot(float* out, const float* a, const float* b, int R, int C) const override {
    Scope s(*this, {"row_dot", rows(R, C)});
    base().row_dot(out, a, b, R, C);
  }
  void gelu_forward(ActOut out, ActIn inp, size_t N) const override {
    Scope s(*this, {"gelu_forward", elements(N)});
    base().gelu_forward(out, inp, N);
  }
  void gelu_backward(ActOut dinp, ActIn inp, ActIn dout, size_t N) const override {
    Scope s(*this, {"gelu_backward", elements(N)});
    base().gelu_backward(dinp, inp, dout, N);
  }
  void residual_forward(float* out, const float* inp1, const float* inp2, size_t N) const override {
    Scope s(*this, {"residual_forward", elements(N)});
    base().residual_forward(out, inp1, inp2, N);
  }
  void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N) const override {
    Scope s(*this, {"residual_backward", elements(N)});
    base().residual_backward(dinp1, dinp2, dout, N);
  }
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) const override {
    Scope s(*this, {"encoder_forward", rows(B * T, C)});
    base().encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) const override {
    Scope s(*this, {"encoder_backward", rows(B * T, C)});
    base().encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  double crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int N, int V) const override {
    Scope s(*this, {"crossentropy_forward", rows(N, V)});
    return base().crossentropy_forward(losses, probs, logits, targets, N, V);
  }
  void crossentropy_backward(ActOut dlogits, const float* probs, const int32_t* targets, float dloss, int N, int V) const override {
    Scope s(*this, {"crossentropy_backward", rows(N, V)});
    base().crossentropy_backward(dlogits, probs, targets, dloss, N, V);
  }
  double crossentropy_forward_backward(float* losses, ActOut dlogits, float* logits, const int32_t* targets, float dloss, int N,
                                       int V) const override {
    Scope s(*this, {"crossentropy_forward_backward", rows(N, V)});
    return base().crossentropy_forward_backward(losses, dlogits, logits, targets, dloss, N, V);
  }
  void adamw_update(float* params, float* m, float* v, const float* grads, size_t N, const AdamWOptions& opt, int64_t step, bool decay,
                    float grad_scale) const override {
    Scope s(*this, {"adamw_update", elements(N)});
    base().adamw_update(params, m, v, grads, N, opt, step, decay, grad_scale);
  }
  double sum_of_squares(const float* x, size_t N) const override {
    Scope s(*this, {"sum_of_squares", elements(N)});
    return base().sum_of_squares(x, N);
  }
  void adamw_update_segments(float* params, float* m, float* v, const float* grads, SegmentList segs, const AdamWOptions& opt,
                             int64_t step, float grad_scale) const override {
    Scope s(*this, {"adamw_update_segments", elements(segs.elements)});
    base().adamw_update_segments(params, m, v, grads, segs, opt, step, grad_scale);
  }
  double sum_of_squares_segments(const float* x, SegmentList segs) const override {
    Scope s(*this, {"sum_of_squares_segments", elements(segs.elements)});
    return base().sum_of_squares_segments(x, segs);
  }
  void scale(float* x, size_t N, float sc) const override {
    Scope s(*this, {"scale", elements(N)});
    base().scale(x, N, sc);
  }
  void round_to_bf16(bf16* out, const float* in, size_t N) const override {
    Scope s(*this, {"round_to_bf16", elements(N)});
    base().round_to_bf16(out, in, N);
  }

 protected:
  // The table the calls go to.
  virtual const Ops& base() const = 0;
  // Around every call (nothing by default); may be called from several threads at once.
  virtual void enter(const KernelCall& /*call*/) const {}
  virtual void leave(const KernelCall& /*call*/) const {}

 private:
  struct Scope {
    const ObservedOps& ops;
    KernelCall call;
    Scope(const ObservedOps& o, KernelCall c) : ops(o), call(std::move(c)) { ops.enter(call); }
    ~Scope() { ops.leave(call); }
  };
  static std::string gemm_shape(int BT, int C, int OC, Layout layout) {
    return std::to_string(BT) + "x" + std::to_string(C) + " -> " + std::to_string(OC) + (layout == Layout::kOutIn ? " (W^T)" : "");
  }
  static std::string rows(long long N, long long C) { return std::to_string(N) + "x" + std::to_string(C); }
  static std::string elements(size_t N) { return std::to_string(N); }
  // The fused causal attention's work as FlashAttention-2 counts it: `products` products over the
  // pairs of a query and a key at or before it, 2 HS operations a pair; two forward (S, P V), five
  // backward (S, dP, dV, dK, dQ — this engine's kernels make seven there, S and dP twice, so that
  // dQ needs no atomics).
  static double causal_flops(int B, int T, int NH, int HS, int products) {
    return 2.0 * HS * products * B * NH * (double(T) * (T + 1) / 2);
  }
  // "B 2, T 32 x 32 keys, 12 heads of 64": a query block against a key block.
  static std::string blocks(int B, int Tq, int Tk, int NH, int HS, int NKV) {
    return heads(B, Tq, NH, HS, NKV) + ", " + std::to_string(Tk) + " keys";
  }
  // "B 2, T 64, 12 heads of 64", and ", 4 K/V heads" where they are fewer (grouped-query attention).
  static std::string heads(int B, int T, int NH, int HS, int NKV) {
    return "B " + std::to_string(B) + ", T " + std::to_string(T) + ", " + std::to_string(NH) + " heads of " + std::to_string(HS) +
           (NKV != NH ? ", " + std::to_string(NKV) + " K/V heads" : std::string());
  }
};

}  // namespace stagecraft::runtime
