// The cost model: memory, step time and throughput of a layout. See estimate.h.
//
// Legend: L layers, h hidden, a heads, f ffn_hidden, s sequence length, V vocabulary,
// b micro-batch, T = b s tokens of a micro-batch, t tensor-parallel size, p pipeline size,
// v virtual stages, d data-parallel size, m micro-batches per step, e bytes per activation
// element (2 for fp16/bf16, 4 for fp32). Mixture of experts: E routed experts of width FE, k
// of them per token (top_k), ep the expert-parallel size, et the expert tensor-parallel size,
// ed = t cp d / (ep et) the expert-dp size, u the busiest ep rank's load over the mean
// (CostCalibration::moe_imbalance).
#include "stagecraft/plan/estimate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "stagecraft/core/units.h"
#include "stagecraft/model/model.h"

namespace stagecraft::plan {

using config::Precision;
using config::Recompute;
using config::Schedule;
using config::TpMode;

namespace {

// Calibration: config::CostCalibration (config/device.h), the device's. Its defaults are physical
// constants, gemm_efficiency fitted once against the Megatron-LM SC21 runs (Narayanan et al. 2021,
// Table 1: all ten within +2..+9%), the others set from their sources; held against runs they were
// not fitted on (Korthikanti et al. 2022, SC21 Table 2, Llama 3 on H100) in
// tests/engine/tst_estimate.cpp. A device profile replaces them with constants fitted to the
// user's own runs (plan/calibrate.h).

struct Hw {
  config::CostCalibration cal;
  double peak;      // FLOP/s for the training precision
  double mem_bw;    // bytes/s achieved by streaming kernels
  double intra_bw;  // bytes/s per GPU to node peers, achieved
  double net_bw;    // bytes/s per GPU across nodes (its share of the node's NICs), achieved
  double tp_intra_bw, tp_net_bw;  // the same for tensor parallelism's collectives (tp_link_efficiency)
  double e;         // bytes per activation element
};

Hw hardware(const EstimateInput& in) {
  Hw hw;
  hw.cal = in.device.calibration;
  hw.peak = in.device.peak_tflops(in.config.train.precision, in.config.train.tf32) * 1e12;
  if (hw.peak <= 0) hw.peak = in.device.fp32_tflops * 1e12;
  hw.mem_bw = in.device.memory_gbps * 1e9 * hw.cal.memory_efficiency;
  hw.intra_bw = in.device.intra_node_gbps / 8.0 * 1e9 * hw.cal.link_efficiency;
  hw.net_bw = in.device.inter_node_gbps / 8.0 * 1e9 / std::max(1, in.config.cluster.gpus_per_node) * hw.cal.network_efficiency;
  // TP's collectives: within a node at their own efficiency; across nodes the network's.
  hw.tp_intra_bw = in.device.intra_node_gbps / 8.0 * 1e9 * hw.cal.tp_link_efficiency;
  hw.tp_net_bw = hw.net_bw;
  hw.e = in.config.train.precision == Precision::kFp32 ? 4.0 : 2.0;
  // The CPU engine: the machine's cores are shared by the ranks of a node. Ranks up to the cores
  // each run floor(cores / ranks) threads of their own (launch/worker_env.h threads_per_rank):
  // that share of the machine's peak and memory bandwidth. Beyond the cores each runs one thread
  // and the ranks time-share the cores. Its math and memory traffic get the cores by how busy its
  // schedule keeps it (a 1F1B rank computes m / (m + p - 1) of its step; a waiting rank leaves
  // its share to the others). Its collectives, their transfers and handshakes, run at cores /
  // ranks of one core's speed: a collective advances only while every rank of it is scheduled,
  // and that is when all of them want a core (recorded on 2 cores, tests/engine/data/
  // cpu_calibration_runs.json: the dp 2 all-reduce of 3.3 MB took 4.1 ms with 2 ranks, and of
  // half of it 8.9 ms with 4; bench_tp_allreduce, 13.2 ms a call with 4 processes, several times
  // the 2 processes' figure). Worked example, configs/tiny-gpt.yaml on 2 cores, m 2 micro-batches
  // over pp 2: 4 ranks of one thread, each computing at 0.75 of a core (busy 2/3), collectives
  // at half speed.
  if (in.device.is_cpu && in.device.cores > 0) {
    const double cores = in.device.cores;
    const double ranks = std::max(1, in.config.cluster.gpus_per_node);
    double rank_cores = std::floor(cores / ranks);
    if (ranks > cores) {
      const double mv = static_cast<double>(std::max(1, in.micro_batches)) * std::max(1, in.virtual_stages);
      const double busy = mv / (mv + std::max(1, in.pp) - 1);
      rank_cores = std::min(1.0, cores / (ranks * busy));
    }
    hw.peak *= rank_cores / cores;
    hw.mem_bw *= rank_cores / cores;
    if (ranks > cores) {
      const double share = cores / ranks;
      hw.intra_bw *= share;
      hw.net_bw *= share;
      hw.tp_intra_bw *= share;
      hw.tp_net_bw *= share;
      hw.cal.collective_step_s /= share;
      hw.cal.tp_step_s /= share;
      hw.cal.kernel_s /= rank_cores;
    }
  }
  return hw;
}

// One GEMM (batch x [M,K] x [K,N]): the slower of its math and its memory traffic, plus a launch.
// Efficiency falls for small dimensions (tile quantisation, too few thread blocks):
// eff = gemm_efficiency x prod over M, N, K of dim / (dim + gemm_half_dim).
double gemm_time(double M, double N, double K, double batch, const Hw& hw) {
  if (M <= 0 || N <= 0 || K <= 0) return 0.0;
  const double eff = hw.cal.gemm_efficiency * (M / (M + hw.cal.gemm_half_dim)) * (N / (N + hw.cal.gemm_half_dim)) *
                     (K / (K + hw.cal.gemm_half_dim));
  const double flops = 2.0 * M * N * K * batch;
  const double bytes = hw.e * (M * K + K * N + M * N) * batch;
  return std::max(flops / (hw.peak * eff), bytes / hw.mem_bw) + hw.cal.kernel_s;
}

// Ring collectives over n ranks at bandwidth bw (bytes/s): all-reduce moves 2 (n-1)/n x bytes
// per rank, all-gather and reduce-scatter (n-1)/n (nccl-tests' bus bandwidth convention).
// `step_s` is the latency of one ring step.
double all_reduce_time(double bytes, int n, double bw, double step_s) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * step_s;
}
double gather_time(double bytes, int n, double bw, double step_s) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return static_cast<double>(n - 1) / n * bytes / bw + (n - 1) * step_s;
}

// All-to-all over n ranks spread evenly over `nodes` nodes (n / nodes on each): every rank sends
// `bytes` in n equal parts and keeps its own, so (n - 1)/n of them travel, those for the n/nodes -
// 1 peers of its node over the node's link and the rest over the network, both at once; n - 1
// exchanges of latency. Worked example: ep 8 within a node of H100-SXM (NVLink 450 GB/s x 0.8),
// 32 MiB per rank: 7/8 x 32 MiB / 360 GB/s = 82 us plus 7 x 8 us; over 2 nodes (4 per node)
// the 4/8 for the other node cross the network at 50 GB/s x 0.85 per GPU: 395 us.
double all_to_all_time(double bytes, int n, int nodes, double intra_bw, double net_bw, double step_s) {
  if (n <= 1 || bytes <= 0) return 0.0;
  const double per_node = std::max(1.0, static_cast<double>(n) / std::max(1, nodes));
  const double intra = bytes * (per_node - 1) / n / intra_bw;
  const double inter = bytes * (n - per_node) / n / net_bw;
  return std::max(intra, inter) + (n - 1) * step_s;
}

// How the TP group shards a layer: 1d splits the big matrices t ways and replicates biases of
// row-parallel layers and the LayerNorms; 2d (q x q), 2.5d (q x q x depth, weights replicated
// over depth) and 3d (q x q x q) shard every tensor.
double weight_shard(const config::RunConfig& c, int tp) {
  if (c.parallel.tp_mode == TpMode::k2p5d) return static_cast<double>(tp) / std::max(1, c.parallel.tp_depth);
  return tp;
}

struct LayerTimes {
  double fwd = 0, bwd = 0;         // math and element-wise work of one layer, one micro-batch
  double recompute = 0;            // repeated forward work
  double tp_comm = 0;              // TP collectives of forward + backward (+ recompute)
  double cp_comm = 0;              // CP exchanges not hidden behind attention (+ recompute)
  double moe_a2a = 0;              // EP dispatch and combine all-to-alls (+ recompute)
  double fwd_flops = 0, recompute_flops = 0;  // per micro-batch on this rank
  double total() const { return fwd + bwd + recompute + tp_comm + cp_comm + moe_a2a; }
};

// Where a layout's groups sit, for the collectives' bandwidths; the expert layers' sizes.
struct Links {
  int tp = 1, tp_nodes = 1, cp = 1, cp_nodes = 1;
  int ep = 1, ep_nodes = 1, etp = 1, etp_nodes = 1;
  double imbalance = 1;  // u: the busiest ep rank's tokens over the mean (1 with ep 1)
};

// The load factor u the expert layers run at: the calibration's, capped by a capacity factor
// (tokens beyond capacity_factor x the mean are dropped), and 1 with ep 1 (every rank then holds
// every expert and computes its own tokens' copies, however they spread over the experts).
double effective_imbalance(const config::RunConfig& c, int ep, const config::CostCalibration& cal) {
  if (ep <= 1 || !c.model.moe.enabled()) return 1.0;
  double u = std::max(1.0, cal.moe_imbalance);
  if (c.model.moe.capacity_factor >= 1.0) u = std::min(u, c.model.moe.capacity_factor);
  return u;
}

