// MoeLayer: the mixture-of-experts MLP of GptStage's Llama layers (model.moe), forward and
// backward for one micro-batch, over the Ops table, with expert parallelism. docs/engine.md
// (Mixture of experts) has the picture; runtime/moe_routing.h the router's rule.
//
// Legend: N tokens of the micro-batch on this rank (B T), C hidden, E experts, K top k, FE an
// expert's width, El = E / ep the experts this rank holds, FSl the shared experts' width on this
// tp rank (S FS / tp), A rows: the kept (token, expert) assignments a rank sends (As) or computes
// (Ae).
//
// Forward (ln2 (N, C) the normed tokens, res2 (N, C) the residual):
//   logits (N, E) = ln2 Wr^T (the router, replicated) -> host: softmax, top k, weights, capacity,
//     the load-balancing loss (its sums over the cp group: the micro-batch's whole sequences)
//   tp > 1: every tp rank routes every token (the same decisions), and takes tokens
//     [r ceil(N / tp), ...) of them into the experts
//   dispatch: xs (As, C) = this rank's tokens' rows, expert by expert (gather_rows); ep > 1: the
//     counts, then the rows, go to the ranks that hold the experts (all_to_all_v over the ep
//     group), where they are put expert by expert over the sources (gather_rows)
//   experts: for each held expert, over its contiguous rows: h = x Wup^T (gate | up, one GEMM),
//     act = silu(gate) up, y = act Wdown^T
//   combine: the rows go back (all_to_all_v), and out[t] += sum_j w(t, j) y(t, j)
//     (scatter_add_rows); the shared experts (tensor-parallel like the dense MLP) add theirs
//   out (N, C) = res2 (tp rank 0) + this rank's tokens' expert outputs + the shared experts' part,
//     which the caller all-reduces over tp (a token's expert output comes from one tp rank only)
// Backward mirrors it: the combine weights' gradients (row_dot against the kept outputs) go
// through the router on the host into dlogits, which tp > 1 sums over tp (each rank has its
// tokens' rows) so every tp rank computes the same router gradient; the experts' input gradients
// come back through the reverse all_to_all_v and are added into dln2 per token.
//
// Expert weights are the stage's expert buffer (gpt_stage.h): each rank's El experts whole
// (expert_tp 1), their gradients reduced over the expert-data-parallel group by the trainer.
//
// Not thread-safe; one per stage. Not a public header: GptStage's only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/comm_group.h"
#include "stagecraft/runtime/device.h"
#include "stagecraft/runtime/moe_routing.h"

namespace stagecraft::runtime {

class MoeLayer {
 public:
  struct Shape {
    int N = 0, C = 0, E = 0, K = 1, FE = 0;
    int FSl = 0;                 // 0: no shared experts
    int tp = 1, tp_rank = 0;
    int ep = 1, ep_rank = 0;
    int cp = 1;                  // the aux loss's sums over the cp group's tokens
    MoeRouteOptions route;
    double aux_coef = 0;
  };
  // One layer's tensors on the device; gradients accumulate.
  struct Weights {
    const float* router = nullptr;  // (E, C)
    float* drouter = nullptr;
    const float* shared_up = nullptr;  // (2 FSl, C): gate | up, or nullptr
    float* dshared_up = nullptr;
    const float* shared_down = nullptr;  // (C, FSl)
    float* dshared_down = nullptr;
    std::vector<const float*> up;  // per held expert: (2 FE, C) gate | up
    std::vector<float*> dup;
    std::vector<const float*> down;  // per held expert: (C, FE)
    std::vector<float*> ddown;
  };
  // What forward keeps for backward.
  struct Acts {
    MoeRouting routing;                   // every token's (tp ranks alike)
    MoeRows rows;                         // this rank's tokens' kept assignments
    std::vector<double> aux_dprob;        // (E) d aux / d p[t, e]
    double aux = 0;                       // the micro-batch's load-balancing loss
    std::vector<size_t> send_rows, recv_rows;  // (ep) rows to and from each ep rank
    std::vector<int> held_rows;           // (El) rows of each held expert, over every source
    Buffer<int32_t> token, slot_row, perm, unperm;  // (As), (Nl K), (Ae), (Ae)
    Buffer<float> slot_weight, row_weight;  // (Nl K), (As): the combine weights by slot and by row
    Buffer<float> xe, h, act, ys;         // (Ae, C), (Ae, 2 FE), (Ae, FE), (As, C): ys the outputs back in send order
    Buffer<float> sh_h, sh_act;           // (N, 2 FSl), (N, FSl): the shared experts'
    size_t bytes() const;
  };

  // `device` and the groups must outlive it; forward needs ep (ep > 1), cp (cp > 1) and tp
  // (tp > 1).
  static Result<std::unique_ptr<MoeLayer>> create(const Shape& shape, Device& device, TpReducer* tp, CommGroup* ep, CommGroup* cp);

  // out (N, C) as above; ln2 and res2 (N, C). `a` is filled.
  Status forward(float* out, const float* ln2, const float* res2, const Weights& w, Acts& a);
  // dln2 (N, C) overwritten: this tp rank's part of the gradient at ln2 (the caller sums it over
  // tp), from dout (N, C), the gradient at the layer's output. aux_scale multiplies the
  // load-balancing loss's gradient (the loss scale of one micro-batch's aux: see gpt_stage.cpp).
  Status backward(float* dln2, const float* dout, const float* ln2, const Weights& w, const Acts& a, double aux_scale);

  // Tokens [first, last) this tp rank takes into the experts.
  int first_token() const;
  int last_token() const;

 private:
  MoeLayer(const Shape& s, Device& d, TpReducer* tp, CommGroup* ep, CommGroup* cp) : s_(s), dev_(d), k_(d.ops()), tp_(tp), ep_(ep), cp_(cp) {}
  // Rows to the experts' ranks (from the send order to the held experts' order), or back.
  Status to_experts(float* out, const float* in, const Acts& a);
  Status from_experts(float* out, const float* in, const Acts& a);
  Status layout(Acts& a);

  Shape s_;
  Device& dev_;
  const Ops& k_;
  TpReducer* tp_;
  CommGroup* ep_;
  CommGroup* cp_;
  // Scratch, grown as needed: logits and their gradient (N, E), the rows in flight (A, C) and the
  // experts' gradients, the shared experts' and the router's input gradient (N, C).
  Buffer<float> logits_, dlogits_, rows_a_, rows_b_, rows_c_, dw_, dh_, dact_, dx_;
  std::vector<float> host_logits_, host_dw_, host_dlogits_;
  std::vector<float> staging_;
};

}  // namespace stagecraft::runtime
