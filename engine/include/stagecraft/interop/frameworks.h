// Export of a run configuration to other frameworks' configs, and import back.
//
// export: a valid RunConfig -> the files that make LiBai, PaddlePaddle, Colossal-AI, Megatron-LM
// or DeepSpeed run the same layout: the same dp / tp / pp sizes, the same layers on every stage,
// the same micro-batches, and the same groups wherever the framework's rank order allows. What a
// framework cannot express is handled in one of two ways:
//   - a layout it cannot run at all is refused (kInvalidInput) with the key to change: tensor
//     modes other than 1d outside Colossal-AI, the interleaved schedule in LiBai and DeepSpeed,
//     a mixture of experts outside Megatron-LM, DeepSpeed and torchtitan, expert layouts those
//     cannot form (DeepSpeed: ep within dp, expert_tp 1 or tp; torchtitan: expert_tp 1 with ep),
//     Qwen3's q/k norms and head size where the written config describes the model (LiBai, hf);
//   - what it runs differently, or what lives in the training code rather than in its config (a
//     fixed rank order that forms other groups than the plan, a layer split it only takes in
//     code, bf16 where only fp16 is offered, selective recompute, sequence parallelism, ZeRO), is
//     said in the output's comments and listed in Exported::notes, one line each.
// Every framework fixes the order of its ranks; parallel.order decides whether they agree:
//   LiBai tp-dp-pp, Megatron-LM tp-dp-pp (tp-pp-dp with --use-tp-pp-dp-mapping), DeepSpeed
//   tp-dp-pp (PipeModelDataParallelTopology), PaddlePaddle tp-pp-dp (tp-dp-pp when zero=1 runs as
//   its sharding axis), Colossal-AI tp-pp-dp. The sources are cited where each is written.
//
// import: the text of a LiBai, PaddlePaddle or Colossal-AI Python config (read with the safe
// evaluator of python_literal.h, never executed), of a DeepSpeed ds_config JSON, or of a Hugging
// Face config.json (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, GPT2LMHeadModel: the model
// section; Qwen2-MoE's shared expert is read without its sigmoid gate, which Stagecraft's model
// does not have) -> a RunConfig.
// Whatever the format does not carry comes from `base` (the model shape, usually; the cluster;
// the learning rate), or from RunConfig's defaults without one. The result is validated like a
// loaded file; every problem is one line "origin:line: key=value: rule", lines pointing into the
// imported file where the value came from. Spellings are kept where they mean the same plan:
// dp stays `auto`, the order and the partition kind stay the base's when the framework's give the
// same groups and stages. So import(export(c), base c) plans exactly like c (same sizes, groups,
// stages, micro-batches) for every format with an import, except where export noted a difference.
//
// Status codes: kInvalidInput for anything about the input. All functions are pure and
// thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"

namespace stagecraft::interop {

// kHf: a Hugging Face model's config.json, the model section only (import); export writes the
// planned model's config.json. kTorchtitan: torchtitan's command-line options (export only).
enum class Framework { kLibai, kPaddle, kColossalai, kMegatron, kDeepspeed, kHf, kTorchtitan };

std::string_view to_string(Framework f);  // "libai" "paddle" "colossalai" "megatron" "deepspeed" "hf" "torchtitan"
std::optional<Framework> parse_framework(std::string_view s);
// "libai|paddle|colossalai|megatron|deepspeed|hf|torchtitan", for messages.
std::string framework_choices(bool importable_only = false);
// Megatron-LM and torchtitan have no import: their plan is a command line.
bool can_import(Framework f);

struct ExportOptions {
  // The file the LiBai config is saved as, named in its `bash tools/train.sh` line; empty:
  // configs/<name>.py.
  std::string config_path;
};

struct ExportFile {
  std::string name;  // a suggested file name: "libai_config.py", "ds_config.json", "hostfile", ...
  std::string text;
};

struct Exported {
  std::vector<ExportFile> files;   // files[0] is the configuration itself
  std::vector<std::string> notes;  // what the framework runs differently from the plan, one line each
};

Result<Exported> export_files(const config::RunConfig& config, Framework to, const ExportOptions& options = {});

// The export as one text: the single file, or every file under a "==> name <==" header.
Result<std::string> export_config(const config::RunConfig& config, Framework to, const ExportOptions& options = {});

// `origin` names the text in messages (usually its path) and, without a base, the run.
Result<config::RunConfig> import_config(std::string_view text, Framework from, const config::RunConfig* base, std::string_view origin);

// LiBai's own stage of every layer when custom_pipeline_stage_id is not given
// (libai/utils/distributed.py, _DistributeUtil._init_placement_group): with pp >= 4 stages and
// layers >= 8 divisible by pp, it counts min(pp - 1, layers / pp) extra layers so that the middle
// stages hold more; then floor(n / pp) per stage with the n mod pp extra layers on the last stages;
// the list is cut to `layers`. 24 layers on 4 stages give [6, 7, 7, 4] per stage; 24 on 8 give
// [3, 3, 3, 3, 3, 4, 4, 1]; 24 on 2 give [12, 12]. Needs 1 <= pp <= layers.
std::vector<int> libai_auto_stage_ids(int layers, int pp);

}  // namespace stagecraft::interop