Links links_of(const EstimateInput& in, const config::CostCalibration& cal) {
  Links l;
  l.tp = std::max(1, in.tp);
  l.tp_nodes = in.tp_nodes;
  l.cp = std::max(1, in.cp);
  l.cp_nodes = in.cp_nodes;
  l.ep = std::max(1, in.ep);
  l.ep_nodes = in.ep_nodes;
  l.etp = std::max(1, in.expert_tp);
  l.etp_nodes = in.expert_tp_nodes;
  l.imbalance = effective_imbalance(in.config, l.ep, cal);
  return l;
}

// Layer `layer` of the model (a dense one, or an MoE one), one micro-batch on one rank.
LayerTimes layer_times(const config::RunConfig& c, const Links& links, const Hw& hw_in, int layer) {
  Hw hw = hw_in;
  const int tp = links.tp, tp_nodes = links.tp_nodes;
  const auto g = model::ModelDesc::from(c.model);
  const double h = g.hidden, a = g.heads, s = g.seq, b = c.train.micro_batch, hs = g.head_dim;
  // Context parallelism: a rank holds s / cp tokens of each sequence, and its queries meet every
  // key once (the load-balanced chunks give each rank the same causal share).
  const double cp = std::max(1, links.cp);
  const double T = b * s / cp;
  const double t = tp;
  const bool one_d = c.parallel.tp_mode == TpMode::k1d;
  const bool sp = c.parallel.sequence_parallel && tp > 1 && one_d;
  const double tp_bw = tp_nodes > 1 ? hw.tp_net_bw : hw.tp_intra_bw;
  LayerTimes lt;

  // GEMMs of one layer's forward on one rank at their real shapes (model.h: layer_gemms;
  // Megatron 1D: QKV and the MLP's first projection column-parallel, attention-out and the MLP's
  // last row-parallel). Other modes shard M and K as well; counted as the same math on a 1/t
  // slice, with their own collectives below. Attention: QK^T and AV per query head,
  // (s, hs) x (hs, s).
  const auto gemms = g.layer_gemms(layer);
  double gemm = 0, attn_gemm = 0;
  if (one_d) {
    for (const auto& gm : gemms) {
      if (gm.routed) continue;  // below, at the tokens each expert receives
      gemm += gm.row_parallel ? gemm_time(T, gm.n, gm.k / t, 1, hw) : gemm_time(T, gm.n / t, gm.k, 1, hw);
    }
  } else {
    const double q = std::sqrt(weight_shard(c, tp));
    const double rows = T / (c.parallel.tp_mode == TpMode::k3d ? std::cbrt(t) * std::cbrt(t) : q);
    const double w = c.parallel.tp_mode == TpMode::k3d ? std::cbrt(t) : q;
    for (const auto& gm : gemms) {
      if (!gm.routed) gemm += gemm_time(rows, gm.n / w, gm.k / w, 1, hw);
    }
  }
  // Routed experts (an MoE layer), as Megatron-Core's grouped GEMM runs them: each tp rank routes
  // its own T / t tokens (sequence parallelism's slice) to k experts each. Over an EP group of ep
  // such ranks, each holding E / ep experts, a rank's experts receive T / t x k token copies on
  // average and u times that on the busiest rank, which the step waits for; expert_tp gathers
  // them over its et ranks, each running every copy through its FE / et slice. Per expert:
  //     M = et u k (T / t) / (E / ep) tokens;  gate | up (M, 2 FE / et) x (C), down (M, C) x (FE / et),
  // E / ep of each in one grouped launch. Worked example, Mixtral 8x7B (E 8, k 2, FE 14336), T 4096,
  // t 1, ep 8, u 1: one expert per rank at M = 8192 tokens, (8192, 28672) x 4096 and
  // (8192, 4096) x 14336: the FLOPs of the dense top-2 MLP over the rank's own tokens.
  const bool moe = g.moe_layer(layer);
  const double Tr = T / t;  // tokens this rank routes
  const double u = links.imbalance, et = std::max(1, links.etp), ep = std::max(1, links.ep);
  if (moe) {
    const double local = std::max(1.0, g.experts / ep);
    const double M = et * u * g.top_k * Tr / local;
    gemm += gemm_time(M, 2.0 * g.expert_ffn / et, g.hidden, local, hw) + gemm_time(M, g.hidden, g.expert_ffn / et, local, hw);
  }
  attn_gemm += 2 * gemm_time(s / cp, s, hs, b * a / t, hw);
  // Element-wise traffic of a forward, in elements, each read once and written once (model.h:
  // layer_traffic; GPT-2: two LayerNorms 4 Th, two bias + residual adds 6 Th, sharded t ways with
  // sequence parallelism and replicated without; QKV bias and head split/merge 6 Th/t, bias +
  // GELU 2 T f/t); with dropout a one-byte mask per element of the two hidden dropouts.
  // Standard attention adds scale + mask + softmax over the a s^2 b / t scores (read, write) and
  // with dropout its pass (read, write, one-byte mask): (2 + 2.5) passes. FlashAttention keeps
  // scores on chip: no such traffic; its math runs at attention_efficiency over the causal half
  // of the scores, and its backward recomputes them (2.5x the forward's work; Dao 2023).
  const bool dropout = c.model.dropout > 0;
  const bool flash = c.train.attention == config::Attention::kFlash;
  const double replicated = one_d && !sp ? 1.0 : 1.0 / t;
  const model::LayerTraffic traffic = g.layer_traffic(layer);
  // The routed experts' SwiGLU and permutations over the busiest rank's token copies.
  const double elem = (T * traffic.replicated * replicated + T * traffic.sharded / t + Tr * u * traffic.routed) * hw.e +
                      (dropout ? 2 * T * h * replicated : 0.0);
  const double softmax = flash ? 0.0 : a * s * s / cp * b / t * (2 * hw.e + (dropout ? 2 * hw.e + 1 : 0.0));
  const double softmax_time = softmax / hw.mem_bw + hw.cal.kernel_s;
  double attn_fwd = attn_gemm + softmax_time, attn_bwd = 2 * attn_gemm + 2 * softmax_time;
  if (flash) {
    attn_fwd = 2 * b * s * s / cp * g.q_width() / t / (hw.peak * hw.cal.attention_efficiency) + hw.cal.kernel_s * cp;
    attn_bwd = 2.5 * attn_fwd;
  }
  const double other_elem_time = elem / hw.mem_bw + traffic.kernels * hw.cal.kernel_s;
  lt.fwd = gemm + attn_fwd + other_elem_time;
  lt.bwd = 2 * gemm + attn_bwd + 2 * other_elem_time;  // dgrad and wgrad; gradients of each element-wise op
  switch (c.train.recompute) {
    case Recompute::kNone: break;
    case Recompute::kSelective: lt.recompute = flash ? 0.0 : attn_fwd; break;  // the attention core
    case Recompute::kFull: lt.recompute = lt.fwd; break;
  }
  lt.fwd_flops = b * g.layer_forward_flops(layer) / t / cp;
  lt.recompute_flops = c.train.recompute == Recompute::kFull                ? lt.fwd_flops
                       : c.train.recompute == Recompute::kSelective && !flash ? b * g.attention_flops(s) / t / cp
                                                                            : 0.0;
  // CP. Ring (Megatron-Core): cp - 1 steps pass a K and a V block of s / cp tokens to the next
  // rank while the current block's attention runs, so a step shows only what its transfer takes
  // beyond that block's share of the attention; the backward passes K, V and their gradients.
  // all_to_all (DeepSpeed-Ulysses): q, k, v exchanged for whole heads before the attention, its
  // output back after, the mirror two in backward; nothing overlaps them.
  if (cp > 1) {
    const double cp_bw = links.cp_nodes > 1 ? hw.net_bw : hw.intra_bw;
    const double n = cp;
    const int passes = c.train.recompute == Recompute::kFull ? 2 : 1;  // forwards per micro-batch
    if (c.parallel.cp_comm == config::CpComm::kRing) {
      const double kv_block = 2.0 * T * g.kv_width() / t * hw.e;
      const double fwd_step = kv_block / cp_bw + hw.cal.collective_step_s;
      const double bwd_step = 2 * kv_block / cp_bw + hw.cal.collective_step_s;
      lt.cp_comm = (n - 1) * (passes * std::max(0.0, fwd_step - attn_fwd / n) + std::max(0.0, bwd_step - attn_bwd / n));
    } else {
      auto all_to_all = [&](double bytes) { return (n - 1) / n * bytes / cp_bw + (n - 1) * hw.cal.collective_step_s; };
      const double one = all_to_all(T * g.qkv_width() / t * hw.e) + all_to_all(T * g.q_width() / t * hw.e);
      lt.cp_comm = (passes + 1) * one;
    }
  }

  // TP collectives. 1D: an all-reduce of the (T, h) activation after each row-parallel layer in
  // forward, the mirror two in backward (sequence parallelism swaps each for an all-gather plus a
  // reduce-scatter of the same volume); full recompute repeats the forward two.
  if (tp > 1) {
    const double act = T * h * hw.e;
    double per_layer = 0;
    if (one_d) {
      const int passes = 4 + (c.train.recompute == Recompute::kFull ? 2 : 0);
      per_layer = passes * all_reduce_time(act, tp, tp_bw, hw.cal.tp_step_s);
    } else {
      // SUMMA-style broadcasts (Colossal-AI 2D/2.5D/3D): each of the 4 GEMMs gathers its input
      // and weight blocks along a row and a column of the grid, forward and twice in backward.
      const double q = c.parallel.tp_mode == TpMode::k3d ? std::cbrt(t) : std::sqrt(weight_shard(c, tp));
      double weights = 0;  // the layer's GEMM weights
      for (const auto& gm : gemms) weights += gm.routed ? 0.0 : gm.n * gm.k;
      const double blocks = (T * h + T * g.ffn + weights) / (q * q) * hw.e;
      per_layer = 3 * 2 * gather_time(blocks, static_cast<int>(std::lround(q)), tp_bw, hw.cal.tp_step_s);
    }
    lt.tp_comm = per_layer;
  }
  // Expert parallelism: the dispatch all-to-all sends each of the rank's T / t tokens to its k
  // experts' ranks and the combine brings the outputs back, the mirror two in the backward (and
  // the forward's again under full recompute); nothing hides them. Bytes per rank and
  // all-to-all: k (T / t) C e, u times that on the busiest rank, (ep - 1)/ep of it leaving the
  // rank (all_to_all_time), over the link or the network by where the EP group sits. An MoE layer
  // keeps the dense layer's TP collectives (the shared experts', and the token stream's).
  // expert_tp > 1 adds an all-gather of the received copies over the et ranks before the experts
  // and a reduce-scatter after, mirrored in the backward: TP collectives of the experts.
  if (moe) {
    const int passes = 4 + (c.train.recompute == Recompute::kFull ? 2 : 0);
    const double copies = u * g.top_k * Tr * h * hw.e;
    if (ep > 1) lt.moe_a2a = passes * all_to_all_time(copies, links.ep, links.ep_nodes, hw.intra_bw, hw.net_bw, hw.cal.collective_step_s);
    if (et > 1) {
      const double etp_bw = links.etp_nodes > 1 ? hw.tp_net_bw : hw.tp_intra_bw;
      lt.tp_comm += passes * gather_time(et * copies, links.etp, etp_bw, hw.cal.tp_step_s);
    }
  }
  return lt;
}

