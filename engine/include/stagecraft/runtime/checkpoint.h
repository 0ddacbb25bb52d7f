// Checkpoints: a directory `<checkpoint_dir>/step-<N>/` holding
//   model.safetensors   the whole model, in Hugging Face's names and shapes (model/model.h: GPT-2's
//                       or Llama's), which transformers loads
//   config.json         its Hugging Face config (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM)
//   optimizer.safetensors  AdamW moments of every tensor, full shapes ("exp_avg.<name>",
//                       "exp_avg_sq.<name>"), so a run can resume with another (dp, tp, pp)
//   trainer.json        {"step": N, "seed": S, "tokens": ...}: what resume needs besides
//                       (batches are a function of (seed, step); there is no other RNG state)
//   run.yaml            the run configuration that wrote it
// A save writes the whole directory beside the old one (step-N.partial-PID), every file synced to
// the disk, then gives it the name step-N in one rename (swapping with an older step-N, which is
// then removed): a crash or a full disk mid-save leaves what was there before, never a mix.
//
// Shards move through full tensors: a rank contributes its TP shard of each tensor it holds
// (insert_shard), and takes its shard of any full tensor (extract_shard), whatever layout
// wrote the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stagecraft/core/status.h"
#include "stagecraft/runtime/gpt_stage.h"
#include "stagecraft/runtime/safetensors.h"

namespace stagecraft::runtime {

struct TrainerState {
  int64_t step = 0;       // optimizer steps completed
  uint64_t seed = 0;
  double tokens = 0;      // tokens trained on so far
  // train.precision fp16 (loss_scaler.h); 0 in other runs and in older checkpoints, where a
  // resumed fp16 run starts from the scaler's defaults.
  double loss_scale = 0;
  int64_t loss_scale_clean_steps = 0;
  int64_t skipped_steps = 0;  // steps skipped for a non-finite gradient (no AdamW update)
};

// "<dir>/step-<N>".
std::string checkpoint_path(const std::string& dir, int64_t step);

// Copies this stage's shards of `file`'s tensors into `dst` (params, or a moment buffer laid out
// like them). Fails naming the first tensor that is missing or has the wrong shape.
Status load_shards(const GptStage& stage, const TensorFile& file, const std::string& prefix, float* dst);

// Adds this stage's shards of `src` into full tensors (allocated on first use), for saving.
// Replicated tensors are taken from TP rank 0 only; the tied head copy is skipped.
void add_shards(const GptStage& stage, const float* src, const std::string& prefix, std::map<std::string, NamedTensor>& full);

// The same for the stage's routed experts (GptStage::expert_slots): whole tensors, copied as they are,
// into or out of a buffer laid out like the stage's expert buffer.
Status load_expert_shards(const GptStage& stage, const TensorFile& file, const std::string& prefix, float* dst);
void add_expert_shards(const GptStage& stage, const float* src, const std::string& prefix, std::map<std::string, NamedTensor>& full);

// Writes a complete checkpoint directory from full tensors.
Status write_checkpoint(const std::string& path, const config::ModelConfig& model, const std::string& run_yaml,
                        const std::vector<NamedTensor>& model_tensors, const std::vector<NamedTensor>& optimizer_tensors,
                        const TrainerState& state);

struct Checkpoint {
  TensorFile model;
  TensorFile optimizer;  // empty when the directory holds no optimizer state
  TrainerState state;
};
// Reads a checkpoint directory for `model`; `with_optimizer` also reads optimizer.safetensors.
// Refuses, in one line naming what to change: a trainer.json whose fields are of the wrong type
// or impossible (a negative count, more skipped steps than steps, a loss scale the scaler cannot
// reach); a checkpoint of another model (its config.json against `model`: layers, hidden, heads,
// vocab, seq_len, MLP width, tied embeddings); and a tensor `model` does not have. Missing tensors
// and wrong shapes are load_shards'.
Result<Checkpoint> read_checkpoint(const std::string& path, const config::ModelConfig& model, bool with_optimizer);

// The weights of a model directory for `model`: a checkpoint's, or a Hugging Face model's (its
// model.safetensors, or the shards its model.safetensors.index.json maps; F32, F16 or BF16), for
// train.init and eval. Refuses in one line, naming the key: a config.json of another model (as
// read_checkpoint does, and rope scaling, o_proj or MLP biases, another activation), a tensor the
// model does not have (rotary inverse-frequency buffers are skipped). Missing tensors and wrong
// shapes are load_shards'.
Result<TensorFile> read_model_dir(const std::string& path, const config::ModelConfig& model);

}  // namespace stagecraft::runtime
