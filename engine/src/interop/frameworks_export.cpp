// Export of a RunConfig to LiBai, PaddlePaddle, Colossal-AI, Megatron-LM and DeepSpeed. See
// frameworks.h for the contract; frameworks_common.h for each framework's rank order.
//
// Every writer starts from the plan (plan::make_plan), so what it writes is what Stagecraft
// shows: the resolved dp, the layers of every stage, the micro-batch count.
#include <sstream>

#include "frameworks_common.h"
#include "stagecraft/interop/frameworks.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/core/json.h"
#include "stagecraft/model/model.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::interop {

namespace {

// What every writer needs about the plan.
struct Ctx {
  const RunConfig& c;
  const plan::Plan& p;
  int layers = 0;
  int dp = 1, tp = 1, pp = 1, cp = 1, v = 1, m = 1;
  std::vector<int> counts;  // layers per chunk, chunk order (chunk c on pp rank c mod pp)
  std::vector<std::string> notes;

  Ctx(const RunConfig& config, const plan::Plan& plan) : c(config), p(plan) {
    layers = c.model.layers;
    dp = p.dp;
    tp = p.tp;
    pp = p.pp;
    cp = p.cp;
    v = p.virtual_stages;
    m = p.micro_batches;
    for (const auto& s : p.stages) counts.push_back(s.num_layers);
  }
  bool counts_equal() const {
    for (int n : counts) {
      if (n != counts.front()) return false;
    }
    return true;
  }
  std::string cluster_line() const {
    return std::to_string(c.world_size()) + " GPUs (" + std::to_string(c.cluster.nodes) + (c.cluster.nodes == 1 ? " node" : " nodes") +
           " x " + std::to_string(c.cluster.gpus_per_node) + " " + c.cluster.device + ")";
  }
  std::string sizes_line() const {
    return "dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + " x pp " + std::to_string(pp) +
           (cp > 1 ? " x cp " + std::to_string(cp) : "") +
           (v > 1 ? " (" + std::to_string(v) + " interleaved chunks per pp rank)" : "") + "; " + std::to_string(m) +
           (m == 1 ? " micro-batch of " : " micro-batches of ") + std::to_string(c.train.micro_batch) +
           " per step and data-parallel rank, global batch " +
           std::to_string(c.train.global_batch);
  }
};

// Comment lines, `prefix` before each, wrapped at about 98 columns.
std::string comment(const std::string& text, const std::string& prefix = "# ") {
  std::string out, line;
  std::istringstream words(text);
  std::string w;
  while (words >> w) {
    if (!line.empty() && line.size() + 1 + w.size() + prefix.size() > 98) {
      out += prefix + line + "\n";
      line = "    " + w;  // continuation lines are indented
      continue;
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty()) out += prefix + line + "\n";
  return out;
}

std::string notes_block(const std::vector<std::string>& notes, const std::string& prefix = "# ") {
  std::string out;
  for (const auto& n : notes) out += comment("NOTE: " + n, prefix);
  return out;
}

Status refuse(const std::string& key, const std::string& value, const std::string& why) {
  return Status::invalid_input(key + "=" + value + ": " + why);
}

// Frameworks that cannot split a sequence over ranks: a plan with cp > 1 has no layout there.
Status refuse_cp(const Ctx& x, const std::string& framework) {
  if (x.cp <= 1) return Status::OK();
  return refuse("parallel.cp", std::to_string(x.cp),
                framework + " has no context parallelism; set parallel.cp=1 to export there, or export to megatron, deepspeed or torchtitan");
}

// What a target cannot write of the model, refused in one line naming the key: a mixture of
// experts where the framework (or the config this export writes for it) has no expert layer,
// Qwen3's attention (q/k norms, a head size of its own) where the written config describes the
// model and has no key for it. Megatron-LM, DeepSpeed and torchtitan write all three (DeepSpeed's
// model and torchtitan's come from the training code or configuration; the notes say what to build).
Status refuse_model(const RunConfig& c, Framework to) {
  const config::ModelConfig& m = c.model;
  const std::string fw = framework_title(to);
  const bool head_dim = m.head_dim != 0 && m.head_dim * m.heads != m.hidden;
  const std::string others = "; export to megatron, deepspeed or torchtitan";
  if (m.moe.enabled()) {
    const std::string key = "model.moe.experts", value = std::to_string(m.moe.experts);
    switch (to) {
      case Framework::kLibai:
        return refuse(key, value, "LiBai's GPT has no mixture-of-experts layer and LiBai no expert parallelism" + others);
      case Framework::kPaddle:
        return refuse(key, value, "PaddlePaddle's hybrid strategy as this export writes it (dp, mp, pp, sharding) has no expert parallel axis" + others);
      case Framework::kColossalai:
        return refuse(key, value, "Colossal-AI's legacy parallel config has no experts (its MoE runs under the booster's MoeHybridParallelPlugin, "
                                  "set in code, which this export does not write)" + others);
      case Framework::kHf:
        return refuse(key, value, "the Hugging Face export writes Llama, Qwen2 and GPT-2 config.json files only, no mixture-of-experts models yet");
      default:
        break;
    }
  }
  if (to == Framework::kLibai || to == Framework::kHf) {
    const std::string what = to == Framework::kLibai ? "LiBai's model config (model.cfg, its GPT)" : "the Hugging Face export (Llama, Qwen2 and GPT-2 config.json files)";
    if (m.qk_norm) return refuse("model.qk_norm", "true", what + " has no q/k norms; export to megatron, deepspeed or torchtitan");
    if (head_dim) {
      return refuse("model.head_dim", std::to_string(m.head_dim),
                    what + " has heads x head size = hidden only; export to megatron, deepspeed or torchtitan");
    }
  }
  return Status::OK();
}

// ----------------------------------------------------------------------------- LiBai

Result<Exported> export_libai(Ctx& x, const ExportOptions& options) {
  const RunConfig& c = x.c;
  if (c.parallel.tp_mode != TpMode::k1d) {
    return refuse("parallel.tp_mode", std::string(to_string(c.parallel.tp_mode)),
                  "LiBai has only 1D (Megatron) tensor parallelism; set parallel.tp_mode=1d to export to LiBai");
  }
  if (c.pipeline.schedule == Schedule::kInterleaved) {
    return refuse("pipeline.schedule", "interleaved", "LiBai runs the non-interleaved 1F1B schedule only; set pipeline.schedule=1f1b pipeline.virtual_stages=1 to export to LiBai");
  }
  if (Status s = refuse_cp(x, "LiBai"); !s) return s;
  if (auto n = order_note(c, Framework::kLibai, framework_order(Framework::kLibai, c)); !n.empty()) x.notes.push_back(n);
  if (c.train.precision == Precision::kBf16) x.notes.push_back("LiBai's train.amp computes in fp16; the plan's bf16 becomes fp16");
  if (c.train.recompute == Recompute::kSelective) {
    x.notes.push_back("LiBai checkpoints whole layers (train.activation_checkpoint) or none; selective recompute is not expressible, so it stays off");
  }
  if (c.parallel.sequence_parallel) x.notes.push_back("LiBai has no Megatron sequence parallelism; parallel.sequence_parallel is not exported");

  const std::vector<int> auto_ids = x.pp > 1 ? libai_auto_stage_ids(x.layers, x.pp) : std::vector<int>{};
  const bool custom = x.pp > 1 && auto_ids != x.p.layer_stage;
  const std::string path = options.config_path.empty() ? "configs/" + c.name + ".py" : options.config_path;

  std::ostringstream o;
  o << comment("LiBai configuration for " + c.name + ", written by stagecraft-cli export. Merge it into a LiBai training config "
               "whose model is LiBai's GPT (configs/common/models/gpt.py), e.g. configs/gpt2_pretrain.py.");
  o << comment(x.cluster_line() + "; " + x.sizes_line() + ".");
  o << comment("LiBai numbers ranks tp innermost, then dp, then pp (stages are contiguous blocks of " +
               std::to_string(c.world_size() / x.pp) + " ranks; libai/utils/distributed.py).");
  o << notes_block(x.notes);
  o << "#\n# The same layout on LiBai's command line (GPUs per node; on several nodes run it on each):\n";
  std::string cli = "bash tools/train.sh tools/train_net.py " + path + " " + std::to_string(c.cluster.gpus_per_node) +
                    " train.dist.data_parallel_size=" + std::to_string(x.dp) + " train.dist.tensor_parallel_size=" + std::to_string(x.tp) +
                    " train.dist.pipeline_parallel_size=" + std::to_string(x.pp) + " train.dist.pipeline_num_layers=" + std::to_string(x.layers);
  if (custom) {
    std::string ids = "[";
    for (size_t k = 0; k < x.p.layer_stage.size(); ++k) ids += (k ? "," : "") + std::to_string(x.p.layer_stage[k]);
    cli += " 'train.dist.custom_pipeline_stage_id=" + ids + "]'";
  }
  o << "#   " << cli << "\n";
  o << "from .common.models.gpt import pretrain_model as model\n";
  o << "from .common.optim import optim\n";
  o << "from .common.train import train\n\n";
  o << "model.cfg.num_layers = " << x.layers << "\n";
  o << "model.cfg.hidden_size = " << c.model.hidden << "\n";
  o << "model.cfg.num_attention_heads = " << c.model.heads << "\n";
  o << "model.cfg.ffn_hidden_size = " << c.model.ffn() << "\n";
  o << "model.cfg.max_seq_length = " << c.model.seq_len << "\n";
  o << "model.cfg.vocab_size = " << c.model.vocab << "\n\n";
  o << "train.dist.num_nodes = " << c.cluster.nodes << "\n";
  o << "train.dist.num_gpus_per_node = " << c.cluster.gpus_per_node << "\n";
  if (c.parallel.dp_auto()) {
    o << "# LiBai derives the data parallel size as world / (tp x pp) = " << c.world_size() << " / " << x.tp * x.pp << " = " << x.dp << "\n";
  }
  o << "train.dist.data_parallel_size = " << x.dp << "\n";
  o << "train.dist.tensor_parallel_size = " << x.tp << "\n";
  o << "train.dist.pipeline_parallel_size = " << x.pp << "\n";
  o << "train.dist.pipeline_num_layers = " << x.layers << "\n";
  if (x.pp > 1) {
    if (custom) {
      o << "# Layers per stage " << int_list(x.counts) << "; LiBai's own split would be " << int_list(counts_of(auto_ids, x.pp)) << ".\n";
      o << "train.dist.custom_pipeline_stage_id = " << run_length_ids(x.p.layer_stage) << "\n";
    } else {
      o << "# LiBai's own split of " << x.layers << " layers over " << x.pp << " stages, " << int_list(x.counts)
        << ", is this plan's: no custom_pipeline_stage_id.\n";
    }
  }
  o << "\n";
  o << "train.train_micro_batch_size = " << c.train.micro_batch << "\n";
  o << "train.num_accumulation_steps = " << x.m << "\n";
  o << "train.global_batch_size = " << c.train.global_batch << "\n";
  o << "train.train_iter = " << c.train.steps << "\n";
  o << "train.amp.enabled = " << (c.train.precision != Precision::kFp32 ? "True" : "False") << "\n";
  o << "train.activation_checkpoint.enabled = " << (c.train.recompute == Recompute::kFull ? "True" : "False") << "\n";
  // LiBai's ZeRO (OneFlow's sharding): stage 1 optimizer state, 2 and gradients, 3 and parameters.
  o << "train.zero_optimization.enabled = " << (c.parallel.zero >= 1 ? "True" : "False") << "\n";
  if (c.parallel.zero >= 1) o << "train.zero_optimization.stage = " << c.parallel.zero << "\n";
  o << "train.seed = " << c.train.seed << "\n";
  o << "optim.lr = " << py_float(c.train.lr) << "\n";
  o << "optim.weight_decay = " << py_float(c.train.weight_decay) << "\n";
  Exported e;
  e.files.push_back({c.name + ".py", o.str()});
  e.notes = x.notes;
  return e;
}

// ----------------------------------------------------------------------------- PaddlePaddle

std::string launch_ips(const RunConfig& c) {
  if (!c.cluster.hosts.empty()) {
    std::string s;
    for (const auto& h : c.cluster.hosts) s += (s.empty() ? "" : ",") + h.host;
    return "\"" + s + "\"";
  }
  if (c.cluster.nodes == 1) return "\"127.0.0.1\"";
  return "\"$NODE_IPS\"";
}

std::string gpu_list(int n) {
  std::string s;
  for (int k = 0; k < n; ++k) s += (k ? "," : "") + std::to_string(k);
  return s;
}

Result<Exported> export_paddle(Ctx& x) {
  const RunConfig& c = x.c;
  if (c.parallel.tp_mode != TpMode::k1d) {
    return refuse("parallel.tp_mode", std::string(to_string(c.parallel.tp_mode)),
                  "PaddlePaddle's hybrid parallelism has only 1D tensor (model) parallelism; set parallel.tp_mode=1d to export to Paddle");
  }
  if (Status s = refuse_cp(x, "PaddlePaddle's hybrid strategy"); !s) return s;
  const auto order = framework_order(Framework::kPaddle, c);
  if (auto n = order_note(c, Framework::kPaddle, order); !n.empty()) x.notes.push_back(n);
  if (c.parallel.zero >= 2) {
    x.notes.push_back(std::string("parallel.zero=") + std::to_string(c.parallel.zero) + " also shards " +
                      (c.parallel.zero == 2 ? "gradients" : "gradients and parameters") +
                      ": wrap the model and optimizer with paddle.distributed.sharding.group_sharded_parallel(model, optimizer, level='" +
                      (c.parallel.zero == 2 ? "os_g" : "p_g_os") + "') over the sharding group");
  }
  if (!x.counts_equal()) {
    x.notes.push_back("Paddle splits the layers in code (PipelineLayer's seg_method); build it so that the stages hold " +
                      int_list(x.counts) + " layers");
  }
  if (c.train.precision != Precision::kFp32) {
    x.notes.push_back("precision " + std::string(to_string(c.train.precision)) + " is set in the training loop: paddle.amp.auto_cast(dtype='" +
                      (c.train.precision == Precision::kBf16 ? "bfloat16" : "float16") + "')");
  }
  if (c.train.recompute != Recompute::kNone) x.notes.push_back("recompute is set on the model (PipelineLayer's recompute_interval), not in the strategy");
  if (c.parallel.sequence_parallel) x.notes.push_back("sequence parallelism is a model option in Paddle (e.g. PaddleNLP's sequence_parallel), not in the strategy");
  const int dp_degree = c.parallel.zero >= 1 ? 1 : x.dp;
  const int sharding = c.parallel.zero >= 1 ? x.dp : 1;

  std::ostringstream o;
  o << comment("PaddlePaddle hybrid parallel configuration for " + c.name + ", written by stagecraft-cli export.");
  o << comment(x.cluster_line() + "; " + x.sizes_line() + ".");
  o << comment("Paddle numbers ranks mp (tp) innermost, then sharding, then pp, then dp: CommunicateTopology([\"data\", \"pipe\", "
               "\"sharding\", \"model\"]) in paddle/distributed/fleet, here " + layout_order_text(order, x.cp) + ".");
  if (c.parallel.zero >= 1) {
    o << comment("parallel.zero=" + std::to_string(c.parallel.zero) + " runs as Paddle's sharding axis: dp_degree 1, sharding_degree " + std::to_string(x.dp) +
                 " (the sharding optimizer keeps 1/" + std::to_string(x.dp) + " of the optimizer state on each rank).");
  }
  o << notes_block(x.notes);
  o << "from paddle.distributed import fleet\n\n";
  o << "strategy = fleet.DistributedStrategy()\n";
  o << "strategy.hybrid_configs = {\n";
  o << "    \"dp_degree\": " << dp_degree << ",\n";
  o << "    \"mp_degree\": " << x.tp << ",\n";
  o << "    \"pp_degree\": " << x.pp << ",\n";
  o << "    \"sharding_degree\": " << sharding << ",\n";
  o << "}\n";
  if (x.pp == 1) o << "# Paddle reads pipeline_configs only when pp_degree > 1; with 1, accumulate the micro-batches in the training loop.\n";
  o << "strategy.pipeline_configs = {\n";
  o << "    \"accumulate_steps\": " << x.m << ",\n";
  o << "    \"micro_batch_size\": " << c.train.micro_batch << ",\n";
  o << "}\n";
  o << "fleet.init(is_collective=True, strategy=strategy)\n";
  if (x.pp > 1) {
    o << "\n# The model is a fleet.meta_parallel.PipelineLayer(layers=..., num_stages=" << x.pp;
    if (x.v > 1) o << ", num_virtual_pipeline_stages=" << x.v;
    o << ", ...);\n# layers per stage: " << int_list(x.counts) << ".\n";
  }
  o << "\n# Launch on each node:\n";
  if (c.cluster.nodes > 1 && c.cluster.hosts.empty()) o << "#   NODE_IPS: the " << c.cluster.nodes << " nodes' addresses, comma-separated, node 0 first\n";
  o << "#   python -m paddle.distributed.launch --gpus \"" << gpu_list(c.cluster.gpus_per_node) << "\" --ips " << launch_ips(c) << " train.py\n";
  Exported e;
  e.files.push_back({c.name + "_paddle.py", o.str()});
  e.notes = x.notes;
  return e;
}

// ----------------------------------------------------------------------------- Colossal-AI

Result<Exported> export_colossalai(Ctx& x) {
  const RunConfig& c = x.c;
  if (Status s = refuse_cp(x, "Colossal-AI's legacy parallel config"); !s) return s;
  const auto order = framework_order(Framework::kColossalai, c);
  if (auto n = order_note(c, Framework::kColossalai, order); !n.empty()) x.notes.push_back(n);
  if (!x.counts_equal()) {
    x.notes.push_back("Colossal-AI splits the layers when it builds the pipeline model (build_pipeline_model_from_cfg); build it so that the stages hold " +
                      int_list(x.counts) + " layers");
  }
  if (c.train.precision == Precision::kBf16) x.notes.push_back("the legacy config has fp16 AMP only; bf16 is not expressible and no fp16 section is written");
  if (c.parallel.zero >= 1) {
    x.notes.push_back("ZeRO-" + std::to_string(c.parallel.zero) + " has no key in the legacy parallel config (Colossal-AI shards with its "
                      "ZeRO optimizer or GeminiPlugin in code); parallel.zero is not exported");
  }
  if (c.parallel.sequence_parallel) x.notes.push_back("Megatron-style sequence parallelism has no key in the legacy config; parallel.sequence_parallel is not exported");
  if (c.train.recompute != Recompute::kNone) x.notes.push_back("activation checkpointing is a model option (checkpoint=True in Colossal-AI's models); train.recompute is not exported");

  std::ostringstream o;
  o << comment("Colossal-AI configuration for " + c.name + " (the `parallel = dict(...)` config of colossalai.launch), written by "
               "stagecraft-cli export.");
  o << comment(x.cluster_line() + "; " + x.sizes_line() + ". Colossal-AI infers the data parallel size, world / (pipeline x tensor).");
  o << comment("Colossal-AI numbers ranks tensor innermost, then pipeline, then data (Initializer_Pipeline), here " + layout_order_text(order, x.cp) +
               (c.parallel.tp_mode != TpMode::k1d ? "; each tensor group is its " + std::string(to_string(c.parallel.tp_mode)) + " grid" : "") + ".");
  o << notes_block(x.notes);
  if (c.train.precision == Precision::kFp16) o << "from colossalai.amp import AMP_TYPE\n\n";
  std::string tensor;
  if (x.tp > 1) {
    tensor = "tensor=dict(size=" + std::to_string(x.tp) + ", mode='" + std::string(to_string(c.parallel.tp_mode)) + "'";
    if (c.parallel.tp_mode == TpMode::k2p5d) tensor += ", depth=" + std::to_string(c.parallel.tp_depth);
    tensor += ")";
  }
  o << "parallel = dict(";
  if (x.pp > 1 || x.tp > 1) o << "\n";
  if (x.pp > 1) o << "    pipeline=" << x.pp << ",\n";
  if (x.tp > 1) o << "    " << tensor << ",\n";
  o << ")\n";
  if (x.pp > 1) {
    o << "# Samples per data-parallel rank and step, split into NUM_MICRO_BATCHES micro-batches of " << c.train.micro_batch << ".\n";
    o << "BATCH_SIZE = " << c.train.micro_batch * x.m << "\n";
    o << "NUM_MICRO_BATCHES = " << x.m << "\n";
    if (x.v > 1) o << "model = dict(num_chunks=" << x.v << ")  # colossalai.initialize runs InterleavedPipelineSchedule\n";
  } else {
    o << "# Samples per data-parallel rank and micro-batch; gradient_accumulation micro-batches per step.\n";
    o << "BATCH_SIZE = " << c.train.micro_batch << "\n";
    if (x.m > 1) o << "gradient_accumulation = " << x.m << "\n";
  }
  if (c.train.precision == Precision::kFp16) o << "fp16 = dict(mode=AMP_TYPE.TORCH)\n";
  if (c.train.grad_clip > 0) o << "clip_grad_norm = " << py_float(c.train.grad_clip) << "\n";
  Exported e;
  e.files.push_back({c.name + "_colossalai.py", o.str()});
  e.notes = x.notes;
  return e;
}

// ----------------------------------------------------------------------------- Megatron-LM

// How Megatron is told the layer split. Sources: megatron/training/arguments.py (validate_args:
// at most one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank
// and --pipeline-model-parallel-layout; the uneven first/last flags need the second for VPP) and
// megatron/core/transformer/transformer_config.py (the first and last stages' layers must divide
// by the VPP size, the middle layers evenly over the middle stages and their VPP chunks).
// Layout syntax from the Megatron Core user guide, "Custom Pipeline Model Parallel Layout":
// stages split by '|', E = embedding, t = decoder layer, L = loss, x*N and (...)*N repeat, commas
// cosmetic; stage i = vpp_rank * pp + pp_rank, which is Stagecraft's chunk order.
std::vector<std::string> megatron_split_args(const Ctx& x) {
  std::vector<std::string> args;
  if (x.pp == 1) return args;
  if (x.counts_equal()) {
    if (x.v > 1) args.push_back("--num-layers-per-virtual-pipeline-stage " + std::to_string(x.counts.front()));
    return args;
  }
  // First / last: every rank's chunks equal, the middle ranks equal to each other.
  bool ranks_uniform = true;
  std::vector<int> per_rank(static_cast<size_t>(x.pp));
  for (int p = 0; p < x.pp; ++p) {
    for (int a = 0; a < x.v; ++a) ranks_uniform = ranks_uniform && x.counts[static_cast<size_t>(a * x.pp + p)] == x.counts[static_cast<size_t>(p)];
    per_rank[static_cast<size_t>(p)] = x.v * x.counts[static_cast<size_t>(p)];
  }
  bool middle_equal = true;
  for (int p = 2; p < x.pp - 1; ++p) middle_equal = middle_equal && per_rank[static_cast<size_t>(p)] == per_rank[1];
  if (ranks_uniform && middle_equal) {
    const int first = per_rank.front(), last = per_rank.back();
    const int middle = x.pp > 2 ? per_rank[1] : last;
    if (x.v > 1) args.push_back("--num-virtual-stages-per-pipeline-rank " + std::to_string(x.v));
    if (first != middle) args.push_back("--decoder-first-pipeline-num-layers " + std::to_string(first));
    if (x.pp > 2 && last != middle) args.push_back("--decoder-last-pipeline-num-layers " + std::to_string(last));
    return args;
  }
  // The general case: the layout, runs of three or more equal middle stages written (t*k|)*n.
  auto stage = [&](size_t c) {
    std::string s = c == 0 ? "E" : "";
    const int n = x.counts[c];
    s += n == 1 ? "t" : "t*" + std::to_string(n);
    if (c + 1 == x.counts.size()) s += "L";
    return s;
  };
  std::string layout;
  size_t c = 0;
  while (c < x.counts.size()) {
    size_t run = 1;
    if (c > 0) {
      while (c + run < x.counts.size() - 1 && x.counts[c + run] == x.counts[c]) ++run;
    }
    if (run >= 3) {
      layout += "(" + stage(c) + "|)*" + std::to_string(run);
      c += run;
      if (c < x.counts.size()) layout += ",";
      continue;
    }
    layout += stage(c);
    if (c + 1 < x.counts.size()) layout += "|";
    ++c;
  }
  args.push_back("--pipeline-model-parallel-layout \"" + layout + "\"");
  return args;
}

// The architecture as Megatron-LM's flags (megatron/training/arguments.py): its defaults are
// GPT-2's (LayerNorm, learned absolute positions, GELU, biases, multi-head attention), so gpt2
// adds nothing; llama switches each part.
std::vector<std::string> megatron_arch_args(const config::ModelConfig& m) {
  const model::ModelDesc d = model::ModelDesc::from(m);
  std::vector<std::string> a;
  if (!d.llama()) return a;
  a.push_back("--normalization RMSNorm");
  if (d.norm_eps != 1e-5) a.push_back("--norm-epsilon " + py_float(d.norm_eps));
  a.push_back("--swiglu");
  a.push_back("--position-embedding-type rope");
  a.push_back("--rotary-base " + std::to_string(static_cast<long long>(d.rope_theta)));
  if (d.kv_heads != d.heads) {
    a.push_back("--group-query-attention");
    a.push_back("--num-query-groups " + std::to_string(d.kv_heads));
  }
  a.push_back("--disable-bias-linear");
  if (d.qkv_bias) a.push_back("--add-qkv-bias");
  // Qwen3's attention: RMSNorm over each head of q and k (the model's --normalization), and a head
  // size of its own (Megatron's kv_channels, hidden / heads when not given).
  if (d.qk_norm) a.push_back("--qk-layernorm");
  if (d.head_dim * d.heads != d.hidden) a.push_back("--kv-channels " + std::to_string(d.head_dim));
  return a;
}

// A mixture of experts as Megatron-Core's MoE flags (megatron/training/arguments.py, the moe group
// and those its ArgumentGroupFactory derives from TransformerConfig and ModelParallelConfig):
//   - the router: Megatron's default takes the top k logits and softmaxes them, which is
//     softmax over every expert then top k renormalised (norm_topk); --moe-router-pre-softmax
//     softmaxes first and keeps the k probabilities as they are (norm_topk false);
//   - expert parallelism folds over the stage's ranks as Stagecraft plans it (parallel folding);
//     --expert-tensor-parallel-size is always written, Megatron's default being tp, not 1;
//   - the shared experts are one MLP of their summed width (its help: num_shared_experts x
//     ffn_size_of_each_shared_expert); the first dense layers a --moe-layer-freq pattern.
std::vector<std::string> megatron_moe_args(const RunConfig& c) {
  const config::MoeConfig& e = c.model.moe;
  std::vector<std::string> a;
  if (!e.enabled()) return a;
  a.push_back("--num-experts " + std::to_string(e.experts));
  a.push_back("--moe-router-topk " + std::to_string(e.top_k));
  a.push_back("--moe-ffn-hidden-size " + std::to_string(c.model.moe_ffn()));
  if (e.shared_experts > 0) {
    a.push_back("--moe-shared-expert-intermediate-size " + std::to_string(static_cast<long long>(e.shared_experts) * c.model.moe_shared_ffn()));
  }
  if (e.dense_layers > 0) {
    a.push_back("--moe-layer-freq \"([0]*" + std::to_string(e.dense_layers) + "+[1]*" + std::to_string(c.model.layers - e.dense_layers) + ")\"");
  }
  if (!e.norm_topk) a.push_back("--moe-router-pre-softmax");
  if (e.aux_loss > 0) {
    a.push_back("--moe-router-load-balancing-type aux_loss");
    a.push_back("--moe-aux-loss-coeff " + py_float(e.aux_loss));
  } else {
    a.push_back("--moe-router-load-balancing-type none");
  }
  if (e.capacity_factor > 0) {
    a.push_back("--moe-expert-capacity-factor " + py_float(e.capacity_factor));
    a.push_back("--moe-token-drop-policy probs");
  }
  a.push_back("--expert-model-parallel-size " + std::to_string(c.parallel.ep));
  a.push_back("--expert-tensor-parallel-size " + std::to_string(c.parallel.expert_tp));
  a.push_back("--moe-token-dispatcher-type alltoall");
  a.push_back("--moe-grouped-gemm");
  return a;
}

Result<Exported> export_megatron(Ctx& x) {
  const RunConfig& c = x.c;
  if (c.parallel.tp_mode != TpMode::k1d) {
    return refuse("parallel.tp_mode", std::string(to_string(c.parallel.tp_mode)),
                  "Megatron-LM has only 1D tensor parallelism; set parallel.tp_mode=1d to export to Megatron-LM");
  }
  // Megatron-Core's TransformerConfig raises "When using expert parallelism and tensor
  // parallelism, sequence parallelism must be used".
  if (c.model.moe.enabled() && c.parallel.ep > 1 && x.tp > 1 && !c.parallel.sequence_parallel) {
    return refuse("parallel.sequence_parallel", "false",
                  "Megatron-Core requires sequence parallelism with expert and tensor parallelism (ep=" + std::to_string(c.parallel.ep) +
                      ", tp=" + std::to_string(x.tp) + "); set parallel.sequence_parallel=true to export to Megatron-LM");
  }
  const auto order = framework_order(Framework::kMegatron, c);
  if (auto n = order_note(c, Framework::kMegatron, order); !n.empty()) x.notes.push_back(n);
  if (c.parallel.sequence_parallel && x.tp == 1) x.notes.push_back("sequence parallelism needs tp > 1; --sequence-parallel is left out");
  if (c.pipeline.schedule == Schedule::kGpipe && x.pp > 1) x.notes.push_back("Megatron-LM runs 1F1B, not GPipe: the same bubble, fewer micro-batches in flight");
  std::vector<std::string> a;
  a.push_back("--tensor-model-parallel-size " + std::to_string(x.tp));
  a.push_back("--pipeline-model-parallel-size " + std::to_string(x.pp));
  // Interleaved needs no flag beyond the split: Megatron overlaps the pipeline's p2p communication
  // by default (only --no-overlap-p2p-communication turns it off), and with the overlap on
  // validate_args asks only pp > 1 of the interleaved schedule; pp > 2 is its rule without it
  // (megatron/training/arguments.py).
  for (auto& s : megatron_split_args(x)) a.push_back(s);
  if (x.cp > 1) {
    // Megatron-Core's context parallelism: p2p is the K/V ring, a2a Ulysses' head exchange.
    a.push_back("--context-parallel-size " + std::to_string(x.cp));
    a.push_back(std::string("--cp-comm-type ") + (c.parallel.cp_comm == config::CpComm::kRing ? "p2p" : "a2a"));
  }
  if (order != tp_dp_pp_order()) a.push_back("--use-tp-pp-dp-mapping");
  if (c.parallel.sequence_parallel && x.tp > 1) a.push_back("--sequence-parallel");
  // ZeRO: 1 the distributed optimizer; 2 and 3 Megatron-FSDP, which shards gradients (and
  // parameters) over the same dp x cp ranks (its data-parallel sharding strategies).
  if (c.parallel.zero >= 1) a.push_back("--use-distributed-optimizer");
  if (c.parallel.zero >= 2) {
    a.push_back("--use-megatron-fsdp");
    a.push_back(std::string("--data-parallel-sharding-strategy ") + (c.parallel.zero == 2 ? "optim_grads" : "optim_grads_params"));
    a.push_back("--no-gradient-accumulation-fusion");
    a.push_back("--ckpt-format fsdp_dtensor");
  }
  a.push_back("--num-layers " + std::to_string(x.layers));
  a.push_back("--hidden-size " + std::to_string(c.model.hidden));
  a.push_back("--num-attention-heads " + std::to_string(c.model.heads));
  a.push_back("--ffn-hidden-size " + std::to_string(c.model.ffn()));
  a.push_back("--seq-length " + std::to_string(c.model.seq_len));
  a.push_back("--max-position-embeddings " + std::to_string(c.model.seq_len));
  for (auto& s : megatron_arch_args(c.model)) a.push_back(s);
  for (auto& s : megatron_moe_args(c)) a.push_back(s);
  if (!c.model.tied_embeddings) a.push_back("--untie-embeddings-and-output-weights");
  a.push_back("--micro-batch-size " + std::to_string(c.train.micro_batch));
  a.push_back("--global-batch-size " + std::to_string(c.train.global_batch));
  if (c.train.recompute == Recompute::kSelective) a.push_back("--recompute-granularity selective");
  if (c.train.recompute == Recompute::kFull) {
    a.push_back("--recompute-granularity full");
    a.push_back("--recompute-method uniform");
    a.push_back("--recompute-num-layers 1");
  }
  if (c.train.precision == Precision::kBf16) a.push_back("--bf16");
  if (c.train.precision == Precision::kFp16) a.push_back("--fp16");
  // The residual stream in fp32, as Stagecraft's engine keeps it and the plan's memory counts it.
  if (c.train.precision != Precision::kFp32 && c.train.fp32_residual) a.push_back("--fp32-residual-connection");
  a.push_back("--train-iters " + std::to_string(c.train.steps));
  a.push_back("--lr " + py_float(c.train.lr));
  a.push_back("--min-lr " + py_float(c.train.min_lr));
  a.push_back("--lr-decay-style cosine");
  if (c.train.warmup_steps > 0) a.push_back("--lr-warmup-iters " + std::to_string(c.train.warmup_steps));
  a.push_back("--weight-decay " + py_float(c.train.weight_decay));
  a.push_back("--adam-beta1 " + py_float(c.train.beta1));
  a.push_back("--adam-beta2 " + py_float(c.train.beta2));
  a.push_back("--clip-grad " + py_float(c.train.grad_clip));
  a.push_back("--seed " + std::to_string(c.train.seed));
  // DP buckets during the backward; Megatron counts its bucket in parameters (fp32 main grads).
  if (c.parallel.overlap_grad_reduce && x.dp > 1) {
    a.push_back("--overlap-grad-reduce");
    if (c.parallel.grad_bucket_mb != config::ParallelConfig{}.grad_bucket_mb) {
      a.push_back("--ddp-bucket-size " + std::to_string(static_cast<long long>(c.parallel.grad_bucket_bytes() / sizeof(float))));
    }
  }

  std::ostringstream o;
  o << "#!/usr/bin/env bash\n";
  o << comment("Megatron-LM command line for " + c.name + ", written by stagecraft-cli export.");
  o << comment(x.cluster_line() + "; " + x.sizes_line() + ". Megatron derives the data parallel size, world / (tp x cp x pp).");
  if (c.model.moe.enabled()) {
    o << comment("Megatron orders ranks tp-cp-ep-dp-pp" + std::string(order == tp_dp_pp_order() ? "" : " (tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping)") +
                 "; its expert layers fold the same ranks as expert tp " + std::to_string(c.parallel.expert_tp) + " x ep " +
                 std::to_string(c.parallel.ep) + " x expert dp " + std::to_string(x.tp * x.cp * x.dp / (c.parallel.ep * c.parallel.expert_tp)) +
                 ", expert tp innermost (megatron/core/parallel_state.py), as the plan does.");
  } else {
    o << comment("Megatron orders ranks tp-cp-ep-dp-pp (ep = 1 here)" + std::string(order == tp_dp_pp_order() ? "" : ", tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping") +
                 " (megatron/core/parallel_state.py).");
  }
  if (x.pp > 1) o << comment("Layers per pipeline stage" + std::string(x.v > 1 ? " (chunk order: all pp ranks' first chunks, then the second)" : "") + ": " + int_list(x.counts) + ".");
  o << comment("The vocabulary (" + std::to_string(c.model.vocab) + ") comes from the tokenizer; Megatron pads it to a multiple of 128 x tp.");
  o << notes_block(x.notes);
  o << "MEGATRON_ARGS=(\n";
  for (const auto& s : a) o << "    " << s << "\n";
  o << ")\n";
  // validate_args (megatron/training/arguments.py) asserts CUDA_DEVICE_MAX_CONNECTIONS == "1" when
  // tp > 1 (or cp > 1) on GPUs before Blackwell: one hardware queue keeps kernels in launch order,
  // which its tensor-parallel communication overlap relies on. From Blackwell on it is not required.
  const bool one_connection = x.tp > 1 || x.cp > 1;
  if (one_connection) {
    o << comment("CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron-LM requires it with tensor or context parallelism on GPUs before "
                 "Blackwell (validate_args in megatron/training/arguments.py).");
  }
  o << "# Run on every node (node 0 is the master):\n";
  o << "#   " << (one_connection ? "CUDA_DEVICE_MAX_CONNECTIONS=1 " : "") << "torchrun --nnodes " << c.cluster.nodes << " --nproc_per_node " << c.cluster.gpus_per_node
    << " --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 6000 \\\n";
  // The tokenizer: GPT-2's BPE files, or a Llama's Hugging Face tokenizer (Megatron-LM's
  // --tokenizer-type HuggingFaceTokenizer reads it by name or directory).
  o << "#       pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" --data-path ... "
    << (c.model.llama() ? "--tokenizer-type HuggingFaceTokenizer --tokenizer-model ..." : "--vocab-file ... --merge-file ...") << "\n";
  Exported e;
  e.files.push_back({c.name + "_megatron.sh", o.str()});
  e.notes = x.notes;
  return e;
}

// ----------------------------------------------------------------------------- DeepSpeed

// ds_config.json has no MoE section: the model code builds each MoE layer as a
// deepspeed.moe.layer.MoE (deepspeed/moe/layer.py: hidden_size, expert, num_experts, ep_size, k,
// capacity_factor, drop_tokens, enable_expert_tensor_parallelism, ...), which forms its groups.
std::string deepspeed_moe_snippet(const Ctx& x) {
  const RunConfig& c = x.c;
  const config::MoeConfig& moe = c.model.moe;
  const int first = moe.dense_layers, last = c.model.layers - 1;
  std::ostringstream py;
  py << comment("DeepSpeed mixture-of-experts layers for " + c.name + ", written by stagecraft-cli export: ds_config.json has no MoE "
                "section; each MoE layer of the model code is a deepspeed.moe.layer.MoE, which forms the expert-parallel groups "
                "(ep_size ranks of each data-parallel group, deepspeed/utils/groups.py).");
  py << notes_block(x.notes);
  py << "from deepspeed.moe.layer import MoE\n\n";
  if (first > 0) {
    py << (first == 1 ? "# Layer 0 keeps" : "# Layers 0-" + std::to_string(first - 1) + " keep") << " the dense MLP (FFN " << c.model.ffn()
       << "); layers " << first << "-" << last << " put this in its place:\n";
  } else {
    py << "# Every layer (0-" << last << ") puts this in place of its MLP:\n";
  }
  py << "moe = MoE(\n";
  py << "    hidden_size=" << c.model.hidden << ",\n";
  py << "    expert=expert,  # one SwiGLU MLP of FFN " << c.model.moe_ffn() << ", from the model code\n";
  py << "    num_experts=" << moe.experts << ",\n";
  py << "    ep_size=" << c.parallel.ep << ",  # " << moe.experts / c.parallel.ep << " experts on each rank\n";
  py << "    k=" << moe.top_k << ",\n";
  if (moe.capacity_factor > 0) {
    py << "    capacity_factor=" << py_float(moe.capacity_factor) << ",\n";
    py << "    eval_capacity_factor=" << py_float(moe.capacity_factor) << ",\n";
    py << "    drop_tokens=True,\n";
  } else {
    py << "    drop_tokens=False,  # dropless, as the plan (model.moe.capacity_factor 0)\n";
  }
  if (x.tp > 1) py << "    enable_expert_tensor_parallelism=" << (c.parallel.expert_tp == x.tp ? "True" : "False") << ",\n";
  py << ")\n";
  py << "# moe(hidden_states) returns (output, l_aux, expert_counts): add " << py_float(moe.aux_loss) << " * l_aux to the loss.\n";
  if (c.parallel.zero >= 1) {
    py << "# With ZeRO the optimizer takes the expert parameters as their own groups:\n";
    py << "#   deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer(param_groups)\n";
  }
  return py.str();
}

Result<Exported> export_deepspeed(Ctx& x) {
  const RunConfig& c = x.c;
  if (c.parallel.tp_mode != TpMode::k1d) {
    return refuse("parallel.tp_mode", std::string(to_string(c.parallel.tp_mode)),
                  "DeepSpeed's model parallelism is Megatron's 1D; set parallel.tp_mode=1d to export to DeepSpeed");
  }
  if (c.pipeline.schedule == Schedule::kInterleaved) {
    return refuse("pipeline.schedule", "interleaved",
                  "DeepSpeed's PipelineEngine runs one model chunk per stage (no interleaving); set pipeline.schedule=1f1b pipeline.virtual_stages=1 to export to DeepSpeed");
  }
  if (c.parallel.zero >= 2 && x.pp > 1) {
    return refuse("parallel.zero", std::to_string(c.parallel.zero),
                  "DeepSpeed's PipelineEngine takes ZeRO stage 0 or 1 only; set parallel.zero=1 or parallel.pp=1 to export to DeepSpeed");
  }
  const config::MoeConfig& moe = c.model.moe;
  if (moe.enabled()) {
    // deepspeed/utils/groups.py forms the expert-parallel groups inside each data-parallel group
    // (ep_size must divide its size); MoE(enable_expert_tensor_parallelism=True) splits every
    // expert over the whole tensor-parallel group, False keeps it whole on each tp rank.
    if (x.dp % c.parallel.ep != 0) {
      return refuse("parallel.ep", std::to_string(c.parallel.ep),
                    "DeepSpeed forms its expert-parallel groups inside the data-parallel group (deepspeed/utils/groups.py): ep must divide dp = " +
                        std::to_string(x.dp) + "; export to megatron or torchtitan for experts folded over tensor-parallel ranks");
    }
    if (c.parallel.expert_tp != 1 && c.parallel.expert_tp != x.tp) {
      return refuse("parallel.expert_tp", std::to_string(c.parallel.expert_tp),
                    "DeepSpeed keeps each expert whole or splits it over the whole tensor-parallel group "
                    "(MoE's enable_expert_tensor_parallelism); set parallel.expert_tp=1 or " + std::to_string(x.tp));
    }
  }
  if (auto n = order_note(c, Framework::kDeepspeed, framework_order(Framework::kDeepspeed, c)); !n.empty()) x.notes.push_back(n);
  if (moe.enabled()) {
    if (x.tp * x.cp > c.parallel.expert_tp && c.parallel.ep > 1) {
      x.notes.push_back("DeepSpeed's expert-parallel groups are " + std::to_string(c.parallel.ep) +
                        " data-parallel ranks of one tp rank; the plan folds its tp" + std::string(x.cp > 1 ? " and cp" : "") +
                        " ranks into ep first: the same experts on every GPU, other EP and expert-DP groups");
    }
    if (moe.shared_experts > 0) {
      x.notes.push_back("DeepSpeed's MoE layer holds the routed experts only: build the " + std::to_string(moe.shared_experts) + " shared expert" +
                        (moe.shared_experts == 1 ? "" : "s") + " (FFN " + std::to_string(c.model.moe_shared_ffn()) +
                        ") as an MLP beside it in the model code");
    }
    if (!moe.norm_topk) x.notes.push_back("DeepSpeed's gate renormalises the top-k weights; the plan's model.moe.norm_topk=false is not expressible");
  }
  if (x.cp > 1 && c.parallel.cp_comm == config::CpComm::kRing) {
    x.notes.push_back("DeepSpeed splits sequences with Ulysses' all-to-all (sequence_parallel_size), not a K/V ring: the plan's "
                      "cp_comm=ring runs as all_to_all there, which needs cp to divide the heads of each tp rank");
  }
  if (x.tp > 1) {
    x.notes.push_back("ds_config.json does not carry tensor parallelism: it comes from the model code (Megatron-DeepSpeed: --tensor-model-parallel-size " +
                      std::to_string(x.tp) + ")");
  }
  if (x.pp > 1 && !x.counts_equal()) {
    x.notes.push_back("DeepSpeed's partition methods ('uniform', 'parameters', 'type:<regex>') cannot place exactly " + int_list(x.counts) +
                      " layers per stage; pipeline.py asks for a balanced split of the transformer layers");
  }
  if (c.train.recompute == Recompute::kSelective) x.notes.push_back("selective recompute is a model option (Megatron-DeepSpeed), not a ds_config key");
  if (c.parallel.sequence_parallel) x.notes.push_back("sequence parallelism is a model option (Megatron-DeepSpeed --sequence-parallel), not a ds_config key");

  Json ds = Json::object();
  ds.set("train_batch_size", c.train.global_batch);
  ds.set("train_micro_batch_size_per_gpu", c.train.micro_batch);
  ds.set("gradient_accumulation_steps", x.m);
  ds.set("gradient_clipping", c.train.grad_clip);
  // DeepSpeed-Ulysses: the sequence-parallel group splits each sequence (the engine reads it from
  // the config; the model's attention is wrapped in deepspeed.sequence.layer.DistributedAttention).
  if (x.cp > 1) ds.set("sequence_parallel_size", x.cp);
  Json zero = Json::object();
  zero.set("stage", c.parallel.zero);
  // DP buckets during the backward; DeepSpeed counts its bucket in elements.
  if (x.dp * x.cp > 1) zero.set("overlap_comm", c.parallel.overlap_grad_reduce);
  if (x.dp * x.cp > 1 && c.parallel.grad_bucket_mb != config::ParallelConfig{}.grad_bucket_mb) {
    zero.set("reduce_bucket_size", static_cast<long long>(c.parallel.grad_bucket_bytes() / sizeof(float)));
  }
  ds.set("zero_optimization", std::move(zero));
  if (c.train.precision == Precision::kBf16) {
    Json bf = Json::object();
    bf.set("enabled", true);
    ds.set("bf16", std::move(bf));
  } else if (c.train.precision == Precision::kFp16) {
    Json fp = Json::object();
    fp.set("enabled", true);
    fp.set("loss_scale", 0);
    fp.set("initial_scale_power", 16);
    fp.set("loss_scale_window", 1000);
    fp.set("hysteresis", 2);
    fp.set("min_loss_scale", 1);
    ds.set("fp16", std::move(fp));
  }
  Json params = Json::object();
  params.set("lr", c.train.lr);
  Json betas = Json::array();
  betas.push_back(c.train.beta1);
  betas.push_back(c.train.beta2);
  params.set("betas", std::move(betas));
  params.set("eps", 1e-8);
  params.set("weight_decay", c.train.weight_decay);
  Json opt = Json::object();
  opt.set("type", "AdamW");
  opt.set("params", std::move(params));
  ds.set("optimizer", std::move(opt));
  Json sched_params = Json::object();
  sched_params.set("total_num_steps", c.train.steps);
  sched_params.set("warmup_num_steps", c.train.warmup_steps);
  sched_params.set("warmup_min_ratio", 0.0);
  sched_params.set("cos_min_ratio", c.train.lr > 0 ? c.train.min_lr / c.train.lr : 0.0);
  Json sched = Json::object();
  sched.set("type", "WarmupCosineLR");
  sched.set("params", std::move(sched_params));
  ds.set("scheduler", std::move(sched));

  std::ostringstream h;
  h << comment("DeepSpeed hostfile for " + c.name + ", written by stagecraft-cli export: " + x.cluster_line() + "; " + x.sizes_line() + ".");
  h << comment("deepspeed --hostfile <this file> train.py --deepspeed --deepspeed_config ds_config.json");
  h << comment("DeepSpeed numbers ranks in hostfile order, tp innermost, then dp, then pp (PipeModelDataParallelTopology, "
               "deepspeed/runtime/pipe/topology.py).");
  h << notes_block(x.notes);
  if (!c.cluster.hosts.empty()) {
    for (const auto& host : c.cluster.hosts) h << host.host << " slots=" << host.slots << "\n";
  } else if (c.cluster.nodes == 1) {
    h << "localhost slots=" << c.cluster.gpus_per_node << "\n";
  } else {
    h << "# Replace node0 ... node" << c.cluster.nodes - 1 << " with your hosts (names from ~/.ssh/config or addresses).\n";
    for (int n = 0; n < c.cluster.nodes; ++n) h << "node" << n << " slots=" << c.cluster.gpus_per_node << "\n";
  }

  Exported e;
  e.files.push_back({"ds_config.json", ds.dump(2) + "\n"});
  e.files.push_back({"hostfile", h.str()});
  if (x.pp > 1) {
    std::ostringstream py;
    py << comment("DeepSpeed pipeline parallelism for " + c.name + " is set in the training code, not in ds_config.json: build the "
                  "model as a PipelineModule.");
    py << notes_block(x.notes);
    py << "from deepspeed.pipe import PipelineModule\n";
    if (x.tp > 1) py << "from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology\n";
    py << "\n";
    if (x.tp > 1) {
      py << "topology = PipeModelDataParallelTopology(num_pp=" << x.pp << ", num_mp=" << x.tp << ", num_dp=" << x.dp << ")\n";
    }
    py << "model = PipelineModule(\n";
    py << "    layers=layers,  # LayerSpecs: the embedding, " << x.layers << " transformer layers, the head\n";
    if (x.tp > 1) py << "    topology=topology,\n";
    else py << "    num_stages=" << x.pp << ",\n";
    if (x.counts_equal()) {
      py << "    partition_method=\"type:transformer\",  # " << x.counts.front() << " transformer layers on each of the " << x.pp << " stages\n";
    } else {
      py << "    partition_method=\"type:transformer\",  # the plan: " << int_list(x.counts) << " layers per stage (see the NOTE)\n";
    }
    if (c.train.recompute == Recompute::kFull) py << "    activation_checkpoint_interval=1,\n";
    py << "    loss_fn=loss_fn,\n";
    py << ")\n";
    py << "# Layers per stage: " << int_list(x.counts) << "; stage 0 also holds the embedding, the last the head and loss.\n";
    e.files.push_back({"pipeline.py", py.str()});
  }
  if (moe.enabled()) e.files.push_back({"moe.py", deepspeed_moe_snippet(x)});
  e.notes = x.notes;
  return e;
}

// ----------------------------------------------------------------------------- Hugging Face

// The planned model's config.json (model.h: hf_config_json), which transformers' AutoConfig and
// AutoModelForCausalLM read; the layout has no place in it.
// ----------------------------------------------------------------------------- torchtitan

// torchtitan (pytorch/torchtitan) takes its run as a Python configuration (--module, --config)
// and, over it, `--section.option` command-line options; the options here are those of its
// torchtitan/config/configs.py and trainer.py at commit b5bcd76 (2026-08-21).
Result<Exported> export_torchtitan(Ctx& x) {
  const RunConfig& c = x.c;
  if (c.parallel.tp_mode != TpMode::k1d) {
    return refuse("parallel.tp_mode", std::string(to_string(c.parallel.tp_mode)),
                  "torchtitan has only 1D tensor parallelism; set parallel.tp_mode=1d to export to torchtitan");
  }
  if (c.train.precision == Precision::kFp16) {
    return refuse("train.precision", "fp16", "torchtitan trains in bf16 or fp32 (training.mixed_precision_param); set train.precision=bf16");
  }
  // Experts (torchtitan/distributed/parallel_dims.py): with expert_parallel_degree above 1 the
  // experts fold over dp_shard x cp x tp as efsdp x ep, ep innermost, whole on each rank (ep
  // "borrows ranks from FSDP and TP"); with it 1, every expert is split over the tp ranks
  // (torchtitan/models/common/moe_sharding.py). dp_replicate stays outside.
  const config::MoeConfig& moe = c.model.moe;
  const int ep = moe.enabled() ? c.parallel.ep : 1;
  if (ep > 1 && c.parallel.expert_tp != 1) {
    return refuse("parallel.expert_tp", std::to_string(c.parallel.expert_tp),
                  "torchtitan's expert parallelism keeps every expert whole on its rank (its sparse mesh is efsdp x ep, no tensor "
                  "parallelism inside an expert); set parallel.expert_tp=1 to export to torchtitan");
  }
  if (ep > 1 && c.parallel.zero == 0 && (x.tp * x.cp) % ep != 0) {
    return refuse("parallel.ep", std::to_string(ep),
                  "torchtitan folds the experts over dp_shard x cp x tp, and with parallel.zero=0 its data parallelism is replicated "
                  "(dp_shard 1): ep must divide tp x cp = " + std::to_string(x.tp * x.cp) + "; set parallel.zero=1 (FSDP) or such an ep");
  }
  const auto order = framework_order(Framework::kTorchtitan, c);
  if (auto n = order_note(c, Framework::kTorchtitan, order); !n.empty()) x.notes.push_back(n);
  if (moe.enabled() && ep == 1 && x.tp > 1 && c.parallel.expert_tp != x.tp) {
    x.notes.push_back("torchtitan splits every expert over the tp ranks when expert_parallel_degree is 1 (expert tp " + std::to_string(x.tp) +
                      "), not the plan's parallel.expert_tp=" + std::to_string(c.parallel.expert_tp) + ": less expert memory per GPU, more TP traffic");
  }
  const int seq = c.model.seq_len;
  std::vector<std::string> a;
  // Data parallelism: replicated (DDP) without ZeRO; sharded by FSDP2 with it, which shards
  // parameters, gradients and optimizer state alike (ZeRO-3); keeping the gathered parameters
  // from the forward to the backward (reshard_after_forward never) is ZeRO-2's traffic.
  a.push_back("--parallelism.data_parallel_replicate_degree " + std::to_string(c.parallel.zero == 0 ? x.dp : 1));
  a.push_back("--parallelism.data_parallel_shard_degree " + std::to_string(c.parallel.zero == 0 ? 1 : x.dp));
  if (c.parallel.zero == 2 && x.dp * x.cp > 1) a.push_back("--parallelism.fsdp_reshard_after_forward never");
  if (c.parallel.zero == 1 && x.dp * x.cp > 1) {
    x.notes.push_back("torchtitan's FSDP shards the parameters and gradients over dp too (ZeRO-3), not the optimizer state only: less "
                      "memory per GPU than the plan's parallel.zero=1, an all-gather per layer more");
  }
  if (x.cp > 1) {
    a.push_back("--parallelism.context_parallel_degree " + std::to_string(x.cp));
    if (c.parallel.cp_comm == config::CpComm::kAllToAll) {
      x.notes.push_back("torchtitan's context parallelism rotates K and V around the ring (allgather or alltoall rotation of its ring "
                        "attention), not Ulysses' head exchange: the plan's cp_comm=all_to_all runs as a ring there");
    }
  }
  a.push_back("--parallelism.tensor_parallel_degree " + std::to_string(x.tp));
  if (x.tp > 1 && !c.parallel.sequence_parallel) {
    x.notes.push_back("torchtitan runs tensor parallelism with sequence parallelism on (parallelism.enable_sequence_parallel): less "
                      "activation memory than the plan's");
  }
  a.push_back("--parallelism.pipeline_parallel_degree " + std::to_string(x.pp));
  if (moe.enabled()) a.push_back("--parallelism.expert_parallel_degree " + std::to_string(ep));
  if (x.pp > 1) {
    const char* schedule = c.pipeline.schedule == Schedule::kGpipe ? "GPipe" : x.v > 1 ? "Interleaved1F1B" : "1F1B";
    a.push_back(std::string("--parallelism.pipeline_parallel_schedule ") + schedule);
    a.push_back("--parallelism.num_pp_microbatches " + std::to_string(x.m));
    if (x.counts_equal()) {
      a.push_back("--parallelism.pipeline_parallel_layers_per_stage " + std::to_string(x.counts.front()));
    } else {
      x.notes.push_back("the plan's stages hold " + int_list(x.counts) +
                        " layers; torchtitan splits evenly or by parallelism.module_fqns_per_model_part: set that list in the configuration");
    }
  }
  a.push_back("--training.num_tokens_per_microbatch_per_dp_rank " + std::to_string(static_cast<long long>(c.train.micro_batch) * seq));
  a.push_back("--training.num_tokens_per_train_step " + std::to_string(static_cast<long long>(c.train.global_batch) * seq));
  a.push_back("--training.max_context_length " + std::to_string(seq));
  a.push_back("--training.max_norm " + py_float(c.train.grad_clip));
  a.push_back("--training.steps " + std::to_string(c.train.steps));
  a.push_back(std::string("--training.mixed_precision_param ") + (c.train.precision == Precision::kBf16 ? "bfloat16" : "float32"));
  a.push_back("--lr_scheduler.warmup_steps " + std::to_string(c.train.warmup_steps));
  a.push_back("--lr_scheduler.decay_type cosine");
  a.push_back("--lr_scheduler.min_lr_factor " + py_float(c.train.lr > 0 ? c.train.min_lr / c.train.lr : 0.0));
  a.push_back("--debug.seed " + std::to_string(c.train.seed));
  x.notes.push_back("the optimizer's lr " + py_float(c.train.lr) + ", betas (" + py_float(c.train.beta1) + ", " + py_float(c.train.beta2) +
                    ") and weight decay " + py_float(c.train.weight_decay) + " go in the configuration's optimizer param groups");
  if (c.train.recompute != Recompute::kNone) {
    x.notes.push_back(std::string("recompute ") + std::string(to_string(c.train.recompute)) +
                      ": choose that activation checkpointing in the configuration (activation_checkpoint)");
  }
  const auto d = model::ModelDesc::from(c.model);
  x.notes.push_back("the model comes from the configuration (--module, --config): " + d.summary() +
                    (moe.enabled() ? std::string("; so do its router (") + (moe.norm_topk ? "top-k weights renormalised" : "softmax weights kept") +
                                         ", load-balancing loss " + py_float(moe.aux_loss) + ") and its " +
                                         (moe.capacity_factor > 0 ? "capacity factor " + py_float(moe.capacity_factor) : std::string("dropless dispatch"))
                                   : std::string()));

  std::ostringstream o;
  o << "#!/usr/bin/env bash\n";
  o << comment("torchtitan command line for " + c.name + ", written by stagecraft-cli export.");
  o << comment(x.cluster_line() + "; " + x.sizes_line() + ".");
  o << comment("torchtitan's device mesh orders pp, dp_replicate, dp_shard, cp, tp from outermost to innermost (" +
               layout_order_text(order, x.cp) + " here). "
               "Its options as of torchtitan b5bcd76 (2026-08-21, torchtitan/config/configs.py); they override the "
               "configuration's.");
  if (x.pp > 1) o << comment("Layers per pipeline stage" + std::string(x.v > 1 ? " (chunk order)" : "") + ": " + int_list(x.counts) + ".");
  o << notes_block(x.notes);
  o << "TORCHTITAN_ARGS=(\n";
  for (const auto& s : a) o << "    " << s << "\n";
  o << ")\n";
  o << "# Run on every node (node 0 is the master), from torchtitan's repository:\n";
  o << "#   torchrun --nnodes " << c.cluster.nodes << " --nproc_per_node " << c.cluster.gpus_per_node
    << " --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500 \\\n";
  // torchtitan's model modules (torchtitan/models): qwen3 has Qwen3's q/k norms, head size and
  // mixture of experts; llama3 the dense Llama; other models name their own.
  const char* module = c.model.qk_norm ? "qwen3" : c.model.llama() && !moe.enabled() ? "llama3" : "MODULE";
  o << "#       -m torchtitan.train --module torchtitan_recipes." << module << " --config CONFIG "
    << "\"${TORCHTITAN_ARGS[@]}\"\n";
  Exported e;
  e.files.push_back({c.name + "_torchtitan.sh", o.str()});
  e.notes = x.notes;
  return e;
}

Result<Exported> export_hf(Ctx& x) {
  Exported e;
  e.files.push_back({"config.json", model::hf_config_json(x.c.model)});
  e.notes.push_back("config.json describes the model only: the layout (" + x.sizes_line() + ") is not part of it");
  return e;
}

}  // namespace

Result<Exported> export_files(const RunConfig& config, Framework to, const ExportOptions& options) {
  auto plan = plan::make_plan(config);
  if (!plan.ok()) return plan.status();
  if (Status s = refuse_model(config, to); !s) return s;
  Ctx x(config, plan.value());
  if (to == Framework::kHf) return export_hf(x);
  if (config.model.llama() && to != Framework::kMegatron && to != Framework::kTorchtitan) {
    // The layout frameworks take the model from the training code, not from this config.
    const auto d = model::ModelDesc::from(config.model);
    x.notes.push_back(framework_title(to) + " builds the model in the training code: make it a Llama (RMSNorm, SwiGLU, rotary positions, " +
                      std::to_string(d.kv_heads) + " key/value heads" + (d.qkv_bias ? ", q/k/v biases" : "") +
                      (d.qk_norm ? ", RMSNorm over each head of q and k" : "") +
                      (d.head_dim * d.heads != d.hidden ? ", heads of " + std::to_string(d.head_dim) + " channels" : "") +
                      "); this config carries the layout");
  }
  switch (to) {
    case Framework::kLibai: return export_libai(x, options);
    case Framework::kPaddle: return export_paddle(x);
    case Framework::kColossalai: return export_colossalai(x);
    case Framework::kMegatron: return export_megatron(x);
    case Framework::kDeepspeed: return export_deepspeed(x);
    case Framework::kTorchtitan: return export_torchtitan(x);
    case Framework::kHf: break;
  }
  return Status::internal("export: unknown framework");
}

Result<std::string> export_config(const RunConfig& config, Framework to, const ExportOptions& options) {
  auto e = export_files(config, to, options);
  if (!e.ok()) return e.status();
  if (e->files.size() == 1) return e->files.front().text;
  std::string out;
  for (const auto& f : e->files) out += (out.empty() ? "" : "\n") + std::string("==> ") + f.name + " <==\n" + f.text;
  return out;
}

}  // namespace stagecraft::interop
