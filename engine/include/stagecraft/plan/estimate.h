// Estimate: what a plan costs — parameters, memory per rank, time per step and its parts,
// throughput — predicted from the model shape, the parallel layout and the device.
//
// The model (estimate.cpp has every formula beside its code, with sources):
//  - memory: weights, gradients and optimizer state by precision and ZeRO stage; activations per
//    layer from Korthikanti et al. 2022 (Table 2) by tensor/sequence parallelism and recompute,
//    times the micro-batches a stage holds under its schedule; the logits of the last stage;
//    a fixed framework workspace on a GPU (CUDA context, cuBLAS and NCCL buffers); on the cpu
//    device, the CPU engine's pipeline and ZeRO buffers (what its workers count in mem_bytes).
//  - time: every GEMM of a layer at its own shape on one rank, as the slower of its math at the
//    device's GEMM efficiency and its memory traffic (thin TP slices and small widths run
//    memory-bound); element-wise work (norms, GELU, softmax, residuals) by memory traffic;
//    ring collectives for TP (intra- or inter-node by where the group sits), DP gradients (the
//    part not hidden behind the last micro-batch's backward) and PP send/recv; the pipeline
//    bubble of the schedule; the optimizer step; a calibrated device's fixed per-step overhead.
//    DP buckets hide behind the last backward as the engine runs them (parallel.overlap_grad_reduce,
//    grad_bucket_mb): a stage whose gradients fit one bucket hides nothing. On the cpu device the
//    ranks of a node share its cores (estimate.cpp, hardware()) and no DP reduction hides.
//  - mixture of experts (model.moe; parallel.ep, expert_tp): an MoE layer's rank holds E / ep
//    routed experts split expert_tp ways, their gradients and optimizer state sharded by ZeRO over
//    the expert-dp ranks (Megatron's distributed optimizer) and reduced over them apart from the
//    dense parameters' dp x cp; the experts' GEMMs run grouped at the tokens each expert receives
//    (tokens x top_k / experts, the busiest ep rank's load scaled by the calibration's
//    moe_imbalance); dispatch and combine all-to-alls over the EP group, two in the forward and two
//    in the backward, over NVLink or the network by where the group sits; the dispatch buffers
//    and the experts' activations by the tokens they receive. Dense layers (model.moe.dense_layers)
//    cost as a dense model's. Formulas in estimate.cpp and docs/planning.md.
// The calibration constants are few and physical (GEMM and memory efficiency, link efficiency,
// collective latency, kernel overhead: config::CostCalibration, the device's) and are fitted once,
// not per configuration; the tests hold the defaults against published runs, and
// plan/calibrate.h fits them to a user's own runs.
//
// Pure and fast (microseconds: `search` evaluates tens of thousands of layouts); thread-safe.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/json.h"
#include "stagecraft/config/device.h"
#include "stagecraft/plan/partition.h"
#include "stagecraft/plan/topology.h"