// A prediction above the device's best published MFU, and the model's reason: if compute alone
// would run above it, the GEMM efficiency is what the published runs did not reach; else the
// other parts take too small a share of the step: a run at the published MFU with this compute
// spends at least 1 - published / (MFU of the compute alone) of its step outside compute.
void check_plausibility(Estimate& e, const config::DeviceSpec& device) {
  e.published_mfu = device.published_mfu;
  if (device.published_mfu <= 0 || e.mfu <= device.published_mfu || e.step_time_s <= 0) return;
  e.plausible = false;
  const auto& b = e.breakdown;
  const double compute = b.compute_s + b.recompute_s;
  const double compute_mfu = compute > 0 ? e.mfu * e.step_time_s / compute : 0.0;
  char head[240];
  std::snprintf(head, sizeof head, "MFU %.1f%% is above the best published for %s (%.1f%%, %s): ", e.mfu * 100, device.name.c_str(),
                device.published_mfu * 100, device.published_mfu_source.c_str());
  char why[400];
  if (compute_mfu >= device.published_mfu) {
    std::snprintf(why, sizeof why,
                  "its compute alone runs at %.1f%% MFU, faster than the published runs' whole steps: the GEMM efficiency "
                  "(gemm_efficiency %.2g of the peak) is the optimistic part for these shapes",
                  compute_mfu * 100, device.calibration.gemm_efficiency);
    e.implausible_because = std::string(head) + why;
    return;
  }
  struct Share {
    const char* name;
    double s;
  };
  Share parts[] = {{"TP", b.tp_comm_s},        {"CP", b.cp_comm_s},    {"EP all-to-all", b.moe_a2a_s}, {"PP", b.pp_comm_s},
                   {"DP", b.dp_comm_s},        {"bubble", b.bubble_s}, {"optimizer", b.optimizer_s},   {"overhead", b.overhead_s}};
  std::string list;
  for (const auto& p : parts) {
    if (p.s <= 0) continue;
    char one[48];
    std::snprintf(one, sizeof one, "%s%s %.1f%%", list.empty() ? "" : ", ", p.name, p.s / e.step_time_s * 100);
    list += one;
  }
  const double other = 1.0 - compute / e.step_time_s;
  const double needed = 1.0 - device.published_mfu / compute_mfu;
  std::snprintf(why, sizeof why, "the parts besides compute take %.1f%% of the step (%s), where a run at %.1f%% MFU with this compute spends at least %.1f%%",
                other * 100, list.empty() ? "none" : list.c_str(), device.published_mfu * 100, needed * 100);
  e.implausible_because = std::string(head) + why;
}

// Extra work of the first chunk (embedding) and the last (final norm, LM head, loss), per
// micro-batch, forward + backward.
struct EndTimes {
  double first = 0, last = 0, last_flops = 0;
};

EndTimes end_times(const config::RunConfig& c, const Links& links, const Hw& hw) {
  const int tp = links.tp, tp_nodes = links.tp_nodes;
  const auto g = model::ModelDesc::from(c.model);
  const double h = g.hidden, s = g.seq, V = g.vocab, b = c.train.micro_batch, T = b * s / std::max(1, links.cp), t = tp;
  const double tp_bw = tp_nodes > 1 ? hw.tp_net_bw : hw.tp_intra_bw;
  EndTimes et;
  // Embedding: lookup (and the learned positions' add: read 2 Th, write Th), its gradient
  // scatter, and with TP the vocabulary-parallel embedding's all-reduce of (T, h).
  et.first = T * g.embedding_traffic() * hw.e / hw.mem_bw + 4 * hw.cal.kernel_s + (tp > 1 ? all_reduce_time(T * h * hw.e, tp, tp_bw, hw.cal.tp_step_s) : 0.0);
  // Head: logits GEMM (T, h) x (h, V/t) forward, two of its size backward; fp32 cross-entropy
  // over the (T, V/t) logits (about four passes).
  const double logits = gemm_time(T, V / t, h, 1, hw);
  et.last = 3 * logits + 4 * T * V / t * 4.0 / hw.mem_bw + 4 * T * h * hw.e / hw.mem_bw + 8 * hw.cal.kernel_s;
  et.last_flops = 2 * T * h * V / t;
  return et;
}

struct PerParam {
  double weights, grads, optimizer;
};

// Bytes per parameter. fp32: weight 4, grad 4, Adam moments 8. fp16 mixed precision (ZeRO
// paper): fp16 weight 2 and grad 2, fp32 master, momentum and variance 12. bf16: gradients
// accumulate in fp32 (4; Megatron forces it for bf16), so 2 + 4 + 12, and with the distributed
// optimizer (zero: 1) Megatron's 6 + 12/d. ZeRO shards over the d ranks of the gradient group
// (dp x cp): 1 the optimizer state, 2 the gradients too, 3 the weights too (Rajbhandari et al. 2020).
// `group`: the ranks that hold the same values and shard them, dp x cp for a dense parameter,
// expert-dp for a routed expert's (Megatron's distributed optimizer shards those over expert-dp).
PerParam per_param_over(const config::RunConfig& c, double group, int zero) {
  PerParam pp{};
  switch (c.train.precision) {
    case Precision::kFp32: pp = {4, 4, 8}; break;
    case Precision::kFp16: pp = {2, 2, 12}; break;
    case Precision::kBf16: pp = {2, 4, 12}; break;
  }
  const double d = std::max(1.0, group);
  if (zero >= 1) pp.optimizer /= d;
  if (zero >= 2) pp.grads /= d;
  if (zero >= 3) pp.weights /= d;
  return pp;
}
PerParam per_param(const config::RunConfig& c, int dp, int zero) {  // dp: the data-parallel size
  return per_param_over(c, static_cast<double>(std::max(1, dp)) * std::max(1, c.parallel.cp), zero);
}

// The expert-dp size of a layout: t cp d / (ep et), at least 1.
int expert_dp_of(const config::RunConfig& c, int dp, int tp) {
  const long long stage = static_cast<long long>(std::max(1, tp)) * std::max(1, c.parallel.cp) * std::max(1, dp);
  const long long folded = static_cast<long long>(std::max(1, c.parallel.ep)) * std::max(1, c.parallel.expert_tp);
  return static_cast<int>(std::max(1LL, stage / folded));
}

// What estimate() reads of the model's description, counted once per model and thread: search
// estimates tens of thousands of layouts of one model, and listing an MoE layer's tensors (every
// expert's) would otherwise be most of each estimate's time.
struct ModelFigures {
  config::ModelConfig key;
  model::ModelDesc g;
  double total = 0, active = 0;
  model::LayerParamSplit dense, moe;  // a dense layer's and an MoE layer's parameters by how they shard
  const model::LayerParamSplit& layer(int i) const { return g.moe_layer(i) ? moe : dense; }
};

const ModelFigures& model_figures(const config::ModelConfig& m) {
  thread_local ModelFigures cache;
  thread_local bool filled = false;
  if (!filled || !(cache.key == m)) {
    ModelFigures f;
    f.key = m;
    f.g = model::ModelDesc::from(m);
    f.total = f.g.total_params();
    f.active = f.g.active_params();
    if (f.g.layers > 0) {
      f.dense = f.g.layer_param_split(0);
      f.moe = f.g.moe() ? f.g.layer_param_split(f.g.layers - 1) : f.dense;
    }
    cache = std::move(f);
    filled = true;
  }
  return cache;
}

// One layer's parameters on one rank: the dense part (1d: split tensors / t; other modes shard
// every tensor) and the routed experts' (E / ep experts, each / et).
struct RankLayerParams {
  double dense = 0, expert = 0;
};
RankLayerParams rank_layer_params(const config::RunConfig& c, const model::LayerParamSplit& split, int tp) {
  RankLayerParams r;
  r.dense = c.parallel.tp_mode == TpMode::k1d ? split.replicated + split.tp_split / std::max(1, tp)
                                              : (split.replicated + split.tp_split) / weight_shard(c, tp);
  r.expert = split.expert / (static_cast<double>(std::max(1, c.parallel.ep)) * std::max(1, c.parallel.expert_tp));
  return r;
}

