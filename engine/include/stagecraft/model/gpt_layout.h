// GptLayout: every parameter tensor of the GPT-2 model, with its Hugging Face name, full shape,
// initialisation, and how Megatron 1D tensor parallelism splits it.
//
// Names and shapes are those of Hugging Face GPT-2 checkpoints (docs/ARCHITECTURE.md §5), C = hidden,
// F = ffn_hidden, V = vocab, P = seq_len (positions):
//   wte.weight [V, C]  wpe.weight [P, C]                                     replicated
//   h.{i}.ln_1.weight/bias [C]   h.{i}.ln_2.weight/bias [C]                  replicated
//   h.{i}.attn.c_attn.weight [C, 3C]  .bias [3C]     column-parallel by head: TP rank r holds
//        columns [rC/t, (r+1)C/t) of each of the q, k and v thirds
//   h.{i}.attn.c_proj.weight [C, C]  row-parallel (rows [rC/t, (r+1)C/t)); .bias [C] replicated
//   h.{i}.mlp.c_fc.weight [C, F]  .bias [F]          column-parallel
//   h.{i}.mlp.c_proj.weight [F, C]  row-parallel; .bias [C] replicated
//   ln_f.weight/bias [C]                                                     replicated
//   lm_head.weight [V, C]   only when model.tied_embeddings is false            replicated
// Weights are stored (in, out) as GPT-2's Conv1D does, so y = x W + b.
// Initialisation (GPT-2): weights N(0, 0.02), the two c_proj weights N(0, 0.02 / sqrt(2 L)),
// biases 0, LayerNorm weights 1. Each element's value is a function of (seed, tensor id, full
// element index), so a shard or a stage initialises exactly as the whole model would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stagecraft/config/run_config.h"

namespace stagecraft::model {

enum class Split {
  kReplicated,  // every TP rank holds all of it
  kColumn,      // last dimension split in t contiguous parts
  kQkvColumn,   // last dimension is q | k | v; each third split in t parts (heads)
  kRow,         // first dimension split in t contiguous parts
};

enum class Place { kFirstStage, kLayer, kLastStage };

struct ParamSpec {
  std::string name;             // Hugging Face GPT-2 name
  std::vector<int64_t> shape;   // full, unsharded
  Split split = Split::kReplicated;
  Place place = Place::kLayer;
  int layer = -1;               // transformer block index for kLayer
  double init_std = 0.0;        // > 0: N(0, init_std); else every element init_value
  float init_value = 0.0f;
  bool weight_decay = false;    // AdamW decays matrices, not biases or LayerNorm
  uint64_t id = 0;              // stable per name, for the initialisation streams

  int64_t numel() const;
};

// Every parameter in Hugging Face order: wte, wpe, h.0 ... h.{L-1}, ln_f (, lm_head).
std::vector<ParamSpec> gpt_params(const config::ModelConfig& model);

// Shape of TP rank's shard.
std::vector<int64_t> shard_shape(const ParamSpec& p, int tp);
int64_t shard_numel(const ParamSpec& p, int tp);
// Flat index in the full tensor of element `i` of TP rank's shard.
int64_t full_index(const ParamSpec& p, int tp, int tp_rank, int64_t i);
// Copy a shard out of a full tensor and back.
void extract_shard(const ParamSpec& p, int tp, int tp_rank, const float* full, float* shard);
void insert_shard(const ParamSpec& p, int tp, int tp_rank, const float* shard, float* full);

// The Hugging Face config.json of the model (GPT2LMHeadModel).
std::string hf_config_json(const config::ModelConfig& model);

}  // namespace stagecraft::model
