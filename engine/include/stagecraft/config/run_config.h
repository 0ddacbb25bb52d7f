// RunConfig: one training run as a plain value, the parsed form of a Stagecraft YAML document.
//
// Every field has its default written beside it; a YAML file may leave out everything but the
// model shape (model.layers, model.hidden, model.heads). The loader (config_io.h) fills this
// struct and validates it; nothing here checks consistency. Enum spellings are the YAML ones and
// are converted with to_string()/parse_*() below.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/core/enum_names.h"

namespace stagecraft::config {

enum class TpMode { k1d, k2d, k2p5d, k3d };
enum class Schedule { kGpipe, k1f1b, kInterleaved };
enum class PartitionKind { kUniform, kBalanced, kExplicit };   // YAML: "uniform", "balanced" or a list
enum class Recompute { kNone, kSelective, kFull };
enum class Precision { kFp32, kFp16, kBf16 };
enum class Attention { kStandard, kFlash };
enum class Backend { kCpu, kCuda };
enum class Comm { kAuto, kNccl, kGloo };  // comm: auto = nccl with backend cuda, gloo with cpu
// The parallel axes. A rank's coordinates on every axis follow from `parallel.order` (plan/topology.h);
// kAxisCount sizes the arrays indexed by axis. A new axis is a value here, a name in kAxisNames, its
// place in kDefaultOrder and what it shards (model/model.h sharding_of).
enum class Axis { kTp, kDp, kPp, kCp };
inline constexpr int kAxisCount = 4;
enum class CpComm { kRing, kAllToAll };  // parallel.cp_comm: K/V ring (Megatron) or Ulysses' head exchange
enum class MetricsFormat { kAuto, kMegatron, kDeepspeed, kNanogpt, kJsonl, kTorchtitan, kNone };  // launch.metrics
enum class LaunchFramework { kNone, kMegatron, kDeepspeed, kTorchtitan };
enum class DataDtype { kAuto, kUint16, kUint32 };  // train.data_dtype: a .bin file's token width                       // launch.framework
enum class MoeRouter { kSoftmaxTopk };  // model.moe.router: softmax over every expert, then the top k
// train.kernels: which of the CUDA backend's kernels a run takes where it has more than one for a
// kind of work (docs/gpus.md). auto: the backend chooses by the GPU and the shape.
enum class FlashKernels { kAuto, kMmaSync, kWgmma, kCudaCores };  // the fused attention's cores
enum class GemmBias { kAuto, kCublasLt, kSeparate };              // 16-bit GEMMs' bias (and GELU)
enum class NormWarps { kAuto, kFour, kEight };                    // layernorm's backward, warps a block

// Every enum's YAML spelling, in the order choices are listed ("gpipe, 1f1b or interleaved").
inline constexpr EnumName<TpMode> kTpModeNames[] = {
    {TpMode::k1d, "1d"}, {TpMode::k2d, "2d"}, {TpMode::k2p5d, "2.5d"}, {TpMode::k3d, "3d"}};
inline constexpr EnumName<Schedule> kScheduleNames[] = {
    {Schedule::kGpipe, "gpipe"}, {Schedule::k1f1b, "1f1b"}, {Schedule::kInterleaved, "interleaved"}};
inline constexpr EnumName<PartitionKind> kPartitionKindNames[] = {
    {PartitionKind::kUniform, "uniform"}, {PartitionKind::kBalanced, "balanced"}, {PartitionKind::kExplicit, "explicit"}};
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}};
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::kFp32, "fp32"}, {Precision::kFp16, "fp16"}, {Precision::kBf16, "bf16"}};
inline constexpr EnumName<Attention> kAttentionNames[] = {{Attention::kStandard, "standard"}, {Attention::kFlash, "flash"}};
inline constexpr EnumName<Backend> kBackendNames[] = {{Backend::kCpu, "cpu"}, {Backend::kCuda, "cuda"}};
inline constexpr EnumName<Comm> kCommNames[] = {{Comm::kAuto, "auto"}, {Comm::kNccl, "nccl"}, {Comm::kGloo, "gloo"}};
inline constexpr EnumName<Axis> kAxisNames[] = {{Axis::kTp, "tp"}, {Axis::kCp, "cp"}, {Axis::kDp, "dp"}, {Axis::kPp, "pp"}};
inline constexpr EnumName<CpComm> kCpCommNames[] = {{CpComm::kRing, "ring"}, {CpComm::kAllToAll, "all_to_all"}};
// Megatron-Core's order of the axes it shares with Stagecraft (tp-cp-ep-dp-pp without ep).
inline constexpr Axis kDefaultOrder[] = {Axis::kTp, Axis::kCp, Axis::kDp, Axis::kPp};
inline constexpr EnumName<MetricsFormat> kMetricsFormatNames[] = {
    {MetricsFormat::kAuto, "auto"},       {MetricsFormat::kMegatron, "megatron"}, {MetricsFormat::kDeepspeed, "deepspeed"},
    {MetricsFormat::kNanogpt, "nanogpt"}, {MetricsFormat::kJsonl, "jsonl"},       {MetricsFormat::kTorchtitan, "torchtitan"},
    {MetricsFormat::kNone, "none"}};