// The CPU engine's buffers beyond weights, gradients, optimizer state and activations on pp rank
// r (runtime/trainer.h, StepStats::mem_bytes), the larger of two sets, fp32:
//   schedule: token ids and targets 2 b s (int32), the received activation and gradient 2 b s h,
//             and every send of the step, b s h each, kept until the step ends: m per chunk of the
//             rank that has a next chunk (forward) and m per chunk that has a previous (backward);
//             zero 2 and 3 add the units in flight at their most (runtime/zero_shards.h);
//   zero 1:   the padded gradient with its reduced shard, then the rank's parameter shard with
//             every shard gathered: per (d + 1), per = ceil(P / d), P the rank's parameters;
//   zero 2:   the rank's parameter shard S (the sum of its groups' per) and the largest group
//             gathered, d per_max.
// Units and groups as the engine makes them: a layer's tensors, or one tensor outside the layers;
// a group (n floats) gives each rank per = ceil(n / d). In flight at once (the engine overlaps one
// reduce-scatter and, zero 3, one gather with the unit in use): zero 3, a group per unit: the
// unit's gathered parameters and its gradient (2 d per), the next unit gathered ahead (d per) and
// the previous one's gradient reducing with its block ((d + 1) per); the head's tensors are held
// together in the last chunk's forward and reduce during the top layer's backward, the
// embeddings likewise in chunk 0's backward. Zero 2: a chunk's layers in runs of at least
// parallel.grad_bucket_mb from its last layer down, every other tensor alone; the group filling
// (d per) and the previous one reducing ((d + 1) per). Without parallel.overlap_grad_reduce one
// unit (or the ends' units held together) and one block at a time: zero 3 (2 d + 1) per, zero 2
// (d + 1) per.
// estimate() has already counted, for zero 2 and 3, two gradient buckets (min(2 bucket, 4 P)) and
// for zero 3 two gathered layers in the ranks' gradients and weights; those terms are taken out
// here again, so that the total is the engine's.
// Worked example, configs/tiny-gpt.yaml (b 4, s 64, h 128, pp 2, m 2): pp rank 0 holds one chunk
// with a next one: 2 sends; 4 x (2 x 4 x 64 + 32768 x (2 + 2)) = 514 KiB. The process itself
// (code, libraries, OpenBLAS and Gloo threads) is not counted, as the worker does not count it.
double cpu_engine_buffers(const config::RunConfig& c, int r, int p, int v, int m, int d, double params,
                          const std::vector<int>& chunk_layers) {
  const double bs = static_cast<double>(c.train.micro_batch) * c.model.seq_len / std::max(1, c.parallel.cp);
  const int chunks = p * v;
  double sends = 0;
  for (int ch = r; ch < chunks; ch += p) sends += (ch + 1 < chunks ? m : 0) + (ch > 0 ? m : 0);
  double schedule = 4.0 * (2 * bs + bs * c.model.hidden * (2 + sends));
  double update = 0;
  d *= std::max(1, c.parallel.cp);  // the gradient group
  if (c.parallel.zero == 1 && d > 1) {
    const double per = std::ceil(params / d);
    update = 4.0 * per * (d + 1);
  }
  if (c.parallel.zero >= 2 && d > 1) {
    const int zero = c.parallel.zero;
    const bool overlap = c.parallel.overlap_grad_reduce;
    const int tp = std::max(1, c.parallel.tp);
    const auto desc = model::ModelDesc::from(c.model);
    auto per_of = [&](double n) { return std::ceil(n / d); };
    // The rank's units, floats each: the end tensors by place, the layers by chunk.
    double layer = 0, first_sum = 0, last_sum = 0, first_max = 0, last_max = 0, head_copy = 0;
    std::vector<double> first_units, last_units;
    for (const auto& t : desc.params()) {
      const double n = static_cast<double>(model::shard_numel(t, tp));
      if (t.place == model::Place::kLayer && t.layer == 0) layer += n;
      if (t.place == model::Place::kFirstStage) first_units.push_back(n);
      if (t.place == model::Place::kLastStage) last_units.push_back(n);
    }
    const bool first = r == 0, last = r == (chunks - 1) % p;
    if (last && desc.tied && !first) head_copy = first_units.front();
    if (last && head_copy > 0) last_units.push_back(head_copy);
    if (last && desc.tied && first) last_units.push_back(first_units.front());  // the head reads the embedding
    for (double n : first_units) first_sum += per_of(n), first_max = std::max(first_max, per_of(n));
    for (double n : last_units) last_sum += per_of(n), last_max = std::max(last_max, per_of(n));
    // Shard groups: per and the groups' sum S.
    double S = 0, per_max = 0, in_flight = 0, top_group = 0, bottom_group = 0;  // zero 2: a chunk's top and bottom group
    auto add_group = [&](double n) {
      S += per_of(n);
      per_max = std::max(per_max, per_of(n));
    };
    if (first) {
      for (double n : first_units) add_group(n);
    }
    if (last) {
      for (size_t i = 0; i < last_units.size(); ++i) {
        if (!(desc.tied && first && i + 1 == last_units.size())) add_group(last_units[i]);
      }
    }
    const double bucket = c.parallel.grad_bucket_bytes() / 4.0;
    for (int ch = r; ch < chunks && ch < static_cast<int>(chunk_layers.size()); ch += p) {
      const int n = chunk_layers[static_cast<size_t>(ch)];
      if (zero >= 3) {
        for (int i = 0; i < n; ++i) add_group(layer);
        // The next unit gathered ahead is a layer but where chunk 0's bottom layers come last (then
        // the embeddings, counted below).
        const double layers_held = !overlap ? 2.0 * d + 1 : ch == 0 && n <= 2 ? 3.0 * d + 1 : 4.0 * d + 1;  // in per
        if (n > 0) in_flight = std::max(in_flight, layers_held * per_of(layer));
        continue;
      }
      // Zero 2: from the chunk's last layer down, runs of whole layers of at least `bucket`; a
      // group fills while the one above it reduces.
      int left = n;
      double above = 0;
      while (left > 0) {
        int k = 1;
        while (k < left && k * layer < bucket) ++k;
        const double per = per_of(k * layer);
        add_group(k * layer);
        in_flight = std::max(in_flight, (d + 1.0) * std::max(per, above) + (above > 0 && overlap ? d * per : 0.0));
        top_group = top_group > 0 ? top_group : per;
        bottom_group = per;
        above = per;
        left -= k;
      }
    }
    // The ends beside a layer: its gradient reducing (zero 2 a bucket, taken as one layer here) and
    // for zero 3 its parameters and gradient, or the next unit gathered ahead.
    const double held = zero >= 3 ? 2.0 * d : 1.0 * d;  // a unit's parameters and gradient, or its gradient
    const double below = zero >= 3 ? per_of(layer) : bottom_group, above = zero >= 3 ? per_of(layer) : top_group;
    if (!overlap) {  // one unit (or the ends' units together) and one block at a time
      if (first) in_flight = std::max(in_flight, held * first_sum + first_max);
      if (last) in_flight = std::max(in_flight, held * last_sum + last_max);
    } else {
      const double ahead = zero >= 3 ? d * std::max(first_max, below) : 0.0;  // zero 3: the next unit gathered
      if (first) in_flight = std::max(in_flight, held * first_sum + (d + 1.0) * below + ahead);
      // The head in the last chunk's forward, then reducing beside the top layer's backward.
      const double in_forward = held * last_sum + (zero >= 3 ? d * above : 0.0);
      const double reducing = (d + 1.0) * last_sum + (zero >= 3 ? 3.0 : 1.0) * d * above;
      if (last) in_flight = std::max({in_flight, in_forward, reducing});
    }
    schedule += 4.0 * in_flight;
    if (zero == 2) update = 4.0 * (S + d * per_max);
    // What estimate() counted already for these buffers (its weights and gradients).
    const int rank_layers = [&] {
      int k = 0;
      for (int ch = r; ch < chunks && ch < static_cast<int>(chunk_layers.size()); ch += p) k += chunk_layers[static_cast<size_t>(ch)];
      return k;
    }();
    double counted = std::min(2.0 * c.parallel.grad_bucket_bytes(), 4.0 * params);
    if (zero >= 3 && rank_layers > 0) counted += 2.0 * layer * 4.0;
    return std::max(schedule, update) - counted;
  }
  return std::max(schedule, update);
}

}  // namespace

// Activation bytes of one layer for one micro-batch (Korthikanti et al. 2022, Table 2,
// element by element so that precision and dropout count; model.h: layer_activations): for
// GPT-2, per T h,
//   replicated under 1D TP: LayerNorm inputs 2, QKV input 1, fc1 input 1   (4 elements)
//   sharded by t:           Q, K, V 3, attention-out input 1, GELU in and out 2 x f/h
//   per a s^2 b:            softmax output 1 (sharded by t)
// (Llama: K and V by its key/value heads, gate | up and SwiGLU's output 3 x f/h.)
// Stagecraft's GPT has no dropout; Megatron's adds three masks of one byte (two T h, one
// a s^2 b) and the dropout output a s^2 b, which gives the paper's s b h (34 + 5 a s / h) at
// 16 bits with f = 4h. The norms' two inputs are the residual stream, which Stagecraft's engine
// keeps in fp32 at every precision (train.fp32_residual, true by default; Megatron's
// --fp32-residual-connection, which its export then sets): 4 bytes each, so 38 + 5 a s / h at 16
// bits. The paper's count is train.fp32_residual: false.
double layer_activation_bytes(const config::RunConfig& c, int tp) {
  return layer_activation_bytes(c, tp, model::ModelDesc::from(c.model).typical_layer(), 1.0);
}

