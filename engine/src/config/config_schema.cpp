// The table of every configuration key (config_schema.h) and the lookups over it.
#include "stagecraft/config/config_schema.h"

#include <algorithm>
#include <span>
#include <type_traits>

namespace stagecraft::config {

namespace {

constexpr std::span<const EnumName<TpMode>> names_of(TpMode) { return kTpModeNames; }
constexpr std::span<const EnumName<Schedule>> names_of(Schedule) { return kScheduleNames; }
constexpr std::span<const EnumName<Recompute>> names_of(Recompute) { return kRecomputeNames; }
constexpr std::span<const EnumName<Precision>> names_of(Precision) { return kPrecisionNames; }
constexpr std::span<const EnumName<Attention>> names_of(Attention) { return kAttentionNames; }
constexpr std::span<const EnumName<Backend>> names_of(Backend) { return kBackendNames; }
constexpr std::span<const EnumName<Comm>> names_of(Comm) { return kCommNames; }
constexpr std::span<const EnumName<CpComm>> names_of(CpComm) { return kCpCommNames; }
constexpr std::span<const EnumName<MetricsFormat>> names_of(MetricsFormat) { return kMetricsFormatNames; }
constexpr std::span<const EnumName<LaunchFramework>> names_of(LaunchFramework) { return kLaunchFrameworkNames; }
constexpr std::span<const EnumName<DataDtype>> names_of(DataDtype) { return kDataDtypeNames; }
constexpr std::span<const EnumName<MoeRouter>> names_of(MoeRouter) { return kMoeRouterNames; }
constexpr std::span<const EnumName<FlashKernels>> names_of(FlashKernels) { return kFlashKernelsNames; }
constexpr std::span<const EnumName<GemmBias>> names_of(GemmBias) { return kGemmBiasNames; }
constexpr std::span<const EnumName<NormWarps>> names_of(NormWarps) { return kNormWarpsNames; }

template <typename E>
std::vector<std::string_view> choices_of() {
  std::vector<std::string_view> out;
  for (const auto& e : names_of(E{})) out.push_back(e.name);
  return out;
}

// How a key's value is read from and written to the RunConfig member that `L` (a lambda
// `[](auto& c) -> auto& { return c.section.member; }`) names. int, uint64_t, double, bool,
// std::string and the enums with a names_of() table.
template <typename L>
KeyAccess field(L) {
  return {
      [](const RunConfig& c) -> KeyValue {
        const auto& v = L{}(c);
        using T = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int>) {
          return static_cast<long long>(v);
        } else if constexpr (std::is_enum_v<T>) {
          return std::string(enum_to_string(names_of(T{}), v));
        } else {
          return v;
        }
      },
      [](RunConfig& c, const KeyValue& value) -> bool {
        auto& out = L{}(c);
        using T = std::remove_cvref_t<decltype(out)>;
        if constexpr (std::is_same_v<T, int>) {
          const auto* v = std::get_if<long long>(&value);
          if (!v) return false;
          out = static_cast<int>(*v);
        } else if constexpr (std::is_enum_v<T>) {
          const auto* v = std::get_if<std::string>(&value);
          const auto e = v ? enum_parse(names_of(T{}), *v) : std::nullopt;
          if (!e) return false;
          out = *e;
        } else {
          const auto* v = std::get_if<T>(&value);
          if (!v) return false;
          out = *v;
        }
        return true;
      }};
}

// cluster.device as its name (the base of a mapping); setting a name keeps the mapping's figures.
const KeyAccess kDeviceAccess = {
    [](const RunConfig& c) -> KeyValue { return c.cluster.device; },
    [](RunConfig& c, const KeyValue& v) -> bool {
      const auto* s = std::get_if<std::string>(&v);
      if (!s) return false;
      c.cluster.device = *s;
      return true;
    }};

// parallel.order as "tp-cp-dp-pp"; a text parse_order refuses changes nothing.
const KeyAccess kOrderAccess = {
    [](const RunConfig& c) -> KeyValue { return order_text(c.parallel.order); },
    [](RunConfig& c, const KeyValue& v) -> bool {
      const auto* s = std::get_if<std::string>(&v);
      auto order = s ? parse_order(*s) : std::nullopt;
      if (!order) return false;
      c.parallel.order = std::move(*order);
      return true;
    }};

// pipeline.partition as uniform, balanced or explicit; setting uniform or balanced drops the
// stage ids, setting explicit keeps them (the stage editor fills them).
const KeyAccess kPartitionAccess = {
    [](const RunConfig& c) -> KeyValue { return std::string(to_string(c.pipeline.partition)); },
    [](RunConfig& c, const KeyValue& v) -> bool {
      const auto* s = std::get_if<std::string>(&v);
      const auto kind = s ? enum_parse(kPartitionKindNames, *s) : std::nullopt;
      if (!kind) return false;
      c.pipeline.partition = *kind;
      if (*kind != PartitionKind::kExplicit) c.pipeline.stage_ids.clear();
      return true;
    }};

std::string known_arch(const KeyValue& v) {
  const auto* s = std::get_if<std::string>(&v);
  return s && (*s == "gpt2" || *s == "gpt" || *s == "llama")
             ? std::string()
             : "must be gpt2 (GPT-2 family; gpt is its older name) or llama (Llama, Mistral, Qwen2: RMSNorm, SwiGLU, rotary positions, grouped-query attention)";
}

std::string zero_stage(const KeyValue& v) {
  const auto* z = std::get_if<long long>(&v);
  return z && *z <= 3 ? std::string()
                      : "must be 0 (no sharding), 1 (optimizer state), 2 (and gradients) or 3 (and parameters), sharded over dp x cp";
}

constexpr double kCount = 1e9;  // the upper bound of counts that have no tighter one

// Entries name only the fields they set; the rest keep the defaults written in KeySpec. GCC warns
// about designated initializers that leave fields out, which is the point here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<KeySpec> make_schema() {
  using T = KeyType;
  return {
      {.path = "name", .type = T::kText, .default_text = "run", .help = "the run's name",
       .access = field([](auto& c) -> auto& { return c.name; })},

      {.path = "cluster.nodes", .type = T::kInt, .default_text = "1", .help = "machines",
       .min = 1, .max = 1 << 17, .label = "Nodes", .foreign = {"nnodes"},
       .access = field([](auto& c) -> auto& { return c.cluster.nodes; })},
      {.path = "cluster.gpus_per_node", .type = T::kInt, .default_text = "8", .help = "ranks per machine",
       .min = 1, .max = 1024, .label = "GPUs per node", .foreign = {"gpus", "nproc_per_node"},
       .access = field([](auto& c) -> auto& { return c.cluster.gpus_per_node; })},
      {.path = "cluster.device", .type = T::kDevice, .default_text = "A100-80GB",
       .help = "a name from `stagecraft-cli devices`, or {base: NAME, memory_gib: N}, or {base: NAME, profile: FILE} (calibrated), or a new one {name: X, ...}",
       .label = "Device", .access = kDeviceAccess},
      {.path = "cluster.intra_node_gbps", .type = T::kDouble, .default_text = "0",
       .help = "one GPU's link to its node peers, Gb/s; 0 = the device's", .min = 0.001, .max = 1e6,
       .zero_label = "the device's", .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.cluster.intra_node_gbps; })},
      {.path = "cluster.inter_node_gbps", .type = T::kDouble, .default_text = "0",
       .help = "one node's network, Gb/s; 0 = the device's", .min = 0.001, .max = 1e6,
       .zero_label = "the device's", .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.cluster.inter_node_gbps; })},
      {.path = "cluster.hosts", .type = T::kHosts, .default_text = "[]",
       .help = "[{host: node-a, slots: 8}, ...]; when given they set nodes and gpus_per_node", .omit_default = true},

      {.path = "model.arch", .type = T::kText, .default_text = "gpt2",
       .help = "gpt2 (GPT-2 family) or llama (Llama, Mistral, Qwen2: RMSNorm, SwiGLU, RoPE, GQA)", .label = "Architecture",
       .foreign = {"model_type"}, .rule = known_arch, .access = field([](auto& c) -> auto& { return c.model.arch; })},
      {.path = "model.layers", .type = T::kInt, .default_text = "24", .help = "transformer blocks; required",
       .min = 1, .max = 1'000'000, .label = "Layers", .foreign = {"num_layers", "n_layer", "pipeline_num_layers"},
       .access = field([](auto& c) -> auto& { return c.model.layers; })},
      {.path = "model.hidden", .type = T::kInt, .default_text = "1024", .help = "model width; required",
       .min = 1, .max = 1 << 20, .label = "Hidden size", .foreign = {"hidden_size", "n_embd"},
       .access = field([](auto& c) -> auto& { return c.model.hidden; })},
      {.path = "model.heads", .type = T::kInt, .default_text = "16", .help = "attention heads; required; divides hidden",
       .min = 1, .max = kCount, .label = "Attention heads", .foreign = {"num_attention_heads", "n_head"},
       .access = field([](auto& c) -> auto& { return c.model.heads; })},
      {.path = "model.kv_heads", .type = T::kInt, .default_text = "0",
       .help = "key/value heads (grouped-query attention, llama); 0 = heads", .min = 1, .max = kCount, .label = "KV heads",
       .zero_label = "= heads", .foreign = {"num_key_value_heads", "num_query_groups"},
       .derived = [](const RunConfig& c) -> long long { return c.model.kv(); },
       .access = field([](auto& c) -> auto& { return c.model.kv_heads; })},
      {.path = "model.ffn_hidden", .type = T::kInt, .default_text = "0", .help = "MLP width; 0 = 4 x hidden",
       .min = 1, .max = kCount, .label = "FFN hidden", .zero_label = "4 x hidden", .foreign = {"ffn_hidden_size"},
       .derived = [](const RunConfig& c) -> long long { return c.model.ffn(); },
       .access = field([](auto& c) -> auto& { return c.model.ffn_hidden; })},
      {.path = "model.seq_len", .type = T::kInt, .default_text = "1024", .help = "tokens per sample",
       .min = 1, .max = kCount, .label = "Sequence length", .foreign = {"seq_length", "max_position_embeddings"},
       .access = field([](auto& c) -> auto& { return c.model.seq_len; })},
      {.path = "model.vocab", .type = T::kInt, .default_text = "50257", .help = "vocabulary size",
       .min = 1, .max = kCount, .label = "Vocabulary", .foreign = {"vocab_size"},
       .access = field([](auto& c) -> auto& { return c.model.vocab; })},
      {.path = "model.tied_embeddings", .type = T::kBool, .default_text = "true", .help = "the LM head shares the token embedding",
       .access = field([](auto& c) -> auto& { return c.model.tied_embeddings; })},
      {.path = "model.rope_theta", .type = T::kDouble, .default_text = "10000",
       .help = "llama: the rotary positions' base (Llama 3: 500000)", .min = 1.0, .max = 1e12, .omit_default = true,
       .foreign = {"rotary_base"}, .access = field([](auto& c) -> auto& { return c.model.rope_theta; })},
      {.path = "model.norm_eps", .type = T::kDouble, .default_text = "1e-05",
       .help = "the norms' epsilon (llama's RMSNorm; gpt2's LayerNorm trains with 1e-5)", .min = 1e-12, .max = 0.1,
       .omit_default = true, .foreign = {"rms_norm_eps", "layer_norm_epsilon"},
       .access = field([](auto& c) -> auto& { return c.model.norm_eps; })},
      {.path = "model.qkv_bias", .type = T::kBool, .default_text = "false", .help = "llama: biases on q, k and v (Qwen2)",
       .omit_default = true, .access = field([](auto& c) -> auto& { return c.model.qkv_bias; })},
      {.path = "model.head_dim", .type = T::kInt, .default_text = "0",
       .help = "llama: channels per head; heads x head_dim need not be hidden (Qwen3)", .min = 2, .max = 1 << 16,
       .zero_label = "hidden / heads", .omit_default = true,
       .derived = [](const RunConfig& c) -> long long { return c.model.head_size(); },
       .access = field([](auto& c) -> auto& { return c.model.head_dim; })},
      {.path = "model.qk_norm", .type = T::kBool, .default_text = "false", .help = "llama: RMSNorm over each head of q and k (Qwen3)",
       .omit_default = true, .access = field([](auto& c) -> auto& { return c.model.qk_norm; })},
      {.path = "model.dropout", .type = T::kDouble, .default_text = "0.0",
       .help = "attention and hidden dropout (Megatron's 0.1); the engine trains without", .min = 0.0, .max = 0.9,
       .access = field([](auto& c) -> auto& { return c.model.dropout; })},
      {.path = "model.moe.experts", .type = T::kInt, .default_text = "0",
       .help = "llama: routed experts per MoE layer; 0 = no mixture of experts", .min = 0, .max = 1 << 16,
       .omit_default = true, .foreign = {"num_experts", "num_local_experts"},
       .access = field([](auto& c) -> auto& { return c.model.moe.experts; })},
      {.path = "model.moe.top_k", .type = T::kInt, .default_text = "2", .help = "experts each token is sent to",
       .min = 1, .max = 1 << 16, .omit_default = true, .foreign = {"num_experts_per_tok", "moe_router_topk"},
       .access = field([](auto& c) -> auto& { return c.model.moe.top_k; })},
      {.path = "model.moe.ffn_hidden", .type = T::kInt, .default_text = "0", .help = "one expert's MLP width; 0 = model.ffn_hidden",
       .min = 1, .max = kCount, .zero_label = "model.ffn_hidden", .omit_default = true, .foreign = {"moe_intermediate_size"},
       .derived = [](const RunConfig& c) -> long long { return c.model.moe_ffn(); },
       .access = field([](auto& c) -> auto& { return c.model.moe.ffn_hidden; })},
      {.path = "model.moe.shared_experts", .type = T::kInt, .default_text = "0", .help = "always-on experts per MoE layer",
       .min = 0, .max = 1 << 16, .omit_default = true, .access = field([](auto& c) -> auto& { return c.model.moe.shared_experts; })},
      {.path = "model.moe.shared_ffn_hidden", .type = T::kInt, .default_text = "0",
       .help = "one shared expert's MLP width; 0 = moe.ffn_hidden", .min = 1, .max = kCount, .zero_label = "moe.ffn_hidden",
       .omit_default = true, .derived = [](const RunConfig& c) -> long long { return c.model.moe_shared_ffn(); },
       .access = field([](auto& c) -> auto& { return c.model.moe.shared_ffn_hidden; })},
      {.path = "model.moe.dense_layers", .type = T::kInt, .default_text = "0",
       .help = "the first layers keep the dense MLP of model.ffn_hidden", .min = 0, .max = kCount, .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.model.moe.dense_layers; })},
      {.path = "model.moe.router", .type = T::kEnum, .default_text = "softmax_topk",
       .help = "softmax_topk: softmax over every expert, then the top k", .choices = choices_of<MoeRouter>(), .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.model.moe.router; })},
      {.path = "model.moe.norm_topk", .type = T::kBool, .default_text = "true",
       .help = "renormalise the top-k routing weights to sum to 1 (Mixtral, Qwen3-MoE)", .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.model.moe.norm_topk; })},
      {.path = "model.moe.aux_loss", .type = T::kDouble, .default_text = "0.01",
       .help = "load-balancing loss weight (Switch / Mixtral form)", .min = 0, .max = 10, .omit_default = true,
       .foreign = {"router_aux_loss_coef", "moe_aux_loss_coeff"},
       .access = field([](auto& c) -> auto& { return c.model.moe.aux_loss; })},
      {.path = "model.moe.capacity_factor", .type = T::kDouble, .default_text = "0",
       .help = "0: dropless; >= 1: tokens per expert capped at capacity_factor x its even share, the overflow dropped",
       .min = 0, .max = 1e6, .omit_default = true, .foreign = {"moe_expert_capacity_factor"},
       .access = field([](auto& c) -> auto& { return c.model.moe.capacity_factor; })},

      {.path = "parallel.dp", .type = T::kInt, .default_text = "auto", .help = "data parallel size; auto = world / (tp x cp x pp)",
       .min = 1, .max = 1 << 20, .label = "Data parallel (dp)", .zero_label = "auto", .zero_label_is_yaml = true,
       .foreign = {"data_parallel_size", "dp_degree"}, .access = field([](auto& c) -> auto& { return c.parallel.dp; })},
      {.path = "parallel.tp", .type = T::kInt, .default_text = "1", .help = "tensor parallel size, the whole group in every mode",
       .min = 1, .max = 1 << 20, .label = "Tensor parallel (tp)",
       .foreign = {"tensor_parallel_size", "tensor_model_parallel_size", "mp_degree"},
       .access = field([](auto& c) -> auto& { return c.parallel.tp; })},
      {.path = "parallel.pp", .type = T::kInt, .default_text = "1", .help = "pipeline parallel size",
       .min = 1, .max = 1 << 20, .label = "Pipeline parallel (pp)",
       .foreign = {"pipeline_parallel_size", "pipeline_model_parallel_size", "pp_degree"},
       .access = field([](auto& c) -> auto& { return c.parallel.pp; })},
      {.path = "parallel.cp", .type = T::kInt, .default_text = "1",
       .help = "context parallel size: each sequence split over cp ranks (seq_len divisible by 2 x cp)",
       .min = 1, .max = 1 << 20, .label = "Context parallel (cp)",
       .foreign = {"context_parallel_size", "context_parallel_degree", "sequence_parallel_size"},
       .access = field([](auto& c) -> auto& { return c.parallel.cp; })},
      {.path = "parallel.cp_comm", .type = T::kEnum, .default_text = "ring",
       .help = "cp > 1: ring passes K and V around the cp ranks; all_to_all exchanges heads (Ulysses)",
       .choices = choices_of<CpComm>(), .label = "CP communication", .omit_default = true,
       .foreign = {"cp_comm_type", "context_parallel_rotate_method"},
       .access = field([](auto& c) -> auto& { return c.parallel.cp_comm; })},
      {.path = "parallel.ep", .type = T::kInt, .default_text = "1",
       .help = "expert parallel size: each MoE layer's experts split over ep ranks of the tp x cp x dp ones",
       .min = 1, .max = 1 << 20, .label = "Expert parallel (ep)", .omit_default = true,
       .foreign = {"expert_model_parallel_size", "ep_size", "expert_parallel_degree"},
       .access = field([](auto& c) -> auto& { return c.parallel.ep; })},
      {.path = "parallel.expert_tp", .type = T::kInt, .default_text = "1",
       .help = "expert tensor parallel size: each expert's MLP split over this many ranks",
       .min = 1, .max = 1 << 20, .label = "Expert TP", .omit_default = true,
       .foreign = {"expert_tensor_parallel_size", "expert_tensor_parallel_degree"},
       .access = field([](auto& c) -> auto& { return c.parallel.expert_tp; })},
      {.path = "parallel.tp_mode", .type = T::kEnum, .default_text = "1d",
       .help = "1d (Megatron), 2d (tp = N^2), 2.5d (tp = N^2 x tp_depth), 3d (tp = N^3)",
       .choices = choices_of<TpMode>(), .label = "TP mode", .access = field([](auto& c) -> auto& { return c.parallel.tp_mode; })},
      {.path = "parallel.tp_depth", .type = T::kInt, .default_text = "1", .help = "2.5d only: d in tp = N^2 x d",
       .min = 1, .max = 1024, .label = "TP depth (2.5d)", .access = field([](auto& c) -> auto& { return c.parallel.tp_depth; })},
      {.path = "parallel.order", .type = T::kOrder, .default_text = "tp-cp-dp-pp",
       .help = "axes innermost first; cp, when left out, follows tp",
       .choices = {"tp-cp-dp-pp", "tp-cp-pp-dp", "dp-tp-cp-pp", "dp-pp-tp-cp", "pp-tp-cp-dp", "pp-dp-tp-cp", "cp-tp-dp-pp"},
       .label = "Rank order",
       .access = kOrderAccess},
      {.path = "parallel.sequence_parallel", .type = T::kBool, .default_text = "false",
       .help = "Megatron sequence parallelism (tp > 1, 1d)", .label = "Sequence parallel",
       .access = field([](auto& c) -> auto& { return c.parallel.sequence_parallel; })},
      {.path = "parallel.zero", .type = T::kInt, .default_text = "0",
       .help = "sharded data parallelism over dp x cp: 1 optimizer state, 2 also gradients, 3 also parameters",
       .min = 0, .max = kCount, .label = "ZeRO", .foreign = {"zero_stage"}, .rule = zero_stage,
       .access = field([](auto& c) -> auto& { return c.parallel.zero; })},
      {.path = "parallel.overlap_grad_reduce", .type = T::kBool, .default_text = "true",
       .help = "start data-parallel gradient buckets during the last micro-batch's backward (zero 2 and 3: their reduce-scatters and gathers in the background)",
       .label = "Overlap DP reduction",
       .omit_default = true, .foreign = {"overlap_comm"},
       .access = field([](auto& c) -> auto& { return c.parallel.overlap_grad_reduce; })},
      {.path = "parallel.grad_bucket_mb", .type = T::kDouble, .default_text = "25",
       .help = "MiB of gradients per data-parallel bucket (overlap_grad_reduce)", .min = 0.001, .max = 65536,
       .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.parallel.grad_bucket_mb; })},

      {.path = "pipeline.schedule", .type = T::kEnum, .default_text = "1f1b", .help = "the pipeline schedule",
       .choices = choices_of<Schedule>(), .label = "Schedule", .access = field([](auto& c) -> auto& { return c.pipeline.schedule; })},
      {.path = "pipeline.virtual_stages", .type = T::kInt, .default_text = "1", .help = "model chunks per pp rank, interleaved only",
       .min = 1, .max = 1024, .label = "Virtual stages", .foreign = {"num_layers_per_virtual_pipeline_stage"},
       .access = field([](auto& c) -> auto& { return c.pipeline.virtual_stages; })},
      {.path = "pipeline.partition", .type = T::kPartition, .default_text = "uniform",
       .help = "uniform, balanced, or one stage id per layer", .choices = {"uniform", "balanced", "explicit"},
       .label = "Partition", .foreign = {"custom_pipeline_stage_id"}, .access = kPartitionAccess},
      {.path = "pipeline.costs", .type = T::kText, .default_text = "model",
       .help = "what balanced splits by: model (the cost model's times) or run:ID (a recorded run's measured times)",
       .label = "Balance by", .omit_default = true, .access = field([](auto& c) -> auto& { return c.pipeline.costs; })},

      {.path = "train.global_batch", .type = T::kInt, .default_text = "8", .help = "samples per step; a multiple of dp x micro_batch",
       .min = 1, .max = kCount, .label = "Global batch", .foreign = {"global_batch_size"},
       .access = field([](auto& c) -> auto& { return c.train.global_batch; })},
      {.path = "train.micro_batch", .type = T::kInt, .default_text = "1", .help = "samples per micro-batch per DP replica",
       .min = 1, .max = kCount, .label = "Micro-batch", .foreign = {"micro_batch_size"},
       .access = field([](auto& c) -> auto& { return c.train.micro_batch; })},
      {.path = "train.steps", .type = T::kInt, .default_text = "100", .help = "optimizer steps",
       .min = 1, .max = kCount, .label = "Steps", .foreign = {"train_iters"},
       .access = field([](auto& c) -> auto& { return c.train.steps; })},
      {.path = "train.lr", .type = T::kDouble, .default_text = "3.0e-4", .help = "peak learning rate (AdamW)", .min = 0, .max = 10,
       .access = field([](auto& c) -> auto& { return c.train.lr; })},
      {.path = "train.min_lr", .type = T::kDouble, .default_text = "0.0", .help = "floor of the cosine decay", .min = 0, .max = 10,
       .access = field([](auto& c) -> auto& { return c.train.min_lr; })},
      {.path = "train.warmup_steps", .type = T::kInt, .default_text = "0", .help = "linear warm-up steps", .min = 0, .max = kCount,
       .access = field([](auto& c) -> auto& { return c.train.warmup_steps; })},
      {.path = "train.weight_decay", .type = T::kDouble, .default_text = "0.0", .help = "AdamW decoupled weight decay",
       .min = 0, .max = 10, .access = field([](auto& c) -> auto& { return c.train.weight_decay; })},
      {.path = "train.beta1", .type = T::kDouble, .default_text = "0.9", .help = "AdamW", .min = 0, .max = 0.999999,
       .access = field([](auto& c) -> auto& { return c.train.beta1; })},
      {.path = "train.beta2", .type = T::kDouble, .default_text = "0.95", .help = "AdamW", .min = 0, .max = 0.999999,
       .access = field([](auto& c) -> auto& { return c.train.beta2; })},
      {.path = "train.grad_clip", .type = T::kDouble, .default_text = "1.0", .help = "clip by global gradient norm; 0 disables",
       .min = 0, .max = 1e9, .access = field([](auto& c) -> auto& { return c.train.grad_clip; })},
      {.path = "train.precision", .type = T::kEnum, .default_text = "fp32", .help = "arithmetic precision",
       .choices = choices_of<Precision>(), .label = "Precision", .access = field([](auto& c) -> auto& { return c.train.precision; })},
      {.path = "train.recompute", .type = T::kEnum, .default_text = "none", .help = "activation recomputation",
       .choices = choices_of<Recompute>(), .label = "Recompute", .access = field([](auto& c) -> auto& { return c.train.recompute; })},
      {.path = "train.tf32", .type = T::kBool, .default_text = "false",
       .help = "fp32 GEMMs on a GPU's TF32 tensor cores (fp32 precision only)", .label = "TF32 GEMMs", .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.train.tf32; })},
      {.path = "train.fp32_residual", .type = T::kBool, .default_text = "true",
       .help = "16-bit precisions: the residual stream in fp32, as Stagecraft's engine keeps it; false plans a framework that keeps it 16-bit (Megatron's default)",
       .omit_default = true, .foreign = {"fp32_residual_connection"},
       .access = field([](auto& c) -> auto& { return c.train.fp32_residual; })},
      {.path = "train.attention", .type = T::kEnum, .default_text = "standard",
       .help = "standard (scores materialised) or flash (FlashAttention), for the cost model",
       .choices = choices_of<Attention>(), .label = "Attention", .access = field([](auto& c) -> auto& { return c.train.attention; })},
      {.path = "train.seed", .type = T::kUint64, .default_text = "1234", .help = "parameters and batches are functions of it",
       .access = field([](auto& c) -> auto& { return c.train.seed; })},
      {.path = "train.data", .type = T::kText, .default_text = "\"\"", .help = "token file (.bin: uint16, or uint32 per data_dtype) or text (.txt, bytes)",
       .allow_empty = true, .access = field([](auto& c) -> auto& { return c.train.data; })},
      {.path = "train.data_dtype", .type = T::kEnum, .default_text = "auto",
       .help = "a .bin file's token width: uint16, uint32, or auto (uint32 where model.vocab is above 65536)",
       .choices = choices_of<DataDtype>(), .omit_default = true, .access = field([](auto& c) -> auto& { return c.train.data_dtype; })},
      {.path = "train.checkpoint_every", .type = T::kInt, .default_text = "0", .help = "steps between checkpoints; 0 = only at the end",
       .min = 0, .max = kCount, .access = field([](auto& c) -> auto& { return c.train.checkpoint_every; })},
      {.path = "train.checkpoint_dir", .type = T::kText, .default_text = "checkpoints", .help = "where checkpoints go",
       .access = field([](auto& c) -> auto& { return c.train.checkpoint_dir; })},
      {.path = "train.resume", .type = T::kText, .default_text = "\"\"", .help = "checkpoint directory to continue from",
       .allow_empty = true, .access = field([](auto& c) -> auto& { return c.train.resume; })},
      {.path = "train.init", .type = T::kText, .default_text = "\"\"",
       .help = "model directory (a checkpoint, or a Hugging Face model: model.safetensors or its shards) to start from",
       .allow_empty = true, .omit_default = true, .access = field([](auto& c) -> auto& { return c.train.init; })},
      {.path = "train.hang_timeout_s", .type = T::kDouble, .default_text = "300.0",
       .help = "no step event (another program: no output and no metric) for this long fails the run as hung", .min = 1, .max = 1e7,
       .access = field([](auto& c) -> auto& { return c.train.hang_timeout_s; })},
      {.path = "train.kernels.flash", .type = T::kEnum, .default_text = "auto",
       .help = "backend cuda, train.attention flash: the fused attention on mma_sync or wgmma (Hopper) tensor cores, or cuda_cores; auto by GPU and head size",
       .choices = choices_of<FlashKernels>(), .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.train.kernels.flash; })},
      {.path = "train.kernels.gemm_bias", .type = T::kEnum, .default_text = "auto",
       .help = "backend cuda, 16-bit precision: a GEMM's bias (and GELU) in cuBLASLt's epilogue (cublaslt) or a kernel after it (separate)",
       .choices = choices_of<GemmBias>(), .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.train.kernels.gemm_bias; })},
      {.path = "train.kernels.layernorm_backward_warps", .type = T::kEnum, .default_text = "auto",
       .help = "backend cuda, model.arch gpt2: layernorm's backward in blocks of 4 or 8 warps (8: rows up to 1536 wide)",
       .choices = choices_of<NormWarps>(), .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.train.kernels.layernorm_backward_warps; })},

      {.path = "backend", .type = T::kEnum, .default_text = "cpu", .help = "where ranks run",
       .choices = choices_of<Backend>(), .access = field([](auto& c) -> auto& { return c.backend; })},
      {.path = "comm", .type = T::kEnum, .default_text = "auto",
       .help = "how ranks exchange tensors: nccl (GPU memory), gloo (through host memory); auto = nccl with cuda, gloo with cpu",
       .choices = choices_of<Comm>(), .omit_default = true, .access = field([](auto& c) -> auto& { return c.comm; })},

      {.path = "launch.program", .type = T::kText, .default_text = "\"\"",
       .help = "another program to run once per rank with torchrun's environment; empty = Stagecraft's worker",
       .label = "Program", .allow_empty = true, .omit_default = true,
       .access = field([](auto& c) -> auto& { return c.launch.program; })},
      {.path = "launch.python", .type = T::kText, .default_text = "python3", .help = "the interpreter of a .py program",
       .omit_default = true, .access = field([](auto& c) -> auto& { return c.launch.python; })},
      {.path = "launch.metrics", .type = T::kEnum, .default_text = "auto",
       .help = "which output lines of the program are step events", .choices = choices_of<MetricsFormat>(),
       .label = "Metrics from output", .omit_default = true, .access = field([](auto& c) -> auto& { return c.launch.metrics; })},
      {.path = "launch.args", .type = T::kText, .default_text = "\"\"",
       .help = "the program's arguments, split like a shell's (quotes, backslashes; nothing expanded)", .label = "Arguments",
       .allow_empty = true, .omit_default = true, .access = field([](auto& c) -> auto& { return c.launch.args; })},
      {.path = "launch.framework", .type = T::kEnum, .default_text = "none",
       .help = "pass the plan to the program as Megatron-LM's, DeepSpeed's or torchtitan's arguments", .choices = choices_of<LaunchFramework>(),
       .label = "Plan as arguments", .omit_default = true, .access = field([](auto& c) -> auto& { return c.launch.framework; })},
  };
}
#pragma GCC diagnostic pop

}  // namespace