inline constexpr EnumName<DataDtype> kDataDtypeNames[] = {
    {DataDtype::kAuto, "auto"}, {DataDtype::kUint16, "uint16"}, {DataDtype::kUint32, "uint32"}};
inline constexpr EnumName<MoeRouter> kMoeRouterNames[] = {{MoeRouter::kSoftmaxTopk, "softmax_topk"}};
inline constexpr EnumName<FlashKernels> kFlashKernelsNames[] = {
    {FlashKernels::kAuto, "auto"}, {FlashKernels::kMmaSync, "mma_sync"}, {FlashKernels::kWgmma, "wgmma"}, {FlashKernels::kCudaCores, "cuda_cores"}};
inline constexpr EnumName<GemmBias> kGemmBiasNames[] = {{GemmBias::kAuto, "auto"}, {GemmBias::kCublasLt, "cublaslt"}, {GemmBias::kSeparate, "separate"}};
inline constexpr EnumName<NormWarps> kNormWarpsNames[] = {{NormWarps::kAuto, "auto"}, {NormWarps::kFour, "4"}, {NormWarps::kEight, "8"}};
inline constexpr EnumName<LaunchFramework> kLaunchFrameworkNames[] = {
    {LaunchFramework::kNone, "none"}, {LaunchFramework::kMegatron, "megatron"}, {LaunchFramework::kDeepspeed, "deepspeed"},
    {LaunchFramework::kTorchtitan, "torchtitan"}};

// The name of a value (from the tables above).
std::string_view to_string(TpMode v);
std::string_view to_string(Schedule v);
std::string_view to_string(PartitionKind v);
std::string_view to_string(Recompute v);
std::string_view to_string(Precision v);
std::string_view to_string(Attention v);
std::string_view to_string(Backend v);
std::string_view to_string(Comm v);
std::string_view to_string(Axis v);
std::string_view to_string(CpComm v);
std::string_view to_string(MetricsFormat v);
std::string_view to_string(LaunchFramework v);
std::string_view to_string(DataDtype v);
std::string_view to_string(FlashKernels v);
std::string_view to_string(GemmBias v);
std::string_view to_string(NormWarps v);
// The value of a name, or nullopt for a name the table does not list.
std::optional<TpMode> parse_tp_mode(std::string_view s);
std::optional<Schedule> parse_schedule(std::string_view s);
std::optional<Recompute> parse_recompute(std::string_view s);
std::optional<Precision> parse_precision(std::string_view s);
std::optional<Attention> parse_attention(std::string_view s);
std::optional<Backend> parse_backend(std::string_view s);

// `parallel.order` from its text, axes innermost first joined by '-': tp, dp and pp named once
// each; cp once or not at all (then it sits right after tp, where Megatron-Core puts it); "ep"
// names Megatron-Core's expert axis, which the expert layers place right after cp (plan/topology.h),
// so it is accepted there and passed over. nullopt for any other text. order_text() writes every
// axis.
std::optional<std::vector<Axis>> parse_order(std::string_view text);
std::string order_text(const std::vector<Axis>& order);
// An order with every axis once: the axes it lacks are placed as parse_order places them.
// Orders that name an axis twice or an unknown value come back empty.
std::vector<Axis> complete_order(const std::vector<Axis>& order);