namespace {

// Layer `layer`'s activations on one rank, and of them the routed experts' and the router's.
// An MoE layer's routed experts keep, per token copy their rank's experts receive (u k T / t on the
// busiest rank, gathered over et), the copy itself (et x, each et rank reads it whole) and its
// gate | up and SwiGLU output (3 FE / et each rank, so 3 FE of the T / t tokens' total); the
// router its logits and probabilities (2 E) per routed token.
struct ActivationBytes {
  double total = 0, moe = 0;
};
ActivationBytes layer_activations_of(const config::RunConfig& c, int tp, int layer, double u) {
  const auto g = model::ModelDesc::from(c.model);
  // Context parallelism keeps s / cp tokens of each sequence on a rank, their scores against all s keys.
  const double cp = std::max(1, c.parallel.cp);
  const double h = g.hidden, a = g.heads, s = g.seq, b = c.train.micro_batch, T = b * s / cp, t = tp;
  const double e = c.train.precision == Precision::kFp32 ? 4.0 : 2.0;
  const bool one_d = c.parallel.tp_mode == TpMode::k1d;
  const bool sp = c.parallel.sequence_parallel && tp > 1 && one_d;
  const bool dropout = c.model.dropout > 0;
  const double rep = one_d && !sp ? 1.0 : 1.0 / t;  // share of a "replicated" tensor a rank holds
  const model::LayerActivations kept = g.layer_activations(layer);
  const double et = std::max(1, c.parallel.expert_tp);
  const double moe = (T / t) * (u * (et * kept.routed_input + kept.routed) + kept.router) * e;
  const double residual = 2 * h;  // of kept.replicated: the norms' inputs (above)
  const double re = c.train.fp32_residual ? 4.0 : e;
  const double rest = ((kept.replicated - residual) * rep + kept.sharded / t) * T * e + residual * rep * T * re +
                      (dropout ? 2 * T * h * rep : 0.0) + moe;
  // FlashAttention stores no scores: only the softmax statistics, one fp32 per (head, token).
  const double core = c.train.attention == config::Attention::kFlash ? 4.0 * a * s / cp * b / t
                                                                      : a * s / cp * s * b / t * (dropout ? 2 * e + 1 : e);
  switch (c.train.recompute) {
    case Recompute::kNone: return {rest + core, moe};
    case Recompute::kSelective: return {rest + (c.train.attention == config::Attention::kFlash ? core : 0.0), moe};
    case Recompute::kFull: return {T * h * re * rep, 0.0};  // the layer input only, the residual stream (2 s b h at 16 bits)
  }
  return {rest + core, moe};
}

}  // namespace

double layer_activation_bytes(const config::RunConfig& c, int tp, int layer, double moe_imbalance) {
  return layer_activations_of(c, tp, layer, moe_imbalance).total;
}

int inflight_micro_batches(const config::RunConfig& c, int pp_rank, int pp, int v, int m) {
  switch (c.pipeline.schedule) {
    case Schedule::kGpipe: return m;  // per chunk: every micro-batch's forward runs first
    case Schedule::k1f1b: return std::min(m, pp - pp_rank);
    case Schedule::kInterleaved: {
      // Megatron's interleaved 1F1B warms up (p - r - 1) x 2 + (v - 1) x p chunk-micro-batches,
      // then holds one more; spread over the rank's v chunks.
      // 64-bit: m x v passes 2^31 for a billion micro-batches of 1024 chunks.
      const long long chunk_batches = static_cast<long long>(m) * v;
      const long long warmup = std::min(chunk_batches, (pp - pp_rank - 1) * 2LL + (v - 1) * static_cast<long long>(pp));
      return static_cast<int>(std::min(chunk_batches, warmup + 1));
    }
  }
  return 1;
}

int axis_group_nodes(const TopologySpec& spec, const std::vector<config::Axis>& axes) {
  std::array<int, config::kAxisCount> size{};
  size[static_cast<size_t>(config::Axis::kTp)] = spec.tp;
  size[static_cast<size_t>(config::Axis::kDp)] = spec.dp;
  size[static_cast<size_t>(config::Axis::kPp)] = spec.pp;
  size[static_cast<size_t>(config::Axis::kCp)] = spec.cp;
  // The members of group 0, enumerated in the order's nesting: increasing ranks, so a node
  // change is a new node.
  std::vector<std::pair<long long, int>> nested;  // (stride, size) of the group's axes, innermost first
  long long stride = 1;
  for (config::Axis a : config::complete_order(spec.order)) {
    const int n = std::max(1, size[static_cast<size_t>(a)]);
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) nested.emplace_back(stride, n);
    stride *= n;
  }
  long long members = 1;
  for (const auto& [st, n] : nested) members *= n;
  const int gpn = std::max(1, spec.gpus_per_node);
  int nodes = 0;
  long long last_node = -1;
  for (long long i = 0; i < members; ++i) {
    long long rank = 0, rest = i;
    for (const auto& [st, n] : nested) {
      rank += (rest % n) * st;
      rest /= n;
    }
    const long long node = rank / gpn;
    if (node != last_node) ++nodes;
    last_node = node;
  }
  return std::max(nodes, 1);
}

void set_layout(EstimateInput& in, const TopologySpec& spec) {
  in.dp = spec.dp;
  in.tp = spec.tp;
  in.pp = spec.pp;
  in.cp = spec.cp;
  in.tp_nodes = axis_group_nodes(spec, {config::Axis::kTp});
  in.cp_nodes = axis_group_nodes(spec, {config::Axis::kCp});
  in.dp_nodes = axis_group_nodes(spec, gradient_axes());
  in.pp_crosses_nodes = axis_group_nodes(spec, {config::Axis::kPp}) > 1;
  // The expert layers' mapping numbers the same ranks with expert_tp, ep and expert-dp in tp's,
  // cp's and dp's places (plan/topology.h), so their groups sit where those axes' would with
  // those sizes.
  in.ep = spec.experts ? std::max(1, spec.ep) : 1;
  in.expert_tp = spec.experts ? std::max(1, spec.expert_tp) : 1;
  in.ep_nodes = in.expert_tp_nodes = in.expert_dp_nodes = 1;
  if (spec.experts) {
    const long long stage = static_cast<long long>(std::max(1, spec.tp)) * std::max(1, spec.cp) * std::max(1, spec.dp);
    TopologySpec folded = spec;
    folded.tp = in.expert_tp;
    folded.cp = in.ep;
    folded.dp = static_cast<int>(std::max(1LL, stage / (static_cast<long long>(in.ep) * in.expert_tp)));
    in.ep_nodes = axis_group_nodes(folded, {config::Axis::kCp});
    in.expert_tp_nodes = axis_group_nodes(folded, {config::Axis::kTp});
    in.expert_dp_nodes = axis_group_nodes(folded, {config::Axis::kDp});
  }
}

StageCostModel time_cost_model(const config::RunConfig& config, const config::DeviceSpec& device, int tp, int tp_nodes) {
  EstimateInput in;
  in.config = config;
  in.device = device;
  if (config.model.moe.enabled()) set_layout(in, topology_spec(config));  // where the expert groups sit
  in.tp = tp;
  in.tp_nodes = tp_nodes;
  in.cp = config.parallel.cp;
  const Hw hw = hardware(in);
  const Links links = links_of(in, hw.cal);
  const EndTimes et = end_times(config, links, hw);
  const auto g = model::ModelDesc::from(config.model);
  StageCostModel m;
  m.layer.resize(static_cast<size_t>(std::max(0, config.model.layers)));
  for (int i = 0; i < config.model.layers; ++i) {
    const bool same = i > 0 && g.moe_layer(i) == g.moe_layer(i - 1);
    m.layer[static_cast<size_t>(i)] = same ? m.layer[static_cast<size_t>(i - 1)] : layer_times(config, links, hw, i).total();
  }
  m.first = et.first;
  m.last = et.last;
  return m;
}

StageMemoryModel memory_model(const config::RunConfig& config, int dp, int tp, int pp, int virtual_stages, int micro_batches) {
  const ModelFigures& mf = model_figures(config.model);
  const auto& g = mf.g;
  const PerParam bpp = per_param(config, dp, config.parallel.zero);
  const double per = bpp.weights + bpp.grads + bpp.optimizer;
  // A routed expert's state is sharded over expert-dp.
  const PerParam ebpp = per_param_over(config, expert_dp_of(config, dp, tp), config.parallel.zero);
  const double eper = ebpp.weights + ebpp.grads + ebpp.optimizer;
  const double shard = weight_shard(config, tp);
  StageMemoryModel m;
  const int chunks = pp * virtual_stages;
  // Layer by layer: an MoE layer holds E / ep routed experts (each / expert_tp) beside its dense
  // part, the first dense_layers the dense MLP. Activations at a balanced load (u = 1).
  const size_t L = static_cast<size_t>(std::max(0, config.model.layers));
  m.layer_static.resize(L);
  m.layer_activation.resize(L);
  for (int i = 0; i < config.model.layers; ++i) {
    const bool same = i > 0 && g.moe_layer(i) == g.moe_layer(i - 1);
    const auto k = static_cast<size_t>(i);
    if (same) {
      m.layer_static[k] = m.layer_static[k - 1];
      m.layer_activation[k] = m.layer_activation[k - 1];
      continue;
    }
    const RankLayerParams lp = rank_layer_params(config, mf.layer(i), tp);
    m.layer_static[k] = per * lp.dense + eper * lp.expert;
    m.layer_activation[k] = layer_activation_bytes(config, tp, i, 1.0);
  }
  // The embedding's vocabulary matrix is sharded (vocabulary-parallel), learned positions not; the
  // last stage holds the final norm and the head's matrix (its own, or the tied one's copy).
  m.first = per * (g.vocab_matrix() / shard + (g.embedding_params() - g.vocab_matrix()));
  m.last = per * ((g.head_params() - (g.tied ? 0.0 : g.vocab_matrix())) +
                  ((!config.model.tied_embeddings || chunks > 1) ? g.vocab_matrix() / shard : 0.0));
  m.inflight.resize(static_cast<size_t>(chunks));
  for (int c = 0; c < chunks; ++c) {
    const int r = c % pp;
    // Interleaved: the rank's in-flight chunk-micro-batches spread over its v chunks.
    const double n = inflight_micro_batches(config, r, pp, virtual_stages, micro_batches);
    m.inflight[static_cast<size_t>(c)] = virtual_stages > 1 ? n / virtual_stages : n;
  }
  return m;
}