namespace stagecraft::plan {

// Everything an estimate depends on; estimate_input() fills it from a plan, search from a
// candidate layout without building its topology.
struct EstimateInput {
  config::RunConfig config;       // model, train, parallel options (sequence_parallel, zero)
  config::DeviceSpec device;              // resolved, overrides applied
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int virtual_stages = 1;         // chunks per pp rank (interleaved), else 1
  int micro_batches = 1;          // m
  std::vector<int> chunk_layers;  // layers of each chunk, chunk c on pp rank c mod pp
  int tp_nodes = 1;               // nodes one TP group spans
  int cp_nodes = 1;               // nodes one CP group spans
  int dp_nodes = 1;               // nodes one gradient group (dp x cp) spans
  bool pp_crosses_nodes = false;  // neighbouring stages sit on different nodes
  // The expert layers' mapping (plan/topology.h; 1 without experts): expert parallel and expert
  // tensor-parallel sizes, and the nodes one EP, expert-TP and expert-DP group spans.
  int ep = 1, expert_tp = 1;
  int ep_nodes = 1, expert_tp_nodes = 1, expert_dp_nodes = 1;
};

// Memory of one rank of a pp coordinate, bytes.
struct RankMemory {
  int rank = 0;     // a representative rank (dp = tp = 0 of that pp rank)
  int pp_rank = 0;
  double params = 0;  // parameters held by this rank (after TP sharding)
  double weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0;
  // Mixture of experts, parts of the figures above (0 without experts):
  double expert_params = 0;     // of params: the routed experts it holds (E / ep per MoE layer, / expert_tp)
  double expert_weights = 0, expert_grads = 0, expert_optimizer = 0;  // of weights, grads, optimizer: theirs
  double moe_activations = 0;   // of activations: the routed experts' and the router's, by the tokens its experts receive
  double moe_dispatch = 0;      // of activations: the all-to-alls' buffers and the experts' intermediate gradient, one layer at a time
  double total() const { return weights + grads + optimizer + activations + workspace; }
};

// Seconds per optimizer step, by what the critical path spends them on.
struct StepBreakdown {
  double compute_s = 0;    // forward + backward of every micro-batch on the bottleneck rank
  double recompute_s = 0;  // the forward passes repeated by activation recompute
  double tp_comm_s = 0;    // tensor-parallel collectives (not overlapped)
  double cp_comm_s = 0;    // context-parallel exchanges not hidden behind attention
  double pp_comm_s = 0;    // pipeline send/recv
  double dp_comm_s = 0;    // data-parallel gradient reduction (and ZeRO's gathers) not hidden
  double expert_dp_comm_s = 0;  // of dp_comm_s: the routed experts' share, reduced over expert-dp
  double moe_a2a_s = 0;    // expert parallelism's dispatch and combine all-to-alls (not hidden)
  double bubble_s = 0;     // pipeline fill and drain
  double optimizer_s = 0;  // the optimizer step (memory-bound)
  double overhead_s = 0;   // per step outside the parts (a calibrated device's step_overhead_s)
};

struct Estimate {
  std::string device;
  double device_memory_bytes = 0;
  double params_total = 0;          // the whole model (tied embedding counted once)
  double params_active = 0;         // those one token passes: top_k of a mixture's experts; else params_total
  bool experts = false;             // the model has mixture-of-experts layers
  double moe_imbalance = 1;         // the busiest ep rank's load over the mean used: the calibration's,
                                    // at most model.moe.capacity_factor; 1 with ep 1
  std::vector<RankMemory> memory;   // one entry per pp rank
  double peak_memory_bytes = 0;
  int peak_pp_rank = 0;
  bool fits = true;                 // peak <= device memory
  StepBreakdown breakdown;
  double step_time_s = 0;
  double model_flops = 0;           // per step, without recompute (72 B s L h^2 (...))
  double hardware_flops = 0;        // per step, with recompute
  double tflops_per_gpu = 0;        // hardware FLOPs / step time / GPUs (what Megatron-LM reports)
  double model_tflops_per_gpu = 0;  // model FLOPs / step time / GPUs
  double mfu = 0;                   // model FLOPs utilisation: model TFLOP/s over the device peak
  double hfu = 0;                   // hardware FLOPs utilisation
  double tokens_per_s = 0;
  double bubble_fraction = 0;       // bubble_s / step_time_s
  double peak_tflops = 0;           // the device peak used, for the precision
  // Plausibility: the device's best published MFU (config::DeviceSpec::published_mfu; 0: none,
  // not checked). A prediction above it is implausible, and `implausible_because` gives the
  // model's reason in one line: compute alone faster than the published runs (the GEMM
  // efficiency), or the parts besides compute (TP, PP, DP, bubble, optimizer, each named with its
  // share of the step) too small a share for that MFU.
  double published_mfu = 0;
  bool plausible = true;
  std::string implausible_because;
  // The step time at the published MFU: model FLOPs / (GPUs x peak x published MFU), the same for
  // every layout of one model, batch and cluster (0: no published MFU).
  double published_step_s = 0;
  // The step time with the MFU capped at the published one (step_time_s when plausible): what
  // `search --plausible` ranks by. Every implausible layout of one model, batch and cluster has
  // the same, published_step_s, so their order is decided by ranks_before's tie-breaks.
  double capped_step_time_s() const { return plausible || published_mfu <= 0 ? step_time_s : published_step_s; }

  // Days to train on `tokens` tokens at this throughput.
  double days_for_tokens(double tokens) const { return tokens_per_s > 0 ? tokens / tokens_per_s / 86400.0 : 0.0; }
};

Estimate estimate(const EstimateInput& in);

// Per-layer seconds (forward + backward + recompute + TP collectives, per micro-batch) with the
// embedding on the first stage and head + loss on the last: the costs `balanced` splits by.
StageCostModel time_cost_model(const config::RunConfig& config, const config::DeviceSpec& device, int tp, int tp_nodes);
// Bytes per layer for the balanced tie-break, consistent with estimate()'s memory.
StageMemoryModel memory_model(const config::RunConfig& config, int dp, int tp, int pp, int virtual_stages, int micro_batches);

// Activation bytes one layer stores for one micro-batch on one rank, by precision, TP and
// sequence parallelism, recompute, dropout (model.dropout) and attention kernel
// (Korthikanti et al. 2022, Table 2, element by element). With dropout, standard attention and
// 16 bits it is the paper's s b h (34 + 5 a s / h) at tp = 1 without recompute; without dropout
// (Stagecraft's engine) the masks and the dropout outputs are gone; FlashAttention stores no
// a s^2 b scores.
double layer_activation_bytes(const config::RunConfig& config, int tp);
// The same for layer `layer` (a dense or an MoE layer): an MoE layer's routed experts keep their
// activations by the tokens the rank's experts receive, tokens x top_k / ep of its EP group's x
// `moe_imbalance` (the busiest rank's; 1 with ep 1), and the router its logits.
double layer_activation_bytes(const config::RunConfig& config, int tp, int layer, double moe_imbalance = 1.0);
// Micro-batches whose activations pp rank `pp_rank` holds at its peak: GPipe m, 1F1B
// min(m, pp - pp_rank), interleaved (chunk-micro-batches) Megatron's warm-up + 1.
int inflight_micro_batches(const config::RunConfig& config, int pp_rank, int pp, int virtual_stages, int micro_batches);

// Nodes that group 0 of some axes together spans (plan/topology.h's group_of(0, axes)); cheap,
// no topology built.
int axis_group_nodes(const TopologySpec& spec, const std::vector<config::Axis>& axes);
// Sets the layout fields of `in` (sizes and where the groups sit) from a topology's spec.
void set_layout(EstimateInput& in, const TopologySpec& spec);

Json estimate_to_json(const Estimate& e);
// Readable summary; `tokens` > 0 adds the days to train on that many tokens, else the days of
// the configured run (train.steps).
std::string estimate_to_text(const Estimate& e, const config::RunConfig& config, double tokens = 0);

// "1.5 GiB", "812 MiB".
std::string format_bytes(double bytes);
// "1.23 s", "45.6 ms".
std::string format_seconds(double s);

}  // namespace stagecraft::plan
