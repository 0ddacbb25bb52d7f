// The router's decisions and their gradient, on the host. See moe_routing.h.
#include "stagecraft/runtime/moe_routing.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace stagecraft::runtime {

MoeRouting moe_route(const float* logits, int N, const MoeRouteOptions& o) {
  const int E = o.experts, K = o.top_k;
  assert(E > 0 && K >= 1 && K <= E && N >= 0);
  MoeRouting r;
  r.tokens = N;
  r.experts = E;
  r.top_k = K;
  r.norm_topk = o.norm_topk;
  const size_t n = static_cast<size_t>(N);
  r.probs.resize(n * E);
  r.expert.resize(n * K);
  r.weight.resize(n * K);
  r.topk_sum.resize(n);
  r.kept.assign(n * K, 1);
  r.routed.assign(static_cast<size_t>(E), 0);
  r.prob_sum.assign(static_cast<size_t>(E), 0.0);
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<uint8_t> taken(static_cast<size_t>(E));
  for (size_t t = 0; t < n; ++t) {
    const float* l = logits + t * E;
    double mx = l[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, double(l[e]));
    double z = 0;
    for (int e = 0; e < E; ++e) z += (p[e] = std::exp(double(l[e]) - mx));
    for (int e = 0; e < E; ++e) {
      p[e] /= z;
      r.probs[t * E + e] = static_cast<float>(p[e]);
      r.prob_sum[e] += p[e];
    }
    // Top K by descending probability; a tie goes to the lower expert (strictly greater wins).
    std::fill(taken.begin(), taken.end(), 0);
    double sum = 0;
    for (int j = 0; j < K; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
      }
      taken[best] = 1;
      r.expert[t * K + j] = best;
      sum += p[best];
      ++r.routed[best];
    }
    r.topk_sum[t] = static_cast<float>(sum);
    for (int j = 0; j < K; ++j) {
      const double pj = p[r.expert[t * K + j]];
      r.weight[t * K + j] = static_cast<float>(o.norm_topk ? pj / sum : pj);
    }
  }
  if (o.capacity_factor > 0) {
    r.capacity = static_cast<int64_t>(std::ceil(o.capacity_factor * double(N) * K / E));
    std::vector<int64_t> used(static_cast<size_t>(E), 0);
    for (size_t s = 0; s < n * K; ++s) {  // token order: a later token's assignment goes first
      const int e = r.expert[s];
      if (used[e] < r.capacity) {
        ++used[e];
      } else {
        r.kept[s] = 0;
        ++r.dropped;
      }
    }
  }
  return r;
}

double moe_aux_loss(const int64_t* routed, const double* prob_sum, int E, int K, int64_t tokens, double coef, double* dprob) {
  if (tokens <= 0 || coef == 0) {
    if (dprob) std::fill(dprob, dprob + E, 0.0);
    return 0;
  }
  const double N = static_cast<double>(tokens);
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    const double f = static_cast<double>(routed[e]) / (N * K);
    aux += f * (prob_sum[e] / N);
    if (dprob) dprob[e] = coef * E * f / N;
  }
  return coef * E * aux;
}

MoeRows moe_rows(const MoeRouting& r, int first, int last) {
  const int E = r.experts, K = r.top_k;
  MoeRows rows;
  rows.first = first;
  rows.last = last;
  rows.per_expert.assign(static_cast<size_t>(E), 0);
  rows.slot_row.assign(static_cast<size_t>(last - first) * K, -1);
  for (int t = first; t < last; ++t) {
    for (int j = 0; j < K; ++j) {
      if (r.kept[size_t(t) * K + j]) ++rows.per_expert[r.expert[size_t(t) * K + j]];
    }
  }
  std::vector<int32_t> next(static_cast<size_t>(E), 0);  // each expert's first row, then its next free one
  int32_t at = 0;
  for (int e = 0; e < E; ++e) {
    next[e] = at;
    at += rows.per_expert[e];
  }
  rows.token.resize(static_cast<size_t>(at));
  rows.weight.resize(static_cast<size_t>(at));
  for (int t = first; t < last; ++t) {
    for (int j = 0; j < K; ++j) {
      const size_t s = size_t(t) * K + j;
      if (!r.kept[s]) continue;
      const int32_t row = next[r.expert[s]]++;
      rows.token[row] = t;
      rows.weight[row] = r.weight[s];
      rows.slot_row[size_t(t - first) * K + j] = row;
    }
  }
  return rows;
}

void moe_router_backward(float* dlogits, const MoeRouting& r, const float* dweight, const double* aux_dprob, double aux_scale, int first,
                         int last) {
  const int E = r.experts, K = r.top_k;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int t = first; t < last; ++t) {
    const size_t s0 = size_t(t) * K;
    const float* g = dweight + size_t(t - first) * K;
    for (int e = 0; e < E; ++e) dp[e] = aux_dprob ? aux_scale * aux_dprob[e] : 0.0;
    // Through the renormalisation w_j = p_j / S: dp_i = (g_i - sum_j g_j w_j) / S; without it dp_i = g_i.
    double gw = 0;
    for (int j = 0; j < K; ++j) gw += double(g[j]) * r.weight[s0 + j];
    for (int j = 0; j < K; ++j) dp[r.expert[s0 + j]] += r.norm_topk ? (g[j] - gw) / r.topk_sum[t] : double(g[j]);
    const float* p = r.probs.data() + size_t(t) * E;
    double dot = 0;
    for (int e = 0; e < E; ++e) dot += double(p[e]) * dp[e];
    for (int e = 0; e < E; ++e) dlogits[size_t(t) * E + e] = static_cast<float>(p[e] * (dp[e] - dot));
  }
}

}  // namespace stagecraft::runtime