// One line of a hostfile: `host slots=N`.
struct HostSlots {
  std::string host;
  int slots = 0;
  bool operator==(const HostSlots&) const = default;
};

// Device figures written in the config (`cluster.device: {base: A100-80GB, memory_gib: 40}`);
// unset fields come from the base device. Units as in plan/device.h.
struct DeviceFields {
  std::string name;  // a new device's name (no base), or a label for the changed base device
  std::optional<double> memory_gib, fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops, memory_gbps;
  std::string profile;  // a device profile file (config/device_profile.h): the cost model's constants

  bool empty() const {
    return name.empty() && profile.empty() && !memory_gib && !fp32_tflops && !tf32_tflops && !fp16_tflops && !bf16_tflops && !memory_gbps;
  }
  bool operator==(const DeviceFields&) const = default;
};

struct ClusterConfig {
  int nodes = 1;                    // machines; equals hosts.size() when hosts are given
  int gpus_per_node = 8;            // ranks per machine ("slots"); for backend cpu, processes
  std::string device = "A100-80GB"; // a name from `stagecraft-cli devices`; in the mapping form
                                    // its `base`, empty for a device defined from scratch
  DeviceFields device_fields;       // the mapping form's other keys; empty for a plain name
  double intra_node_gbps = 0;       // one GPU's link to its node peers, Gb/s; 0 = the device's
  double inter_node_gbps = 0;       // one node's network, Gb/s (8 x 200 HDR = 1600); 0 = the device's
  std::vector<HostSlots> hosts;     // optional; when given they define nodes and gpus_per_node
  bool operator==(const ClusterConfig&) const = default;
};

// A mixture-of-experts MLP (model.moe; llama only): every layer after the first `dense_layers` has
// `experts` SwiGLU experts of ffn_hidden, of which the router picks top_k per token, and
// `shared_experts` always-on ones. experts 0: no MoE, every layer dense.
struct MoeConfig {
  int experts = 0;                  // routed experts per MoE layer; 0 = no MoE
  int top_k = 2;                    // experts each token is sent to
  int ffn_hidden = 0;               // one expert's MLP width; 0 means model.ffn_hidden
  int shared_experts = 0;           // always-on experts per MoE layer
  int shared_ffn_hidden = 0;        // one shared expert's width; 0 means moe.ffn_hidden
  int dense_layers = 0;             // the first layers keep the dense MLP of model.ffn_hidden
  MoeRouter router = MoeRouter::kSoftmaxTopk;
  bool norm_topk = true;            // renormalise the top-k routing weights to sum to 1 (Mixtral)
  double aux_loss = 0.01;           // load-balancing loss weight (Switch / Mixtral form)
  double capacity_factor = 0.0;     // 0: dropless; >= 1: a capacity per expert, the overflow dropped

  bool enabled() const { return experts > 0; }
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  std::string arch = "gpt2";    // gpt2 (GPT-2 family; "gpt" is its older name) or llama (Llama,
                                // Mistral, Qwen2: RMSNorm, SwiGLU, RoPE, GQA); model/model.h
  int layers = 0;               // transformer blocks; required
  int hidden = 0;               // model width h; required
  int heads = 0;                // attention (query) heads a; required; divides hidden
  int kv_heads = 0;             // key/value heads (grouped-query attention); 0 means heads
  int ffn_hidden = 0;           // MLP width; 0 means 4 x hidden
  int seq_len = 1024;           // tokens per sample s
  int vocab = 50257;            // vocabulary size V (GPT-2's)
  bool tied_embeddings = true;  // LM head shares the token embedding (GPT-2, BERT)
  double rope_theta = 10000.0;  // llama: the rotary positions' base
  double norm_eps = 1e-5;       // the norms' epsilon (GPT-2's LayerNorm: 1e-5 only)
  bool qkv_bias = false;        // llama: biases on q, k and v (Qwen2)
  int head_dim = 0;             // llama: channels per head; 0 means hidden / heads (Qwen3 decouples
                                // them: heads x head_dim need not be hidden)
  bool qk_norm = false;         // llama: RMSNorm over each head of q and k before RoPE (Qwen3)
  MoeConfig moe;                // llama: mixture-of-experts MLP; experts 0 = dense
  double dropout = 0.0;         // attention and hidden dropout probability (Megatron's default
                                // is 0.1); the cost model counts its masks and passes.
                                // Stagecraft's engine trains without dropout.

  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int head_size() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  int moe_ffn() const { return moe.ffn_hidden > 0 ? moe.ffn_hidden : ffn(); }
  int moe_shared_ffn() const { return moe.shared_ffn_hidden > 0 ? moe.shared_ffn_hidden : moe_ffn(); }
  bool llama() const { return arch == "llama"; }
  bool operator==(const ModelConfig&) const = default;
};