Estimate estimate(const EstimateInput& in) {
  const auto& c = in.config;
  const ModelFigures& mf = model_figures(c.model);
  const model::ModelDesc& g = mf.g;
  const Hw hw = hardware(in);
  const int p = std::max(1, in.pp), v = std::max(1, in.virtual_stages), m = std::max(1, in.micro_batches);
  const int t = std::max(1, in.tp), d = std::max(1, in.dp), cp = std::max(1, in.cp);
  const int D = d * cp;  // the gradient group over model::kReplicaAxes: dp x cp ranks hold the same weights
  const int chunks = p * v;
  const double T = static_cast<double>(c.train.micro_batch) * g.seq / cp;
  const PerParam full = per_param(c, 1, 0);  // bytes per parameter before ZeRO shards them
  // The expert layers' folding: EP x expert-TP x expert-DP over the stage's t x cp x d ranks.
  config::RunConfig folded = c;
  folded.parallel.ep = std::max(1, in.ep);
  folded.parallel.expert_tp = std::max(1, in.expert_tp);
  const int ED = expert_dp_of(folded, d, t);  // the routed experts' gradient group
  const Links links = links_of(in, hw.cal);
  Estimate e;
  e.device = in.device.name;
  e.device_memory_bytes = in.device.memory_bytes();
  e.params_total = mf.total;
  e.params_active = mf.active;
  e.experts = g.moe();
  e.moe_imbalance = links.imbalance;
  e.peak_tflops = hw.peak / 1e12;

  // Memory, rank by rank.
  const StageMemoryModel mem = memory_model(folded, d, t, p, v, m);
  const PerParam bpp = per_param(c, d, c.parallel.zero);
  const PerParam ebpp = per_param_over(c, ED, c.parallel.zero);  // a routed expert's, ZeRO over expert-dp
  const double per = bpp.weights + bpp.grads + bpp.optimizer;
  const double gpu_workspace = hw.cal.gpu_workspace_gib * 1024.0 * 1024.0 * 1024.0;
  // Each kind of layer once: its parameters on a rank and its activations (at the load u).
  struct Kind {
    RankLayerParams params;
    ActivationBytes act;
    double recompute_working = 0;  // full recompute: one layer's activations rebuilt at a time
  };
  config::RunConfig no_recompute = folded;
  no_recompute.train.recompute = Recompute::kNone;
  auto kind_of = [&](int i) {
    Kind k;
    k.params = rank_layer_params(folded, mf.layer(i), t);
    k.act = layer_activations_of(folded, t, i, links.imbalance);
    if (c.train.recompute == Recompute::kFull) k.recompute_working = layer_activations_of(no_recompute, t, i, links.imbalance).total;
    return k;
  };
  const Kind dense_kind = kind_of(0);
  const Kind moe_kind = g.moe() && c.model.layers > 0 ? kind_of(c.model.layers - 1) : dense_kind;
  auto kind = [&](int i) -> const Kind& { return g.moe_layer(i) ? moe_kind : dense_kind; };
  // Dispatch buffers of an MoE layer, one layer at a time (bytes): the rank's k T / t token copies
  // permuted to send and their outputs combined back, what the busiest rank's experts receive and
  // return (u et k T / t copies each), and the gradient of the experts' gate | up output
  // (u k T / t x 2 FE over the et ranks).
  const double copies = static_cast<double>(g.top_k) * T / t;
  const double dispatch = g.moe() ? (2.0 * copies * g.hidden + 2.0 * links.imbalance * links.etp * copies * g.hidden +
                                     links.imbalance * copies * 2.0 * g.expert_ffn) * hw.e
                                  : 0.0;
  // Logits of the last stage for one micro-batch: 16-bit (or fp32) logits and the fp32 copy the
  // loss works on.
  const double logits = T * g.vocab / (t > 1 ? weight_shard(c, t) : 1.0) * ((c.train.precision == Precision::kFp32 ? 4.0 : 2.0) + 4.0);
  e.memory.resize(static_cast<size_t>(p));
  std::vector<int> rank_layers(static_cast<size_t>(p), 0), rank_moe_layers(static_cast<size_t>(p), 0);
  std::vector<double> largest_layer(static_cast<size_t>(p), 0.0);  // its params on the rank: ZeRO-3 gathers one at a time
  std::vector<double> working(static_cast<size_t>(p), 0.0);
  std::vector<int> chunk_first(static_cast<size_t>(chunks) + 1, 0);
  int layer = 0;
  for (int ch = 0; ch < chunks && ch < static_cast<int>(in.chunk_layers.size()); ++ch) {
    const int r = ch % p;
    const int n = in.chunk_layers[static_cast<size_t>(ch)];
    auto& rm = e.memory[static_cast<size_t>(r)];
    chunk_first[static_cast<size_t>(ch)] = layer;
    const double inflight = mem.inflight[static_cast<size_t>(ch)];
    for (int i = 0; i < n && layer < c.model.layers; ++i, ++layer) {
      const Kind& k = kind(layer);
      rm.params += k.params.dense + k.params.expert;
      rm.expert_params += k.params.expert;
      rm.activations += k.act.total * inflight;
      rm.moe_activations += k.act.moe * inflight;
      largest_layer[static_cast<size_t>(r)] = std::max(largest_layer[static_cast<size_t>(r)], k.params.dense + k.params.expert);
      working[static_cast<size_t>(r)] = std::max(working[static_cast<size_t>(r)], k.recompute_working);
      if (g.moe_layer(layer)) ++rank_moe_layers[static_cast<size_t>(r)];
    }
    if (ch == 0) rm.params += mem.first / per;
    if (ch == chunks - 1) {
      rm.params += mem.last / per;
      rm.activations += logits;
    }
    rank_layers[static_cast<size_t>(r)] += n;
  }
  for (int ch = std::min(chunks, static_cast<int>(in.chunk_layers.size())); ch <= chunks; ++ch) chunk_first[static_cast<size_t>(ch)] = layer;
  for (int r = 0; r < p; ++r) {
    auto& rm = e.memory[static_cast<size_t>(r)];
    rm.pp_rank = r;
    const double dense = rm.params - rm.expert_params;
    rm.expert_weights = rm.expert_params * ebpp.weights;
    rm.expert_grads = rm.expert_params * ebpp.grads;
    rm.expert_optimizer = rm.expert_params * ebpp.optimizer;
    rm.weights = dense * bpp.weights + rm.expert_weights;
    rm.grads = dense * bpp.grads + rm.expert_grads;
    rm.optimizer = dense * bpp.optimizer + rm.expert_optimizer;
    // ZeRO-2 and 3 hold a gradient bucket unsharded until its reduce-scatter, and a second
    // filling behind it; ZeRO-3 gathers a layer's weights before its forward and backward, the
    // next one prefetched, and holds a layer's whole gradient until it is reduced-scattered.
    if ((D > 1 || (ED > 1 && rm.expert_params > 0)) && c.parallel.zero >= 2) {
      rm.grads += std::min(2.0 * c.parallel.grad_bucket_bytes(), rm.params * full.grads);
    }
    if ((D > 1 || (ED > 1 && rm.expert_params > 0)) && c.parallel.zero >= 3) rm.weights += 2.0 * largest_layer[static_cast<size_t>(r)] * full.weights;
    rm.activations += rank_layers[static_cast<size_t>(r)] > 0 ? working[static_cast<size_t>(r)] : 0.0;
    if (rank_moe_layers[static_cast<size_t>(r)] > 0) {
      rm.moe_dispatch = dispatch;
      rm.activations += dispatch;
    }
    rm.workspace = in.device.is_cpu ? cpu_engine_buffers(c, r, p, v, m, d, rm.params, in.chunk_layers) : gpu_workspace;
    if (rm.total() > e.peak_memory_bytes) {
      e.peak_memory_bytes = rm.total();
      e.peak_pp_rank = r;
    }
  }
  e.fits = e.peak_memory_bytes <= e.device_memory_bytes;

  // Time of one micro-batch on each pp rank: every layer by its kind.
  const LayerTimes dense_lt = layer_times(folded, links, hw, 0);
  const LayerTimes moe_lt = g.moe() && c.model.layers > 0 ? layer_times(folded, links, hw, c.model.layers - 1) : dense_lt;
  auto times = [&](int i) -> const LayerTimes& { return g.moe_layer(i) ? moe_lt : dense_lt; };
  const LayerTimes& big_lt = g.moe() ? moe_lt : dense_lt;  // the layer ZeRO-3 gathers the most for
  const EndTimes et = end_times(c, links, hw);
  struct RankTime {
    double compute = 0, recompute = 0, tp = 0, cp = 0, a2a = 0, bwd_last_chunk = 0, layers = 0;
    double busy() const { return compute + recompute + tp + cp + a2a; }
  };
  std::vector<RankTime> rt(static_cast<size_t>(p));
  for (int ch = 0; ch < chunks && ch < static_cast<int>(in.chunk_layers.size()); ++ch) {
    auto& x = rt[static_cast<size_t>(ch % p)];
    double bwd = 0;
    for (int i = chunk_first[static_cast<size_t>(ch)]; i < chunk_first[static_cast<size_t>(ch) + 1]; ++i) {
      const LayerTimes& lt = times(i);
      x.compute += lt.fwd + lt.bwd;
      x.recompute += lt.recompute;
      x.tp += lt.tp_comm;
      x.cp += lt.cp_comm;
      x.a2a += lt.moe_a2a;
      bwd += lt.bwd + lt.recompute;
    }
    x.layers += in.chunk_layers[static_cast<size_t>(ch)];
    if (ch == 0) x.compute += et.first;
    if (ch == chunks - 1) x.compute += et.last;
    if (ch % p == ch) x.bwd_last_chunk = bwd;  // the chunk whose backward ends the step
  }
  int bottleneck = 0;
  for (int r = 1; r < p; ++r) {
    if (rt[static_cast<size_t>(r)].busy() > rt[static_cast<size_t>(bottleneck)].busy()) bottleneck = r;
  }
  const RankTime& bt = rt[static_cast<size_t>(bottleneck)];
  const double per_micro = bt.busy();
  StepBreakdown& br = e.breakdown;
  br.compute_s = m * bt.compute;
  br.recompute_s = m * bt.recompute;
  br.tp_comm_s = m * bt.tp;
  br.cp_comm_s = m * bt.cp;
  br.moe_a2a_s = m * bt.a2a;
  // Bubble: the pipeline fills and drains once per step, (p - 1) / v micro-batch slots.
  br.bubble_s = p > 1 ? static_cast<double>(p - 1) / v * per_micro : 0.0;
  if (c.pipeline.schedule == Schedule::kGpipe && p > 1) br.bubble_s = static_cast<double>(p - 1) * per_micro;
  // PP send/recv: each micro-batch's activation forward and its gradient backward at every
  // chunk boundary of the bottleneck rank; Megatron splits the (T, h) tensor over the t ranks of
  // the TP group (scatter-gather) or sequence parallelism has it split already.
  if (p > 1) {
    const double bytes = T * g.hidden * hw.e / t;
    const double bw = in.pp_crosses_nodes ? hw.net_bw : hw.intra_bw;
    const double one = bytes / bw + hw.cal.collective_step_s;
    br.pp_comm_s = 2.0 * one * (static_cast<double>(m) * v + (p - 1));
  }
  // DP: gradients of every rank's parameters reduced across its gradient group, the D = dp x cp
  // ranks that hold the same weights. By ZeRO stage (parallel.zero):
  //   0: an all-reduce. With parallel.overlap_grad_reduce, buckets of parallel.grad_bucket_mb
  //      start as the last micro-batch's backward finishes their layers (runtime/grad_reducer.h):
  //      that backward hides the all-reduce but the first bucket's share of it, which stays
  //      exposed as the last bucket (the embeddings' and the final norm's, reduced once the
  //      backward ends) does. One bucket for the whole stage hides nothing.
  //   1: a reduce-scatter after the backward and an all-gather of the updated weights (the
  //      distributed optimizer as the engine runs it), both exposed.
  //   2: every micro-batch's backward reduce-scatters its buckets into the rank's shard (DeepSpeed's
  //      ZeRO-2), hidden as zero 0's are but m times, then the all-gather of the weights.
  //   3: no weights to gather after the step; instead each layer's weights are gathered before its
  //      forward and again before its backward, every micro-batch, and its gradient
  //      reduce-scattered; prefetched one layer ahead, they hide behind the previous layer's work.
  // The routed experts' gradients reduce over their own group, the ed expert-dp ranks (Megatron's
  // expert-data-parallel buckets), by the same ZeRO stage; both groups' collectives are counted one
  // after the other (they share the links) and hide behind the same backward.
  // On the cpu device nothing hides: Gloo's copies and sums need the cores the backward keeps
  // busy (tests/bench/bench_grad_overlap.sh measured no gain with 2 ranks on 2 cores, and a loss
  // with small buckets). Tied embeddings with p > 1 add the first/last stage all-reduce of the
  // word embedding gradient, after the backward.
  double dp_time = 0, expert_dp_time = 0;
  const double dp_bw = in.dp_nodes > 1 ? hw.net_bw : hw.intra_bw;
  const double edp_bw = in.expert_dp_nodes > 1 ? hw.net_bw : hw.intra_bw;
  const double step_s = hw.cal.collective_step_s;
  const int zero = c.parallel.zero;
  // The largest layer's parameters on a rank, dense and routed: what ZeRO-3 gathers at a time.
  const Kind& big = g.moe() ? moe_kind : dense_kind;
  for (int r = 0; r < p; ++r) {
    const auto& rm = e.memory[static_cast<size_t>(r)];
    const double dense_params = rm.params - rm.expert_params, expert_params = rm.expert_params;
    const auto& x = rt[static_cast<size_t>(r)];
    const double grad_bytes = rm.params * full.grads;
    const double share = grad_bytes > 0 ? std::min(1.0, c.parallel.grad_bucket_bytes() / grad_bytes) : 1.0;
    const bool overlap = c.parallel.overlap_grad_reduce && !in.device.is_cpu;
    // One group's collectives: (dense over D, experts over ED).
    auto both = [&](auto&& f) { return std::pair{f(dense_params, D, dp_bw), f(expert_params, ED, edp_bw)}; };
    double exposed = 0;
    std::pair<double, double> raw{0, 0};  // the two groups' un-hidden times, for the experts' share
    if (zero == 0) {
      raw = both([&](double n, int group, double bw) { return all_reduce_time(n * full.grads, group, bw, step_s); });
      const double all_reduce = raw.first + raw.second;
      exposed = all_reduce;
      if (overlap) exposed = std::max(all_reduce * share, all_reduce - (1.0 - share) * x.bwd_last_chunk);
    } else if (zero == 1) {
      raw = both([&](double n, int group, double bw) {
        return gather_time(n * full.grads, group, bw, step_s) + gather_time(n * full.weights, group, bw, step_s);
      });
      exposed = raw.first + raw.second;
    } else if (zero == 2) {
      const auto scatter = both([&](double n, int group, double bw) { return gather_time(n * full.grads, group, bw, step_s); });
      const auto gather = both([&](double n, int group, double bw) { return gather_time(n * full.weights, group, bw, step_s); });
      const double s = scatter.first + scatter.second;
      const double per_micro_bwd = x.bwd_last_chunk;  // one micro-batch's backward of the rank's last chunk
      const double hidden_each = overlap ? std::max(s * share, s - (1.0 - share) * per_micro_bwd) : s;
      exposed = m * hidden_each + gather.first + gather.second;
      raw = {m * scatter.first + gather.first, m * scatter.second + gather.second};
    } else if (zero == 3 && x.layers > 0) {
      // Per layer and micro-batch: two gathers of its weights and a reduce-scatter of its
      // gradient, against its forward and backward work.
      const double gd = gather_time(big.params.dense * full.weights, D, dp_bw, step_s);
      const double ge = gather_time(big.params.expert * full.weights, ED, edp_bw, step_s);
      const double sd = gather_time(big.params.dense * full.grads, D, dp_bw, step_s);
      const double se = gather_time(big.params.expert * full.grads, ED, edp_bw, step_s);
      const double gather = gd + ge, scatter = sd + se;
      const double per_layer = overlap ? std::max(0.0, gather - big_lt.fwd) + std::max(0.0, gather + scatter - big_lt.bwd - big_lt.recompute)
                                       : 2 * gather + scatter;
      // The first layer's gathers are not hidden: there is nothing before it to hide behind.
      exposed = m * (x.layers * per_layer + (overlap ? gather : 0.0));
      raw = {2 * gd + sd, 2 * ge + se};
    }
    const double expert_part = raw.first + raw.second > 0 ? exposed * raw.second / (raw.first + raw.second) : 0.0;
    if (c.model.tied_embeddings && chunks > 1 && (r == 0 || r == p - 1)) {
      exposed += all_reduce_time(g.vocab_matrix() / weight_shard(c, t) * full.grads, 2, p > 1 && in.pp_crosses_nodes ? hw.net_bw : hw.intra_bw,
                                 step_s);
    }
    if (exposed > dp_time) {
      dp_time = exposed;
      expert_dp_time = expert_part;
    }
  }
  br.dp_comm_s = dp_time;
  br.expert_dp_comm_s = expert_dp_time;
  // Optimizer: AdamW reads and writes weights, master weights, moments and gradients, about 32
  // bytes per (locally updated) parameter, memory-bound; plus the gradient norm. ZeRO updates
  // 1/D of the dense parameters and 1/ed of the routed experts'.
  double updated = 0;
  for (const auto& rm : e.memory) {
    const double dense = rm.params - rm.expert_params;
    updated = std::max(updated, c.parallel.zero >= 1 ? dense / D + rm.expert_params / ED : rm.params);
  }
  br.optimizer_s = updated * 32.0 / hw.mem_bw + 10 * hw.cal.kernel_s;

  br.overhead_s = hw.cal.step_overhead_s;
  e.step_time_s = br.compute_s + br.recompute_s + br.tp_comm_s + br.cp_comm_s + br.moe_a2a_s + br.pp_comm_s + br.dp_comm_s + br.bubble_s +
                  br.optimizer_s + br.overhead_s;
  e.bubble_fraction = e.step_time_s > 0 ? br.bubble_s / e.step_time_s : 0.0;

  // FLOPs per step, whole cluster: every sample's forward (3x with backward), plus recompute;
  // dense and MoE layers each by their own GEMMs.
  const double B = c.train.global_batch;
  const double layers_fwd = g.model_layers_forward_flops();
  const double head_fwd = g.head_forward_flops();
  e.model_flops = B * 3.0 * (layers_fwd + head_fwd);
  const bool flash = c.train.attention == config::Attention::kFlash;
  const double recompute_per_sample = c.train.recompute == Recompute::kFull                ? layers_fwd
                                      : c.train.recompute == Recompute::kSelective && !flash ? g.layers * g.attention_flops(g.seq)
                                                                                           : 0.0;
  e.hardware_flops = e.model_flops + B * recompute_per_sample;
  const double world = static_cast<double>(D) * t * p;
  if (e.step_time_s > 0) {
    e.tflops_per_gpu = e.hardware_flops / e.step_time_s / world / 1e12;
    e.model_tflops_per_gpu = e.model_flops / e.step_time_s / world / 1e12;
    e.tokens_per_s = B * g.seq / e.step_time_s;
  }
  if (hw.peak > 0) {
    e.mfu = e.model_tflops_per_gpu * 1e12 / hw.peak;
    e.hfu = e.tflops_per_gpu * 1e12 / hw.peak;
  }
  if (hw.peak > 0 && in.device.published_mfu > 0) e.published_step_s = e.model_flops / (world * hw.peak * in.device.published_mfu);
  check_plausibility(e, in.device);
  return e;
}

