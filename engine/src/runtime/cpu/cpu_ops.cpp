// The CPU backend's Ops table: runtime::cpu's float kernels behind the virtual interface.
#include "stagecraft/runtime/kernels.h"
#include "stagecraft/runtime/ops.h"

namespace stagecraft::runtime {

namespace {

class CpuOps final : public Ops {
 public:
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC,
                      Layout layout) const override {
    cpu::matmul_forward(out, inp, weight, bias, BT, C, OC, layout);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int BT,
                       int C, int OC, Layout layout) const override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N,
                         int C) const override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int C) const override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) const override {
    cpu::attention_forward(out, att, qkv, B, T, NH, HS);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B, int T, int NH,
                          int HS) const override {
    cpu::attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, HS);
  }
  void gelu_forward(float* out, const float* inp, size_t N) const override { cpu::gelu_forward(out, inp, N); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) const override {
    cpu::gelu_backward(dinp, inp, dout, N);
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
  void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int N, int V) const override {
    cpu::crossentropy_backward(dlogits, probs, targets, dloss, N, V);
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
};

}  // namespace

const Ops& cpu_ops() {
  static const CpuOps ops;
  return ops;
}

}  // namespace stagecraft::runtime