struct ParallelConfig {
  int dp = 0;                          // data parallel size; 0 = auto = world / (tp x cp x pp)
  int tp = 1;                          // tensor parallel size (the whole TP group, all modes)
  int pp = 1;                          // pipeline parallel size (number of pp ranks)
  TpMode tp_mode = TpMode::k1d;        // Megatron 1D, or Colossal-AI 2D / 2.5D / 3D
  int tp_depth = 1;                    // 2.5d only: depth d in tp = N^2 x d
  int cp = 1;                          // context parallel size: each sequence split over cp ranks
  CpComm cp_comm = CpComm::kRing;      // how attention sees the whole sequence under cp
  int ep = 1;                          // expert parallel size: each MoE layer's experts split over ep
                                       // ranks (Megatron-Core's parallel folding: the expert layers map
                                       // the tp x cp x dp ranks of a stage as expert_tp x ep x expert-dp)
  int expert_tp = 1;                   // expert tensor parallel size: each expert's MLP split over this
                                       // many ranks (Megatron-Core's expert_tensor_parallel_size)
  std::vector<Axis> order = {std::begin(kDefaultOrder), std::end(kDefaultOrder)};  // innermost first
  bool sequence_parallel = false;      // Megatron sequence parallelism (needs tp > 1, 1d)
  int zero = 0;                        // sharded data parallelism over dp x cp: 1 optimizer state,
                                       // 2 also gradients, 3 also parameters (ZeRO / FSDP)
  bool overlap_grad_reduce = true;     // DP gradient buckets start during the backward (zero 0); zero 2
                                       // and 3 reduce-scatter (and gather) in the background
  double grad_bucket_mb = 25;          // MB of gradients per DP bucket

  bool dp_auto() const { return dp == 0; }
  double grad_bucket_bytes() const { return grad_bucket_mb * 1024.0 * 1024.0; }
  bool operator==(const ParallelConfig&) const = default;
};

struct PipelineConfig {
  Schedule schedule = Schedule::k1f1b;
  int virtual_stages = 1;              // model chunks per pp rank (interleaved only)
  PartitionKind partition = PartitionKind::kUniform;
  std::vector<int> stage_ids;          // kExplicit: one chunk id per layer (LiBai's
                                       // custom_pipeline_stage_id); empty otherwise
  std::string costs = "model";         // what `balanced` splits by: the cost model's per-layer times
                                       // (a calibrated device's when cluster.device has a profile), or
                                       // "run:ID", the times a recorded run measured
                                       // (launch/run_measurement.h measured_layer_costs)
  bool operator==(const PipelineConfig&) const = default;
};

// The run id of pipeline.costs = "run:ID"; 0 for "model" or anything else.
inline int64_t pipeline_costs_run(const PipelineConfig& p) {
  if (p.costs.rfind("run:", 0) != 0) return 0;
  int64_t id = 0;
  for (size_t i = 4; i < p.costs.size(); ++i) {
    const char ch = p.costs[i];
    if (ch < '0' || ch > '9' || id > (int64_t{1} << 50)) return 0;
    id = id * 10 + (ch - '0');
  }
  return id;
}

