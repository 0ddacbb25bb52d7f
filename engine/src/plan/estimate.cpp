// The cost model: memory, step time and throughput of a layout. See estimate.h.
//
// Legend: L layers, h hidden, a heads, f ffn_hidden, s sequence length, V vocabulary,
// b micro-batch, T = b s tokens of a micro-batch, t tensor-parallel size, p pipeline size,
// v virtual stages, d data-parallel size, m micro-batches per step, e bytes per activation
// element (2 for fp16/bf16, 4 for fp32).
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
  // and the ranks time-share the cores: everything a rank does, its math, its memory traffic,
  // its collectives' transfers and their handshakes, runs at cores / ranks of one core's speed.
  // Worked example, configs/tiny-gpt.yaml on 2 cores: 4 ranks of one thread, each at half a
  // core: a quarter of the machine's peak, collectives at half speed.
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
      const double share = rank_cores;
      hw.intra_bw *= share;
      hw.net_bw *= share;
      hw.tp_intra_bw *= share;
      hw.tp_net_bw *= share;
      hw.cal.collective_step_s /= share;
      hw.cal.tp_step_s /= share;
      hw.cal.kernel_s /= share;
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
  double fwd_flops = 0, recompute_flops = 0;  // per micro-batch on this rank
};

// Where a layout's groups sit, for the collectives' bandwidths.
struct Links {
  int tp = 1, tp_nodes = 1, cp = 1, cp_nodes = 1;
};

