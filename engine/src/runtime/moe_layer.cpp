// The mixture-of-experts MLP: routing on the host, dispatch, experts, combine, and backward.
// See moe_layer.h; the legend there.
#include "runtime/moe_layer.h"

#include <algorithm>
#include <numeric>

namespace stagecraft::runtime {

namespace {

// b holds at least n elements (reallocated, contents lost, when it is smaller).
template <typename T>
Status fit(Buffer<T>& b, Device& d, size_t n) {
  if (b.size() >= n) return Status::OK();
  return allocate_buffer(b, d, n);
}

template <typename T>
Status upload(Buffer<T>& b, Device& d, const std::vector<T>& v) {
  if (Status s = fit(b, d, v.size()); !s) return s;
  return v.empty() ? Status::OK() : d.copy_from_host(b.data(), v.data(), v.size() * sizeof(T));
}

size_t sz(long long v) { return static_cast<size_t>(v); }

}  // namespace

size_t MoeLayer::Acts::bytes() const {
  return token.bytes() + slot_row.bytes() + perm.bytes() + unperm.bytes() + slot_weight.bytes() + row_weight.bytes() + xe.bytes() +
         h.bytes() + act.bytes() + ys.bytes() + sh_h.bytes() + sh_act.bytes();
}

Result<std::unique_ptr<MoeLayer>> MoeLayer::create(const Shape& s, Device& device, TpReducer* tp, CommGroup* ep, CommGroup* cp) {
  if (s.E < 1 || s.K < 1 || s.K > s.E) {
    return Status::invalid_input("model.moe.top_k=" + std::to_string(s.K) + ": must be 1 .. model.moe.experts=" + std::to_string(s.E));
  }
  if (s.ep < 1 || s.E % s.ep != 0) {
    return Status::invalid_input("parallel.ep=" + std::to_string(s.ep) + ": must divide model.moe.experts=" + std::to_string(s.E));
  }
  if (s.ep > 1 && ep && ep->size() != s.ep) {
    return Status::internal("moe: an expert-parallel group of " + std::to_string(ep->size()) + " for ep=" + std::to_string(s.ep));
  }
  return std::unique_ptr<MoeLayer>(new MoeLayer(s, device, tp, ep, cp));
}

int MoeLayer::first_token() const {
  const int chunk = (s_.N + s_.tp - 1) / s_.tp;
  return std::min(s_.N, s_.tp_rank * chunk);
}
int MoeLayer::last_token() const {
  const int chunk = (s_.N + s_.tp - 1) / s_.tp;
  return std::min(s_.N, first_token() + chunk);
}

// Where the rows go: rows to and from every ep rank, the held experts' rows over every source,
// and (ep > 1) the permutation between the received order (source by source, each expert by
// expert) and the held experts' order (expert by expert, each source by source).
Status MoeLayer::layout(Acts& a) {
  const int E = s_.E, El = E / s_.ep, ep = s_.ep;
  const std::vector<int32_t>& mine = a.rows.per_expert;
  a.send_rows.assign(sz(ep), 0);
  a.recv_rows.assign(sz(ep), 0);
  a.held_rows.assign(sz(El), 0);
  if (ep == 1) {
    a.send_rows[0] = a.recv_rows[0] = sz(a.rows.rows());
    for (int e = 0; e < E; ++e) a.held_rows[sz(e)] = mine[sz(e)];
    return Status::OK();
  }
  std::vector<float> counts(sz(E)), all(sz(E) * sz(ep));  // (E) this rank's rows per expert; (ep, E) every rank's
  for (int e = 0; e < E; ++e) counts[sz(e)] = static_cast<float>(mine[sz(e)]);  // exact: far below 2^24
  if (Status st = all_gather_host(*ep_, dev_, counts.data(), all.data(), sz(E)); !st) return st;
  auto count = [&](int src, int e) { return static_cast<size_t>(all[sz(src) * sz(E) + sz(e)]); };
  const int my_first = s_.ep_rank * El;
  for (int q = 0; q < ep; ++q) {
    for (int e = q * El; e < (q + 1) * El; ++e) a.send_rows[sz(q)] += count(s_.ep_rank, e);
  }
  std::vector<size_t> src_at(sz(ep), 0);  // where each source's block starts in the received rows
  for (int src = 0; src < ep; ++src) {
    for (int el = 0; el < El; ++el) {
      a.recv_rows[sz(src)] += count(src, my_first + el);
      a.held_rows[sz(el)] += static_cast<int>(count(src, my_first + el));
    }
    if (src + 1 < ep) src_at[sz(src + 1)] = src_at[sz(src)] + a.recv_rows[sz(src)];
  }
  std::vector<int32_t> perm, unperm(std::accumulate(a.recv_rows.begin(), a.recv_rows.end(), size_t(0)));
  std::vector<size_t> within(sz(ep), 0);  // rows of each source's block already placed
  for (int el = 0; el < El; ++el) {
    for (int src = 0; src < ep; ++src) {
      const size_t n = count(src, my_first + el);
      for (size_t i = 0; i < n; ++i) perm.push_back(static_cast<int32_t>(src_at[sz(src)] + within[sz(src)] + i));
      within[sz(src)] += n;
    }
  }
  for (size_t i = 0; i < perm.size(); ++i) unperm[sz(perm[i])] = static_cast<int32_t>(i);
  if (Status st = upload(a.perm, dev_, perm); !st) return st;
  return upload(a.unperm, dev_, unperm);
}

// in (As, C) in send order -> out (Ae, C) in the held experts' order.
Status MoeLayer::to_experts(float* out, const float* in, const Acts& a) {
  const int C = s_.C;
  const size_t Ae = std::accumulate(a.recv_rows.begin(), a.recv_rows.end(), size_t(0));
  std::vector<size_t> send(a.send_rows), recv(a.recv_rows);
  for (auto& v : send) v *= sz(C);
  for (auto& v : recv) v *= sz(C);
  if (Status st = fit(rows_c_, dev_, Ae * sz(C)); !st) return st;
  if (Status st = all_to_all_v_on_device(*ep_, dev_, in, send.data(), rows_c_.data(), recv.data()); !st) return st;
  k_.gather_rows(out, rows_c_.data(), a.perm.data(), nullptr, static_cast<int>(Ae), C);
  return Status::OK();
}

// in (Ae, C) in the held experts' order -> out (As, C) in send order.
Status MoeLayer::from_experts(float* out, const float* in, const Acts& a) {
  const int C = s_.C;
  const size_t Ae = std::accumulate(a.recv_rows.begin(), a.recv_rows.end(), size_t(0));
  std::vector<size_t> send(a.recv_rows), recv(a.send_rows);
  for (auto& v : send) v *= sz(C);
  for (auto& v : recv) v *= sz(C);
  if (Status st = fit(rows_c_, dev_, Ae * sz(C)); !st) return st;
  k_.gather_rows(rows_c_.data(), in, a.unperm.data(), nullptr, static_cast<int>(Ae), C);
  return all_to_all_v_on_device(*ep_, dev_, rows_c_.data(), send.data(), out, recv.data());
}

Status MoeLayer::forward(float* out, const float* ln2, const float* res2, const Weights& w, Acts& a) {
  // A stage made for its layout alone (a checkpoint's gather) has no groups and runs nothing.
  if ((s_.ep > 1 && !ep_) || (s_.cp > 1 && !cp_) || (s_.tp > 1 && !tp_)) {
    return Status::internal("moe: the stage lacks the ep, cp or tp group its layer needs");
  }
  const int N = s_.N, C = s_.C, E = s_.E, K = s_.K, FE = s_.FE, El = E / s_.ep;
  const size_t nc = sz(N) * sz(C);
  // The router, and its decisions on the host.
  if (Status st = fit(logits_, dev_, sz(N) * sz(E)); !st) return st;
  k_.matmul_forward(logits_.data(), ln2, w.router, nullptr, N, C, E, Layout::kOutIn);
  host_logits_.resize(sz(N) * sz(E));
  if (Status st = dev_.copy_to_host(host_logits_.data(), logits_.data(), host_logits_.size() * sizeof(float)); !st) return st;
  a.routing = moe_route(host_logits_.data(), N, s_.route);
  // The load-balancing loss over the micro-batch's sequences: every cp rank's sums.
  std::vector<double> sums(2 * sz(E) + 1);  // routed (E), prob sums (E), tokens
  for (int e = 0; e < E; ++e) {
    sums[sz(e)] = static_cast<double>(a.routing.routed[sz(e)]);
    sums[sz(E + e)] = a.routing.prob_sum[sz(e)];
  }
  sums[2 * sz(E)] = N;
  if (s_.cp > 1) {
    if (Status st = all_reduce_host(*cp_, dev_, sums.data(), sums.size()); !st) return st;
  }
  std::vector<int64_t> routed(sz(E));
  for (int e = 0; e < E; ++e) routed[sz(e)] = static_cast<int64_t>(sums[sz(e)]);
  a.aux_dprob.assign(sz(E), 0.0);
  a.aux = moe_aux_loss(routed.data(), sums.data() + E, E, K, static_cast<int64_t>(sums[2 * sz(E)]), s_.aux_coef, a.aux_dprob.data());
  // This rank's tokens' rows, and where they go.
  const int first = first_token(), last = last_token(), Nl = last - first;
  a.rows = moe_rows(a.routing, first, last);
  std::vector<float> slot_weight(sz(Nl) * sz(K));
  std::copy(a.routing.weight.begin() + static_cast<ptrdiff_t>(sz(first) * sz(K)),
            a.routing.weight.begin() + static_cast<ptrdiff_t>(sz(last) * sz(K)), slot_weight.begin());
  for (Status st : {upload(a.token, dev_, a.rows.token), upload(a.slot_row, dev_, a.rows.slot_row), upload(a.slot_weight, dev_, slot_weight),
                    upload(a.row_weight, dev_, a.rows.weight), layout(a)}) {
    if (!st) return st;
  }
  const int As = a.rows.rows();
  const size_t Ae = std::accumulate(a.held_rows.begin(), a.held_rows.end(), size_t(0));
  for (Status st : {fit(a.xe, dev_, Ae * sz(C)), fit(a.h, dev_, Ae * 2 * sz(FE)), fit(a.act, dev_, Ae * sz(FE)), fit(a.ys, dev_, sz(As) * sz(C)),
                    fit(rows_a_, dev_, std::max(sz(As), Ae) * sz(C)), fit(rows_b_, dev_, Ae * sz(C))}) {
    if (!st) return st.with_context("mixture-of-experts activations");
  }
  // Dispatch.
  if (s_.ep == 1) {
    k_.gather_rows(a.xe.data(), ln2, a.token.data(), nullptr, As, C);
  } else {
    k_.gather_rows(rows_a_.data(), ln2, a.token.data(), nullptr, As, C);
    if (Status st = to_experts(a.xe.data(), rows_a_.data(), a); !st) return st;
  }
  // The held experts, each over its rows; ep 1 writes the outputs in send order directly.
  float* ye = s_.ep == 1 ? a.ys.data() : rows_b_.data();
  size_t at = 0;
  for (int el = 0; el < El; ++el) {
    const int n = a.held_rows[sz(el)];
    if (n == 0) continue;
    k_.matmul_forward(a.h.data() + at * 2 * sz(FE), a.xe.data() + at * sz(C), w.up[sz(el)], nullptr, n, C, 2 * FE, Layout::kOutIn);
    k_.swiglu_forward(a.act.data() + at * sz(FE), a.h.data() + at * 2 * sz(FE), n, FE);
    k_.matmul_forward(ye + at * sz(C), a.act.data() + at * sz(FE), w.down[sz(el)], nullptr, n, FE, C, Layout::kOutIn);
    at += sz(n);
  }
  if (s_.ep > 1) {
    if (Status st = from_experts(a.ys.data(), ye, a); !st) return st;
  }
  // Combine: the residual (once over tp), this rank's tokens' weighted expert outputs, the
  // shared experts' part.
  if (s_.tp_rank == 0) {
    if (Status st = dev_.copy(out, res2, nc * sizeof(float)); !st) return st;
  } else if (Status st = dev_.fill_zero(out, nc * sizeof(float)); !st) {
    return st;
  }
  k_.scatter_add_rows(out + sz(first) * sz(C), a.ys.data(), a.slot_row.data(), a.slot_weight.data(), Nl, K, C);
  if (s_.FSl > 0) {
    const int FS = s_.FSl;
    for (Status st : {fit(a.sh_h, dev_, sz(N) * 2 * sz(FS)), fit(a.sh_act, dev_, sz(N) * sz(FS))}) {
      if (!st) return st.with_context("shared experts' activations");
    }
    k_.matmul_forward(a.sh_h.data(), ln2, w.shared_up, nullptr, N, C, 2 * FS, Layout::kOutIn);
    k_.swiglu_forward(a.sh_act.data(), a.sh_h.data(), N, FS);
    k_.matmul_forward(out, a.sh_act.data(), w.shared_down, nullptr, N, FS, C, Layout::kOutIn, out);
  }
  return Status::OK();
}

Status MoeLayer::backward(float* dln2, const float* dout, const float* ln2, const Weights& w, const Acts& a, double aux_scale) {
  const int N = s_.N, C = s_.C, E = s_.E, K = s_.K, FE = s_.FE, El = E / s_.ep;
  const size_t nc = sz(N) * sz(C);
  const int first = first_token(), last = last_token(), Nl = last - first, As = a.rows.rows();
  const size_t Ae = std::accumulate(a.held_rows.begin(), a.held_rows.end(), size_t(0));
  for (Status st : {fit(rows_a_, dev_, std::max(sz(As), Ae) * sz(C)), fit(rows_b_, dev_, std::max(sz(As), Ae) * sz(C)),
                    fit(dw_, dev_, sz(As)), fit(dlogits_, dev_, sz(N) * sz(E))}) {
    if (!st) return st.with_context("mixture-of-experts backward");
  }
  // The combine weights' gradients: dout at each row's token against the row's expert output.
  k_.gather_rows(rows_a_.data(), dout, a.token.data(), nullptr, As, C);
  k_.row_dot(dw_.data(), rows_a_.data(), a.ys.data(), As, C);
  host_dw_.resize(sz(As));
  if (Status st = dev_.copy_to_host(host_dw_.data(), dw_.data(), host_dw_.size() * sizeof(float)); !st) return st;
  std::vector<float> dweight(sz(Nl) * sz(K), 0.0f);  // per slot of this rank's tokens; 0 where dropped
  for (size_t s = 0; s < dweight.size(); ++s) {
    const int32_t row = a.rows.slot_row[s];
    if (row >= 0) dweight[s] = host_dw_[sz(row)];
  }
  // The router: this rank's tokens' logit gradients on the host, summed over tp so that every
  // tp rank has all of them (and the same router gradient); its input gradient once (tp rank 0).
  host_dlogits_.assign(sz(N) * sz(E), 0.0f);
  moe_router_backward(host_dlogits_.data(), a.routing, dweight.data(), a.aux_dprob.data(), aux_scale, first, last);
  if (Status st = dev_.copy_from_host(dlogits_.data(), host_dlogits_.data(), host_dlogits_.size() * sizeof(float)); !st) return st;
  if (s_.tp > 1) {
    if (Status st = all_reduce_on_device(*tp_, dev_, dlogits_.data(), sz(N) * sz(E), staging_); !st) return st;
  }
  if (s_.tp_rank == 0) {
    k_.matmul_backward(dln2, w.drouter, nullptr, dlogits_.data(), ln2, w.router, N, C, E, Layout::kOutIn);
  } else {
    k_.matmul_backward(nullptr, w.drouter, nullptr, dlogits_.data(), ln2, w.router, N, C, E, Layout::kOutIn);
    if (Status st = dev_.fill_zero(dln2, nc * sizeof(float)); !st) return st;
  }
  // The shared experts (tensor-parallel: this rank's part of dln2).
  if (s_.FSl > 0) {
    const int FS = s_.FSl;
    for (Status st : {fit(dact_, dev_, sz(N) * sz(FS)), fit(dh_, dev_, sz(N) * 2 * sz(FS)), fit(dx_, dev_, nc)}) {
      if (!st) return st.with_context("shared experts' backward");
    }
    k_.matmul_backward(dact_.data(), w.dshared_down, nullptr, dout, a.sh_act.data(), w.shared_down, N, FS, C, Layout::kOutIn);
    k_.swiglu_backward(dh_.data(), a.sh_h.data(), dact_.data(), N, FS);
    k_.matmul_backward(dx_.data(), w.dshared_up, nullptr, dh_.data(), ln2, w.shared_up, N, C, 2 * FS, Layout::kOutIn);
    k_.residual_forward(dln2, dln2, dx_.data(), nc);
  }
  // The experts: dout at each row's token times its combine weight, to the experts' ranks.
  for (Status st : {fit(dact_, dev_, Ae * sz(FE)), fit(dh_, dev_, Ae * 2 * sz(FE))}) {
    if (!st) return st.with_context("mixture-of-experts backward");
  }
  k_.gather_rows(rows_a_.data(), dout, a.token.data(), a.row_weight.data(), As, C);
  const float* dye = rows_a_.data();
  if (s_.ep > 1) {
    if (Status st = to_experts(rows_b_.data(), rows_a_.data(), a); !st) return st;
    dye = rows_b_.data();
  }
  float* dxe = s_.ep == 1 ? rows_b_.data() : rows_a_.data();  // the other of the two
  size_t at = 0;
  for (int el = 0; el < El; ++el) {
    const int n = a.held_rows[sz(el)];
    if (n == 0) continue;
    k_.matmul_backward(dact_.data() + at * sz(FE), w.ddown[sz(el)], nullptr, dye + at * sz(C), a.act.data() + at * sz(FE), w.down[sz(el)], n,
                       FE, C, Layout::kOutIn);
    k_.swiglu_backward(dh_.data() + at * 2 * sz(FE), a.h.data() + at * 2 * sz(FE), dact_.data() + at * sz(FE), n, FE);
    k_.matmul_backward(dxe + at * sz(C), w.dup[sz(el)], nullptr, dh_.data() + at * 2 * sz(FE), a.xe.data() + at * sz(C), w.up[sz(el)], n, C,
                       2 * FE, Layout::kOutIn);
    at += sz(n);
  }
  const float* dxs = dxe;
  if (s_.ep > 1) {
    if (Status st = from_experts(rows_b_.data(), dxe, a); !st) return st;
    dxs = rows_b_.data();
  }
  k_.scatter_add_rows(dln2 + sz(first) * sz(C), dxs, a.slot_row.data(), nullptr, Nl, K, C);
  return Status::OK();
}

}  // namespace stagecraft::runtime