// train.kernels: the CUDA backend's kernel paths (docs/gpus.md). Each auto lets the backend choose
// by the GPU and the shape; another value asks for that path, and a run that cannot take it fails
// at its start with a line naming the key. The paths a run took are in its start events.
struct KernelConfig {
  FlashKernels flash = FlashKernels::kAuto;  // mma_sync, wgmma (Hopper's warpgroups) or cuda_cores (fp32)
  GemmBias gemm_bias = GemmBias::kAuto;      // cublaslt (its epilogue) or separate (a bias kernel after)
  NormWarps layernorm_backward_warps = NormWarps::kAuto;  // 4 or 8 warps a block
  bool all_auto() const { return *this == KernelConfig{}; }
  bool operator==(const KernelConfig&) const = default;
};

struct TrainConfig {
  int global_batch = 8;           // samples per optimizer step, over all DP replicas
  int micro_batch = 1;            // samples per micro-batch per DP replica
  int steps = 100;                // optimizer steps
  double lr = 3.0e-4;             // peak learning rate (AdamW)
  double min_lr = 0.0;            // floor of the cosine decay
  int warmup_steps = 0;           // linear warm-up steps
  double weight_decay = 0.0;      // AdamW decoupled weight decay
  double beta1 = 0.9;             // AdamW
  double beta2 = 0.95;            // AdamW
  double grad_clip = 1.0;         // clip by global gradient norm; 0 disables
  Precision precision = Precision::kFp32;
  bool tf32 = false;              // fp32 GEMMs on a GPU's TF32 tensor cores (inputs rounded to a
                                  // 10-bit mantissa, fp32 accumulation); the CPU computes fp32
  Recompute recompute = Recompute::kNone;
  bool fp32_residual = true;      // 16-bit precisions: the residual stream (the norms' inputs) kept in
                                  // fp32, as Stagecraft's engine always does (Megatron's
                                  // --fp32-residual-connection); false plans a framework that keeps it
                                  // in train.precision, which Stagecraft's engine refuses to train
  Attention attention = Attention::kStandard;  // standard: scores materialised (s x s per head);
                                               // flash: fused, tiled (FlashAttention)
  uint64_t seed = 1234;           // parameters and batches are functions of the seed
  std::string data;               // token file (.bin, uint16) or text file (.txt, bytes)
  int checkpoint_every = 0;       // steps between checkpoints; 0 = only at the end
  std::string checkpoint_dir = "checkpoints";
  std::string resume;             // checkpoint directory to continue from; empty = fresh
  DataDtype data_dtype = DataDtype::kAuto;  // a .bin file's tokens: uint16 or uint32; auto: uint32
                                           // where model.vocab is above 65,536 (Llama 3's 128,256)
  std::string init;               // model directory (a checkpoint's or a Hugging Face model's) whose
                                  // weights a fresh run starts from; empty = the seed's initialisation
  double hang_timeout_s = 300.0;  // no step event for this long fails the run as hung
  KernelConfig kernels;           // the CUDA backend's kernel paths; auto everywhere by default
  bool operator==(const TrainConfig&) const = default;
};

// Another program launched instead of Stagecraft's worker (launch/program.h): one process per
// rank with torchrun's environment, its output lines read for metrics.
struct LaunchConfig {
  std::string program;             // empty: Stagecraft's own worker; a .py file runs with `python`
  std::string python = "python3";  // the interpreter of a .py program
  MetricsFormat metrics = MetricsFormat::kAuto;  // how its output lines become step events
  std::string args;                // its arguments, split like a shell's (no expansion)
  LaunchFramework framework = LaunchFramework::kNone;  // pass the plan as that framework's arguments
  bool foreign() const { return !program.empty(); }
  bool operator==(const LaunchConfig&) const = default;
};

struct RunConfig {
  std::string name = "run";
  ClusterConfig cluster;
  ModelConfig model;
  ParallelConfig parallel;
  PipelineConfig pipeline;
  TrainConfig train;
  Backend backend = Backend::kCpu;
  Comm comm = Comm::kAuto;  // how ranks exchange tensors; see comm_of()
  LaunchConfig launch;

  int world_size() const { return cluster.nodes * cluster.gpus_per_node; }
  bool operator==(const RunConfig&) const = default;
};

// The communicator a run uses: `comm` as set, and for auto NCCL with backend cuda (GPU memory,
// no staging through the host), Gloo with backend cpu. Never kAuto.
Comm comm_of(const RunConfig& c);

}  // namespace stagecraft::config