LayerTimes layer_times(const config::RunConfig& c, const Links& links, const Hw& hw_in) {
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
  double gemm = 0, attn_gemm = 0;
  if (one_d) {
    for (const auto& gm : g.layer_gemms()) gemm += gm.row_parallel ? gemm_time(T, gm.n, gm.k / t, 1, hw) : gemm_time(T, gm.n / t, gm.k, 1, hw);
  } else {
    const double q = std::sqrt(weight_shard(c, tp));
    const double rows = T / (c.parallel.tp_mode == TpMode::k3d ? std::cbrt(t) * std::cbrt(t) : q);
    const double w = c.parallel.tp_mode == TpMode::k3d ? std::cbrt(t) : q;
    for (const auto& gm : g.layer_gemms()) gemm += gemm_time(rows, gm.n / w, gm.k / w, 1, hw);
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
  const model::LayerTraffic traffic = g.layer_traffic();
  const double elem = (T * traffic.replicated * replicated + T * traffic.sharded / t) * hw.e + (dropout ? 2 * T * h * replicated : 0.0);
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
  lt.fwd_flops = b * g.layer_forward_flops() / t / cp;
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
      for (const auto& gm : g.layer_gemms()) weights += gm.n * gm.k;
      const double blocks = (T * h + T * g.ffn + weights) / (q * q) * hw.e;
      per_layer = 3 * 2 * gather_time(blocks, static_cast<int>(std::lround(q)), tp_bw, hw.cal.tp_step_s);
    }
    lt.tp_comm = per_layer;
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
  Share parts[] = {{"TP", b.tp_comm_s},  {"CP", b.cp_comm_s},         {"PP", b.pp_comm_s},      {"DP", b.dp_comm_s},
                   {"bubble", b.bubble_s}, {"optimizer", b.optimizer_s}, {"overhead", b.overhead_s}};
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
PerParam per_param(const config::RunConfig& c, int dp, int zero) {  // dp: the data-parallel size
  PerParam pp{};
  switch (c.train.precision) {
    case Precision::kFp32: pp = {4, 4, 8}; break;
    case Precision::kFp16: pp = {2, 2, 12}; break;
    case Precision::kBf16: pp = {2, 4, 12}; break;
  }
  const double d = static_cast<double>(std::max(1, dp)) * std::max(1, c.parallel.cp);
  if (zero >= 1) pp.optimizer /= d;
  if (zero >= 2) pp.grads /= d;
  if (zero >= 3) pp.weights /= d;
  return pp;
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
// 16 bits with f = 4h.
double layer_activation_bytes(const config::RunConfig& c, int tp) {
  const auto g = model::ModelDesc::from(c.model);
  // Context parallelism keeps s / cp tokens of each sequence on a rank, their scores against all s keys.
  const double cp = std::max(1, c.parallel.cp);
  const double h = g.hidden, a = g.heads, s = g.seq, b = c.train.micro_batch, T = b * s / cp, t = tp;
  const double e = c.train.precision == Precision::kFp32 ? 4.0 : 2.0;
  const bool one_d = c.parallel.tp_mode == TpMode::k1d;
  const bool sp = c.parallel.sequence_parallel && tp > 1 && one_d;
  const bool dropout = c.model.dropout > 0;
  const double rep = one_d && !sp ? 1.0 : 1.0 / t;  // share of a "replicated" tensor a rank holds
  const model::LayerActivations kept = g.layer_activations();
  const double rest = (kept.replicated * rep + kept.sharded / t) * T * e + (dropout ? 2 * T * h * rep : 0.0);
  // FlashAttention stores no scores: only the softmax statistics, one fp32 per (head, token).
  const double core = c.train.attention == config::Attention::kFlash ? 4.0 * a * s / cp * b / t
                                                                      : a * s / cp * s * b / t * (dropout ? 2 * e + 1 : e);
  switch (c.train.recompute) {
    case Recompute::kNone: return rest + core;
    case Recompute::kSelective: return rest + (c.train.attention == config::Attention::kFlash ? core : 0.0);
    case Recompute::kFull: return T * h * e * rep;   // the layer input only (2 s b h at 16 bits)
  }
  return rest + core;
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
}

StageCostModel time_cost_model(const config::RunConfig& config, const config::DeviceSpec& device, int tp, int tp_nodes) {
  EstimateInput in;
  in.config = config;
  in.device = device;
  const Hw hw = hardware(in);
  Links links;
  links.tp = tp;
  links.tp_nodes = tp_nodes;
  links.cp = config.parallel.cp;
  const LayerTimes lt = layer_times(config, links, hw);
  const EndTimes et = end_times(config, links, hw);
  StageCostModel m;
  m.layer.assign(static_cast<size_t>(std::max(0, config.model.layers)), lt.fwd + lt.bwd + lt.recompute + lt.tp_comm + lt.cp_comm);
  m.first = et.first;
  m.last = et.last;
  return m;
}

StageMemoryModel memory_model(const config::RunConfig& config, int dp, int tp, int pp, int virtual_stages, int micro_batches) {
  const auto g = model::ModelDesc::from(config.model);
  const PerParam bpp = per_param(config, dp, config.parallel.zero);
  const double per = bpp.weights + bpp.grads + bpp.optimizer;
  const double shard = weight_shard(config, tp);
  const bool one_d = config.parallel.tp_mode == TpMode::k1d;
  StageMemoryModel m;
  const int chunks = pp * virtual_stages;
  // Layer by layer: a mixture-of-experts layer holds every expert (expert parallelism, which would
  // split them, is not modelled yet), its first dense_layers the dense MLP.
  m.layer_static.resize(static_cast<size_t>(std::max(0, config.model.layers)));
  for (int i = 0; i < config.model.layers; ++i) {
    const bool same = i > 0 && g.moe_layer(i) == g.moe_layer(i - 1);
    m.layer_static[static_cast<size_t>(i)] =
        same ? m.layer_static[static_cast<size_t>(i - 1)] : per * (one_d ? g.layer_params_1d(tp, i) : g.layer_params(i) / shard);
  }
  m.layer_activation.assign(static_cast<size_t>(std::max(0, config.model.layers)), layer_activation_bytes(config, tp));
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
  const auto g = model::ModelDesc::from(c.model);
  const Hw hw = hardware(in);
  const int p = std::max(1, in.pp), v = std::max(1, in.virtual_stages), m = std::max(1, in.micro_batches);
  const int t = std::max(1, in.tp), d = std::max(1, in.dp), cp = std::max(1, in.cp);
  const int D = d * cp;  // the gradient group over model::kReplicaAxes: dp x cp ranks hold the same weights
  const int chunks = p * v;
  const double T = static_cast<double>(c.train.micro_batch) * g.seq / cp;
  const PerParam full = per_param(c, 1, 0);  // bytes per parameter before ZeRO shards them
  Estimate e;
  e.device = in.device.name;
  e.device_memory_bytes = in.device.memory_bytes();
  e.params_total = g.total_params();
  e.params_active = g.active_params();
  e.peak_tflops = hw.peak / 1e12;

  // Memory, rank by rank.
  const StageMemoryModel mem = memory_model(c, d, t, p, v, m);
  const PerParam bpp = per_param(c, d, c.parallel.zero);
  const double per = bpp.weights + bpp.grads + bpp.optimizer;
  const double gpu_workspace = hw.cal.gpu_workspace_gib * 1024.0 * 1024.0 * 1024.0;
  // Working set of full recompute: one layer's activations rebuilt at a time.
  config::RunConfig no_recompute = c;
  no_recompute.train.recompute = Recompute::kNone;
  const double recompute_working = c.train.recompute == Recompute::kFull ? layer_activation_bytes(no_recompute, t) : 0.0;
  // Logits of the last stage for one micro-batch: 16-bit (or fp32) logits and the fp32 copy the
  // loss works on.
  const double logits = T * g.vocab / (t > 1 ? weight_shard(c, t) : 1.0) * ((c.train.precision == Precision::kFp32 ? 4.0 : 2.0) + 4.0);
  e.memory.resize(static_cast<size_t>(p));
  std::vector<int> rank_layers(static_cast<size_t>(p), 0);
  int layer = 0;
  for (int ch = 0; ch < chunks && ch < static_cast<int>(in.chunk_layers.size()); ++ch) {
    const int r = ch % p;
    const int n = in.chunk_layers[static_cast<size_t>(ch)];
    auto& rm = e.memory[static_cast<size_t>(r)];
    double stat = 0, act = 0;
    for (int i = 0; i < n && layer < c.model.layers; ++i, ++layer) {
      stat += mem.layer_static[static_cast<size_t>(layer)];
      act += mem.layer_activation[static_cast<size_t>(layer)] * mem.inflight[static_cast<size_t>(ch)];
    }
    if (ch == 0) stat += mem.first;
    if (ch == chunks - 1) {
      stat += mem.last;
      act += logits;
    }
    rm.params += stat / per;
    rm.activations += act;
    rank_layers[static_cast<size_t>(r)] += n;
  }
  for (int r = 0; r < p; ++r) {
    auto& rm = e.memory[static_cast<size_t>(r)];
    rm.pp_rank = r;
    rm.weights = rm.params * bpp.weights;
    rm.grads = rm.params * bpp.grads;
    rm.optimizer = rm.params * bpp.optimizer;
    // ZeRO-2 and 3 hold a gradient bucket unsharded until its reduce-scatter, and a second
    // filling behind it; ZeRO-3 gathers a layer's weights before its forward and backward, the
    // next one prefetched, and holds a layer's whole gradient until it is reduce-scattered.
    const double layer_params = rank_layers[static_cast<size_t>(r)] > 0 && c.model.layers > 0 ? mem.layer_static.back() / per : 0.0;
    if (D > 1 && c.parallel.zero >= 2) {
      rm.grads += std::min(2.0 * c.parallel.grad_bucket_bytes(), rm.params * full.grads);
    }
    if (D > 1 && c.parallel.zero >= 3) rm.weights += 2.0 * layer_params * full.weights;
    rm.activations += rank_layers[static_cast<size_t>(r)] > 0 ? recompute_working : 0.0;
    rm.workspace = in.device.is_cpu ? cpu_engine_buffers(c, r, p, v, m, d, rm.params, in.chunk_layers) : gpu_workspace;
    if (rm.total() > e.peak_memory_bytes) {
      e.peak_memory_bytes = rm.total();
      e.peak_pp_rank = r;
    }
  }
  e.fits = e.peak_memory_bytes <= e.device_memory_bytes;

  // Time of one micro-batch on each pp rank.
  Links links;
  links.tp = t;
  links.tp_nodes = in.tp_nodes;
  links.cp = cp;
  links.cp_nodes = in.cp_nodes;
  const LayerTimes lt = layer_times(c, links, hw);
  const EndTimes et = end_times(c, links, hw);
  struct RankTime {
    double compute = 0, recompute = 0, tp = 0, cp = 0, bwd_last_chunk = 0, layers = 0;
  };
  std::vector<RankTime> rt(static_cast<size_t>(p));
  for (int ch = 0; ch < chunks && ch < static_cast<int>(in.chunk_layers.size()); ++ch) {
    auto& x = rt[static_cast<size_t>(ch % p)];
    const double n = in.chunk_layers[static_cast<size_t>(ch)];
    x.compute += n * (lt.fwd + lt.bwd);
    x.recompute += n * lt.recompute;
    x.tp += n * lt.tp_comm;
    x.cp += n * lt.cp_comm;
    x.layers += n;
    if (ch == 0) x.compute += et.first;
    if (ch == chunks - 1) x.compute += et.last;
    if (ch % p == ch) x.bwd_last_chunk = n * (lt.bwd + lt.recompute);  // the chunk whose backward ends the step
  }
  int bottleneck = 0;
  for (int r = 1; r < p; ++r) {
    const auto& a = rt[static_cast<size_t>(r)];
    const auto& b = rt[static_cast<size_t>(bottleneck)];
    if (a.compute + a.recompute + a.tp + a.cp > b.compute + b.recompute + b.tp + b.cp) bottleneck = r;
  }
  const RankTime& bt = rt[static_cast<size_t>(bottleneck)];
  const double per_micro = bt.compute + bt.recompute + bt.tp + bt.cp;
  StepBreakdown& br = e.breakdown;
  br.compute_s = m * bt.compute;
  br.recompute_s = m * bt.recompute;
  br.tp_comm_s = m * bt.tp;
  br.cp_comm_s = m * bt.cp;
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
  // On the cpu device nothing hides: Gloo's copies and sums need the cores the backward keeps
  // busy (tests/bench/bench_grad_overlap.sh measured no gain with 2 ranks on 2 cores, and a loss
  // with small buckets). Tied embeddings with p > 1 add the first/last stage all-reduce of the
  // word embedding gradient, after the backward.
  double dp_time = 0;
  const double dp_bw = in.dp_nodes > 1 ? hw.net_bw : hw.intra_bw;
  const double step_s = hw.cal.collective_step_s;
  const int zero = D > 1 ? c.parallel.zero : 0;
  const double one_layer_params = c.model.layers > 0 ? mem.layer_static.back() / per : 0.0;  // the largest: an MoE layer's
  for (int r = 0; r < p; ++r) {
    const double params = e.memory[static_cast<size_t>(r)].params;
    const double grad_bytes = params * full.grads;
    const auto& x = rt[static_cast<size_t>(r)];
    const double share = grad_bytes > 0 ? std::min(1.0, c.parallel.grad_bucket_bytes() / grad_bytes) : 1.0;
    const bool overlap = c.parallel.overlap_grad_reduce && !in.device.is_cpu;
    double exposed = 0;
    if (zero == 0 && D > 1) {
      const double all_reduce = all_reduce_time(grad_bytes, D, dp_bw, step_s);
      exposed = all_reduce;
      if (overlap) exposed = std::max(all_reduce * share, all_reduce - (1.0 - share) * x.bwd_last_chunk);
    } else if (zero == 1) {
      exposed = gather_time(grad_bytes, D, dp_bw, step_s) + gather_time(params * full.weights, D, dp_bw, step_s);
    } else if (zero == 2) {
      const double scatter = gather_time(grad_bytes, D, dp_bw, step_s);
      const double per_micro_bwd = x.bwd_last_chunk;  // one micro-batch's backward of the rank's last chunk
      const double hidden_each = overlap ? std::max(scatter * share, scatter - (1.0 - share) * per_micro_bwd) : scatter;
      exposed = m * hidden_each + gather_time(params * full.weights, D, dp_bw, step_s);
    } else if (zero == 3 && x.layers > 0) {
      // Per layer and micro-batch: two gathers of its weights and a reduce-scatter of its
      // gradient, against its forward and backward work.
      const double gather = gather_time(one_layer_params * full.weights, D, dp_bw, step_s);
      const double scatter = gather_time(one_layer_params * full.grads, D, dp_bw, step_s);
      const double per_layer = overlap ? std::max(0.0, gather - lt.fwd) + std::max(0.0, gather + scatter - lt.bwd - lt.recompute)
                                       : 2 * gather + scatter;
      // The first layer's gathers are not hidden: there is nothing before it to hide behind.
      exposed = m * (x.layers * per_layer + (overlap ? gather : 0.0));
    }
    if (c.model.tied_embeddings && chunks > 1 && (r == 0 || r == p - 1)) {
      exposed += all_reduce_time(g.vocab_matrix() / weight_shard(c, t) * full.grads, 2, p > 1 && in.pp_crosses_nodes ? hw.net_bw : hw.intra_bw,
                                 step_s);
    }
    dp_time = std::max(dp_time, exposed);
  }
  br.dp_comm_s = dp_time;
  // Optimizer: AdamW reads and writes weights, master weights, moments and gradients, about 32
  // bytes per (locally updated) parameter, memory-bound; plus the gradient norm.
  double max_params = 0;
  for (const auto& rm : e.memory) max_params = std::max(max_params, rm.params);
  const double updated = c.parallel.zero >= 1 ? max_params / D : max_params;
  br.optimizer_s = updated * 32.0 / hw.mem_bw + 10 * hw.cal.kernel_s;

  br.overhead_s = hw.cal.step_overhead_s;
  e.step_time_s = br.compute_s + br.recompute_s + br.tp_comm_s + br.cp_comm_s + br.pp_comm_s + br.dp_comm_s + br.bubble_s + br.optimizer_s +
                  br.overhead_s;
  e.bubble_fraction = e.step_time_s > 0 ? br.bubble_s / e.step_time_s : 0.0;

  // FLOPs per step, whole cluster: every sample's forward (3x with backward), plus recompute.
  const double B = c.train.global_batch;
  const double layer_fwd = g.layer_forward_flops();
  const double head_fwd = g.head_forward_flops();
  e.model_flops = B * 3.0 * (g.layers * layer_fwd + head_fwd);
  const bool flash = c.train.attention == config::Attention::kFlash;
  const double recompute_per_sample = c.train.recompute == Recompute::kFull                ? g.layers * layer_fwd
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
  b.set("pp_comm_s", e.breakdown.pp_comm_s);
  b.set("dp_comm_s", e.breakdown.dp_comm_s);
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
  char line[200];
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
  std::snprintf(line, sizeof line, "  peak %s of %s: %s\n", format_bytes(e.peak_memory_bytes).c_str(),
                format_bytes(e.device_memory_bytes).c_str(), e.fits ? "fits" : "DOES NOT FIT");
  o << line;
  const auto& b = e.breakdown;
  const std::string cp_part = b.cp_comm_s > 0 ? " + CP " + format_seconds(b.cp_comm_s) : "";
  std::snprintf(line, sizeof line, "  step %s = compute %s + recompute %s + TP %s%s + PP %s + DP %s + bubble %s + optimizer %s\n",
                format_seconds(e.step_time_s).c_str(), format_seconds(b.compute_s).c_str(), format_seconds(b.recompute_s).c_str(),
                format_seconds(b.tp_comm_s).c_str(), cp_part.c_str(), format_seconds(b.pp_comm_s).c_str(),
                format_seconds(b.dp_comm_s).c_str(), format_seconds(b.bubble_s).c_str(), format_seconds(b.optimizer_s).c_str());
  o << line;
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
