// The CPU backend's Ops table: runtime::cpu's float kernels behind the virtual interface.
//
// bf16 activations (ActIn, ActOut): a kernel that writes one computes in fp32 into this thread's
// scratch and rounds it into place with cpu::to_bf16; one that reads one widens it into scratch
// first. That is the math a GPU does (fp32 arithmetic, bf16 storage, bf16.h's rounding) at the
// cost of a copy, so CPU suites check the bf16 path of the layer code (gpt_stage.cpp). The CPU
// engine itself trains in fp32 (trainer.cpp), so no run pays for the copies.
#include <algorithm>
#include <vector>

#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime {

namespace {

// Per-thread fp32 scratch for bf16 activations: slot 0 for an output, 1 for an input, 2 for a
// weight, 3 for a bias, 4 for an incoming gradient (ranks that are threads of one process each
// have their own).
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buf[5];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

// The fp32 values of `x` (n elements): the buffer itself, or a widened copy in scratch `slot`.
const float* widened(ActIn x, size_t n, int slot = 1) {
  if (!x.low()) return x.f32();
  float* f = scratch(slot, n);
  cpu::from_bf16(f, x.low(), n);
  return f;
}

// Where a kernel writes `out` (n elements) in fp32, and the rounding into `out` afterwards.
float* staged(ActOut out, size_t n) { return out.low() ? scratch(0, n) : out.f32(); }
void settle(ActOut out, const float* staged_values, size_t n) {
  if (out.low()) cpu::to_bf16(out.low(), staged_values, n);
}

// An in-place kernel's fp32 view of `x` (n elements): the buffer itself, or its bf16 values widened
// into the output's scratch, which settle() then rounds back into x.
float* in_place(ActOut x, size_t n) {
  if (!x.low()) return x.f32();
  float* f = scratch(0, n);
  cpu::from_bf16(f, x.low(), n);
  return f;
}

class CpuOps final : public Ops {
 public:
  // With a residual: the GEMM's output plus the residual, as gpt_stage.cpp added them before.
  void matmul_forward(ActOut out, ActIn inp, ActIn weight, ActIn bias, int BT, int C, int OC, Layout layout,
                      const float* residual) const override {
    const size_t n = size_t(BT) * OC;
    float* o = staged(out, n);
    float* g = residual == o ? scratch(4, n) : o;  // in place over the residual: the GEMM beside it first
    cpu::matmul_forward(g, widened(inp, size_t(BT) * C), widened(weight, size_t(C) * OC, 2), widened(bias, size_t(OC), 3), BT, C, OC,
                        layout);
    if (residual) cpu::residual_forward(o, g, residual, n);
    settle(out, o, n);
  }
  void matmul_backward(ActOut dinp, float* dweight, float* dbias, ActIn dout, ActIn inp, ActIn weight, int BT, int C, int OC,
                       Layout layout) const override {
    const size_t n = size_t(BT) * C;
    float* d = dinp.data ? staged(dinp, n) : nullptr;
    cpu::matmul_backward(d, dweight, dbias, widened(dout, size_t(BT) * OC, 4), dweight ? widened(inp, n) : inp.f32(),
                         d ? widened(weight, size_t(C) * OC, 2) : weight.f32(), BT, C, OC, layout);
    if (d) settle(dinp, d, n);
  }
  void layernorm_forward(ActOut out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N,
                         int C) const override {
    const size_t n = size_t(N) * C;
    float* o = staged(out, n);
    cpu::layernorm_forward(o, mean, rstd, inp, weight, bias, N, C);
    settle(out, o, n);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C, bf16* dinp_low) const override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    if (dinp && dinp_low) cpu::to_bf16(dinp_low, dinp, size_t(N) * C);
  }
  // qkv (B, T, (NH + 2 NKV) HS), out (B, T, NH HS).
  void attention_forward(ActOut out, float* att, ActIn qkv, int B, int T, int NH, int HS, int NKV) const override {
    const size_t n = size_t(B) * T * NH * HS, n3 = size_t(B) * T * (NH + 2 * NKV) * HS;
    float* o = staged(out, n);
    cpu::attention_forward(o, att, widened(qkv, n3), B, T, NH, HS, NKV);
    settle(out, o, n);
  }
  void attention_backward(ActOut dqkv, float* scratch, ActIn dout, ActIn qkv, const float* att, int B, int T, int NH, int HS,
                          int NKV) const override {
    const size_t n = size_t(B) * T * NH * HS, n3 = size_t(B) * T * (NH + 2 * NKV) * HS;
    float* d = staged(dqkv, n3);
    cpu::attention_backward(d, scratch, widened(dout, n, 4), widened(qkv, n3), att, B, T, NH, HS, NKV);
    settle(dqkv, d, n3);
  }
  void rmsnorm_forward(ActOut out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) const override {
    const size_t n = size_t(N) * C;
    float* o = staged(out, n);
    cpu::rmsnorm_forward(o, rstd, inp, weight, N, C, eps);
    settle(out, o, n);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd,
                        int N, int C, bf16* dinp_low) const override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    if (dinp && dinp_low) cpu::to_bf16(dinp_low, dinp, size_t(N) * C);
  }
  // In place on a bf16 qkv: widened, rotated in fp32, rounded back (v goes back as it was).
  void rope_forward(ActOut qkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const override {
    const size_t n3 = size_t(B) * T * (NH + 2 * NKV) * HS;
    float* x = in_place(qkv, n3);
    cpu::rope_forward(x, B, T, NH, NKV, HS, theta, first);
    settle(qkv, x, n3);
  }
  void rope_backward(ActOut dqkv, int B, int T, int NH, int NKV, int HS, float theta, int first = 0) const override {
    const size_t n3 = size_t(B) * T * (NH + 2 * NKV) * HS;
    float* x = in_place(dqkv, n3);
    cpu::rope_backward(x, B, T, NH, NKV, HS, theta, first);
    settle(dqkv, x, n3);
  }
  void attention_block_forward(float* out, float* lse, const float* q, const float* kv, const int32_t* q_pos, const int32_t* k_pos,
                               int B, int Tq, int Tk, int NH, int HS, int NKV) const override {
    cpu::attention_block_forward(out, lse, q, kv, q_pos, k_pos, B, Tq, Tk, NH, HS, NKV);
  }
  void attention_block_merge(float* acc, float* acc_lse, const float* out, const float* lse, int B, int T, int NH,
                             int HS) const override {
    cpu::attention_block_merge(acc, acc_lse, out, lse, B, T, NH, HS);
  }
  void attention_block_backward(float* dq, float* dkv, const float* dout, const float* q, const float* kv, const float* out,
                                const float* lse, const int32_t* q_pos, const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                int NKV) const override {
    cpu::attention_block_backward(dq, dkv, dout, q, kv, out, lse, q_pos, k_pos, B, Tq, Tk, NH, HS, NKV);
  }
  void copy_columns(ActOut dst, int ld_dst, ActIn src, int ld_src, int rows, int width) const override {
    for (int r = 0; r < rows; ++r) {
      const size_t d = size_t(r) * ld_dst, s = size_t(r) * ld_src;
      if (dst.low() && src.low()) {
        std::copy(src.low() + s, src.low() + s + width, dst.low() + d);
      } else if (dst.low()) {
        cpu::to_bf16(dst.low() + d, src.f32() + s, size_t(width));
      } else if (src.low()) {
        cpu::from_bf16(dst.f32() + d, src.low() + s, size_t(width));
      } else {
        std::copy(src.f32() + s, src.f32() + s + width, dst.f32() + d);
      }
    }
  }
  // inp (N, 2F) = gate | up, out (N, F).
  void swiglu_forward(ActOut out, ActIn inp, int N, int F) const override {
    const size_t n = size_t(N) * F;
    float* o = staged(out, n);
    cpu::swiglu_forward(o, widened(inp, 2 * n), N, F);
    settle(out, o, n);
  }
  void swiglu_backward(ActOut dinp, ActIn inp, ActIn dout, int N, int F) const override {
    const size_t n = size_t(N) * F;
    const float* dy = widened(dout, n, 4);
    float* d = staged(dinp, 2 * n);
    cpu::swiglu_backward(d, widened(inp, 2 * n), dy, N, F);
    settle(dinp, d, 2 * n);
  }
  void gather_rows(float* out, const float* inp, const int32_t* index, const float* weight, int R, int C) const override {
    cpu::gather_rows(out, inp, index, weight, R, C);
  }
  void scatter_add_rows(float* out, const float* inp, const int32_t* index, const float* weight, int N, int K, int C) const override {
    cpu::scatter_add_rows(out, inp, index, weight, N, K, C);
  }
  void row_dot(float* out, const float* a, const float* b, int R, int C) const override { cpu::row_dot(out, a, b, R, C); }
  void gelu_forward(ActOut out, ActIn inp, size_t N) const override {
    float* o = staged(out, N);
    cpu::gelu_forward(o, widened(inp, N), N);
    settle(out, o, N);
  }
  // dinp may be dout (in place).
  void gelu_backward(ActOut dinp, ActIn inp, ActIn dout, size_t N) const override {
    const float* dy = widened(dout, N, 4);
    float* d = staged(dinp, N);
    cpu::gelu_backward(d, widened(inp, N), dy, N);
    settle(dinp, d, N);
  }
  void residual_forward(float* out, const float* inp1, const float* inp2, size_t N) const override {
    cpu::residual_forward(out, inp1, inp2, N);
  }
  void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N) const override {
    cpu::residual_backward(dinp1, dinp2, dout, N);
  }
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C) const override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C) const override {
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  double crossentropy_forward(float* losses, float* probs, const float* logits, const int32_t* targets, int N, int V) const override {
    return cpu::crossentropy_forward(losses, probs, logits, targets, N, V);
  }
  void crossentropy_backward(ActOut dlogits, const float* probs, const int32_t* targets, float dloss, int N, int V) const override {
    const size_t n = size_t(N) * V;
    float* d = staged(dlogits, n);
    cpu::crossentropy_backward(d, probs, targets, dloss, N, V);
    settle(dlogits, d, n);
  }
  void adamw_update(float* params, float* m, float* v, const float* grads, size_t N, const AdamWOptions& opt, int64_t step, bool decay,
                    float grad_scale) const override {
    cpu::adamw_update(params, m, v, grads, N, opt, step, decay, grad_scale);
  }
  double sum_of_squares(const float* x, size_t N) const override { return cpu::sum_of_squares(x, N); }
  void adamw_update_segments(float* params, float* m, float* v, const float* grads, SegmentList segs, const AdamWOptions& opt,
                             int64_t step, float grad_scale) const override {
    cpu::adamw_update_segments(params, m, v, grads, segs.segments, segs.count, opt, step, grad_scale);
  }
  double sum_of_squares_segments(const float* x, SegmentList segs) const override {
    return cpu::sum_of_squares_segments(x, segs.segments, segs.count);
  }
  void scale(float* x, size_t N, float s) const override { cpu::scale(x, N, s); }
  void round_to_bf16(bf16* out, const float* in, size_t N) const override { cpu::to_bf16(out, in, N); }
};

}  // namespace

const Ops& cpu_ops() {
  static const CpuOps ops;
  return ops;
}

}  // namespace stagecraft::runtime