Json estimate_to_json(const Estimate& e) {
  Json j = Json::object();
  j.set("device", e.device);
  j.set("device_memory_bytes", e.device_memory_bytes);
  j.set("params_total", e.params_total);
  j.set("params_active", e.params_active);
  if (e.experts) j.set("moe_imbalance", e.moe_imbalance);
  Json::Array mem;
  for (const auto& r : e.memory) {
    Json x = Json::object();
    x.set("rank", r.rank);
    x.set("pp_rank", r.pp_rank);
    x.set("params", r.params);
    x.set("weights", r.weights);
    x.set("grads", r.grads);
    x.set("optimizer", r.optimizer);
    x.set("activations", r.activations);
    x.set("workspace", r.workspace);
    x.set("total", r.total());
    if (e.experts) {  // parts of the figures above
      x.set("expert_params", r.expert_params);
      x.set("expert_weights", r.expert_weights);
      x.set("expert_grads", r.expert_grads);
      x.set("expert_optimizer", r.expert_optimizer);
      x.set("moe_activations", r.moe_activations);
      x.set("moe_dispatch", r.moe_dispatch);
    }
    mem.push_back(std::move(x));
  }
  j.set("memory", Json(std::move(mem)));
  j.set("peak_memory_bytes", e.peak_memory_bytes);
  j.set("fits", e.fits);
  j.set("step_time_s", e.step_time_s);
  j.set("tflops_per_gpu", e.tflops_per_gpu);
  j.set("model_tflops_per_gpu", e.model_tflops_per_gpu);
  j.set("mfu", e.mfu);
  j.set("hfu", e.hfu);
  j.set("plausible", e.plausible);
  if (e.published_mfu > 0) j.set("published_mfu", e.published_mfu);
  if (!e.plausible) j.set("implausible_because", e.implausible_because);
  j.set("tokens_per_s", e.tokens_per_s);
  j.set("bubble_fraction", e.bubble_fraction);
  Json b = Json::object();
  b.set("compute_s", e.breakdown.compute_s);
  b.set("recompute_s", e.breakdown.recompute_s);
  b.set("tp_comm_s", e.breakdown.tp_comm_s);
  b.set("cp_comm_s", e.breakdown.cp_comm_s);
  b.set("moe_a2a_s", e.breakdown.moe_a2a_s);
  b.set("pp_comm_s", e.breakdown.pp_comm_s);
  b.set("dp_comm_s", e.breakdown.dp_comm_s);
  if (e.experts) b.set("expert_dp_comm_s", e.breakdown.expert_dp_comm_s);
  b.set("bubble_s", e.breakdown.bubble_s);
  b.set("optimizer_s", e.breakdown.optimizer_s);
  b.set("overhead_s", e.breakdown.overhead_s);
  j.set("breakdown", std::move(b));
  j.set("model_flops_per_step", e.model_flops);
  j.set("hardware_flops_per_step", e.hardware_flops);
  return j;
}

