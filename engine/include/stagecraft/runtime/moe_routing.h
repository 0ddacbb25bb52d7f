// MoeRouting: what the router of a mixture-of-experts layer decides for one micro-batch, and the
// gradient back to its logits — host code over the router's (tokens, experts) logits, which the
// stage downloads (a few KB: tokens x experts floats), so that a device needs no kernels for it.
//
// The rule (docs/engine.md: Mixture of experts), for N tokens, E experts, top K:
//   p (N, E) = softmax over every expert of the logits (computed in double)
//   the K experts of token t: the K largest p[t], in descending order, ties to the lower expert
//   combine weight of (t, j): p[t, e_j] / sum of the K chosen (norm_topk), or p[t, e_j]
//   capacity_factor 0: every assignment kept (dropless); >= 1: expert e keeps its first
//     ceil(capacity_factor x N x K / E) assignments in token order, the later ones are dropped
//     (their weight adds nothing, and no gradient reaches them)
//   load balancing (Switch Transformer, Megatron-Core's form): aux = coef x E x sum_e f_e P_e, with
//     f_e = (assignments the router made to e, before dropping) / (N K) and P_e = the mean of
//     p[., e] over the N tokens; f is held constant, so d aux / d p[t, e] = coef E f_e / N.
// The layer's output per token is sum_j weight(t, j) x expert e_j (its input): moe_rows lays the
// kept assignments out as the experts' input rows, expert by expert, each expert's in token
// order, so each expert's GEMM runs over one contiguous range.
//
// What it is not: the layer (the stage's gpt_stage.cpp and moe_layer.cpp run it), or a kernel.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace stagecraft::runtime {

struct MoeRouteOptions {
  int experts = 0;              // E
  int top_k = 1;                // K, 1 .. E
  bool norm_topk = true;        // renormalise the K chosen probabilities to sum to 1
  double capacity_factor = 0;   // 0: dropless; >= 1: capacity per expert, the overflow dropped
};

struct MoeRouting {
  int tokens = 0, experts = 0, top_k = 0;
  bool norm_topk = true;
  std::vector<float> probs;       // (N, E) softmax of the logits
  std::vector<int32_t> expert;    // (N, K) chosen experts, by descending probability
  std::vector<float> weight;      // (N, K) combine weights as routed (a dropped one's too)
  std::vector<float> topk_sum;    // (N) the sum of the K chosen probabilities
  std::vector<uint8_t> kept;      // (N, K) 1 where the assignment is kept
  std::vector<int64_t> routed;    // (E) assignments the router made to each expert, before dropping
  std::vector<double> prob_sum;   // (E) the sum over the tokens of p[., e]
  int64_t capacity = 0;           // per expert; 0 dropless
  int64_t dropped = 0;            // assignments dropped for capacity
};

// The routing of N tokens from their logits (N, E) on the host. N >= 0; options as above.
MoeRouting moe_route(const float* logits, int N, const MoeRouteOptions& options);

// The load-balancing loss over `tokens` tokens from the per-expert sums of one or more routings
// (with context parallelism, every cp rank's part of the micro-batch's sequences): routed (E) and
// prob_sum (E). Writes d aux / d p[t, e] (the same for every token) into dprob (E) when given.
double moe_aux_loss(const int64_t* routed, const double* prob_sum, int experts, int top_k, int64_t tokens, double coef,
                    double* dprob);

// The experts' input rows of tokens [first, last) (a tensor-parallel rank's share): every kept
// assignment once, expert by expert, each expert's in token order.
struct MoeRows {
  int first = 0, last = 0;
  std::vector<int32_t> token;       // (A) the token (an index in 0 .. N-1) of row a
  std::vector<float> weight;        // (A) its combine weight
  std::vector<int32_t> slot_row;    // ((last - first), K) the row of assignment (t, j), -1 where dropped
  std::vector<int32_t> per_expert;  // (E) rows of each expert; expert e's follow expert e-1's
  int rows() const { return static_cast<int>(token.size()); }
};
MoeRows moe_rows(const MoeRouting& routing, int first, int last);

// The gradient at the router's logits of tokens [first, last), into rows first .. last-1 of
// dlogits (N, E), overwritten: from dweight ((last - first), K), the loss's gradient at each
// combine weight (0 for a dropped assignment), through the renormalisation (norm_topk) and the
// top-k selection, plus aux_scale x aux_dprob (E) for every token (the load-balancing loss), then
// through the softmax. Computed in double.
void moe_router_backward(float* dlogits, const MoeRouting& routing, const float* dweight, const double* aux_dprob, double aux_scale,
                         int first, int last);

}  // namespace stagecraft::runtime