std::string_view KeySpec::section() const {
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view KeySpec::leaf() const {
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> kSchema = make_schema();
  return kSchema;
}

const KeySpec* find_key(std::string_view path) {
  for (const auto& k : config_schema()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

const std::vector<std::string>& root_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& k : config_schema()) {
      const std::string_view section = k.section();
      const std::string name(section.empty() ? k.path : section.substr(0, section.find('.')));
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
  }();
  return kNames;
}

std::vector<std::string> section_keys(std::string_view section) {
  if (section.empty()) return root_names();
  std::vector<std::string> keys;
  const std::string prefix = std::string(section) + ".";
  for (const auto& k : config_schema()) {
    const std::string_view s = k.section();
    if (s == section) {
      keys.emplace_back(k.leaf());
    } else if (s.size() > prefix.size() && s.substr(0, prefix.size()) == prefix) {
      // A nested section (model.moe under model): its name once, where its first key is.
      const std::string_view rest = s.substr(prefix.size());
      const std::string name(rest.substr(0, rest.find('.')));
      if (std::find(keys.begin(), keys.end(), name) == keys.end()) keys.push_back(name);
    }
  }
  return keys;
}

std::string_view foreign_key(std::string_view name) {
  for (const auto& k : config_schema()) {
    for (std::string_view f : k.foreign) {
      if (f == name) return k.path;
    }
  }
  return {};
}

std::string choices_text(const KeySpec& key) {
  std::string out;
  for (size_t i = 0; i < key.choices.size(); ++i) {
    if (i > 0) out += i + 1 == key.choices.size() ? " or " : ", ";
    out += key.choices[i];
  }
  return out;
}

}  // namespace stagecraft::config