std::string format_bytes(double bytes) {
  char buf[32];
  const double gib = bytes / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1.0) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", gib);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / (1024.0 * 1024.0));
  }
  return buf;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s >= 1.0) {
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  } else if (s >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  }
  return buf;
}

std::string estimate_to_text(const Estimate& e, const config::RunConfig& config, double tokens) {
  std::ostringstream o;
  char line[320];
  std::snprintf(line, sizeof line, "Estimate (%s, %s)\n", e.device.c_str(), std::string(config::to_string(config.train.precision)).c_str());
  o << line;
  if (e.params_active < e.params_total) {
    std::snprintf(line, sizeof line, "  parameters %.3g (%.1f B parameters, %.1f B active per token)\n", e.params_total,
                  e.params_total / 1e9, e.params_active / 1e9);
  } else {
    std::snprintf(line, sizeof line, "  parameters %.3g (%.2f B)\n", e.params_total, e.params_total / 1e9);
  }
  o << line;
  o << "  memory per GPU      weights    grads  optimizer  activations  workspace     total\n";
  for (const auto& r : e.memory) {
    std::snprintf(line, sizeof line, "    pp rank %-5d  %9s %8s  %9s  %11s  %9s  %9s%s\n", r.pp_rank, format_bytes(r.weights).c_str(),
                  format_bytes(r.grads).c_str(), format_bytes(r.optimizer).c_str(), format_bytes(r.activations).c_str(),
                  format_bytes(r.workspace).c_str(), format_bytes(r.total()).c_str(), r.pp_rank == e.peak_pp_rank ? "  <- peak" : "");
    o << line;
  }
  if (e.experts && !e.memory.empty()) {
    // The peak rank's routed experts: what expert parallelism splits.
    const auto& r = e.memory[static_cast<size_t>(e.peak_pp_rank)];
    const int ep = std::max(1, config.parallel.ep);
    std::snprintf(line, sizeof line, "  experts on pp rank %d: %d of %d per MoE layer (ep=%d), weights + grads + optimizer %s, activations %s, dispatch buffers %s\n",
                  r.pp_rank, config.model.moe.experts / ep, config.model.moe.experts, ep,
                  format_bytes(r.expert_weights + r.expert_grads + r.expert_optimizer).c_str(), format_bytes(r.moe_activations).c_str(),
                  format_bytes(r.moe_dispatch).c_str());
    o << line;
  }
  std::snprintf(line, sizeof line, "  peak %s of %s: %s\n", format_bytes(e.peak_memory_bytes).c_str(),
                format_bytes(e.device_memory_bytes).c_str(), e.fits ? "fits" : "DOES NOT FIT");
  o << line;
  const auto& b = e.breakdown;
  const std::string cp_part = b.cp_comm_s > 0 ? " + CP " + format_seconds(b.cp_comm_s) : "";
  const std::string ep_part = b.moe_a2a_s > 0 ? " + EP all-to-all " + format_seconds(b.moe_a2a_s) : "";
  std::snprintf(line, sizeof line, "  step %s = compute %s + recompute %s + TP %s%s%s + PP %s + DP %s + bubble %s + optimizer %s\n",
                format_seconds(e.step_time_s).c_str(), format_seconds(b.compute_s).c_str(), format_seconds(b.recompute_s).c_str(),
                format_seconds(b.tp_comm_s).c_str(), cp_part.c_str(), ep_part.c_str(), format_seconds(b.pp_comm_s).c_str(),
                format_seconds(b.dp_comm_s).c_str(), format_seconds(b.bubble_s).c_str(), format_seconds(b.optimizer_s).c_str());
  o << line;
  if (e.experts && e.step_time_s > 0) {
    std::snprintf(line, sizeof line, "       EP all-to-all %.1f%% of the step, experts' DP %s of DP, load imbalance %.2f\n",
                  b.moe_a2a_s / e.step_time_s * 100, format_seconds(b.expert_dp_comm_s).c_str(), e.moe_imbalance);
    o << line;
  }
  if (b.overhead_s > 0) {
    std::snprintf(line, sizeof line, "       + per-step overhead %s (the device's calibration)\n", format_seconds(b.overhead_s).c_str());
    o << line;
  }
  std::snprintf(line, sizeof line, "  %s per GPU (%s model), MFU %.1f%% of %s, %.3g tokens/s\n", format_flop_rate(e.tflops_per_gpu * 1e12).c_str(),
                format_flop_rate(e.model_tflops_per_gpu * 1e12).c_str(), e.mfu * 100, format_flop_rate(e.peak_tflops * 1e12).c_str(),
                e.tokens_per_s);
  o << line;
  if (e.tokens_per_s > 0) {
    // "3.2 days", "5.1 hours", "12 minutes".
    auto duration = [](double days) {
      char b[48];
      if (days >= 2) {
        std::snprintf(b, sizeof b, "%.1f days", days);
      } else if (days * 24 >= 1) {
        std::snprintf(b, sizeof b, "%.1f hours", days * 24);
      } else {
        std::snprintf(b, sizeof b, "%.1f minutes", days * 24 * 60);
      }
      return std::string(b);
    };
    if (tokens > 0) {
      std::snprintf(line, sizeof line, "  %s to train on %.3g tokens\n", duration(e.days_for_tokens(tokens)).c_str(), tokens);
    } else {
      const double run = static_cast<double>(config.train.steps) * config.train.global_batch * config.model.seq_len;
      std::snprintf(line, sizeof line, "  %s for the run's %d steps (%.3g tokens; --tokens N for another count)\n",
                    duration(e.days_for_tokens(run)).c_str(), config.train.steps, run);
    }
    o << line;
  }
  return o.str();
}

}  // namespace stagecraft::plan
