// Checkpoint directories. See checkpoint.h.
#include "stagecraft/runtime/checkpoint.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "stagecraft/config/config_io.h"
#include "stagecraft/core/json.h"

namespace stagecraft::runtime {

std::string checkpoint_path(const std::string& dir, int64_t step) { return dir + "/step-" + std::to_string(step); }

Status load_shards(const GptStage& stage, const TensorFile& file, const std::string& prefix, float* dst) {
  const int tp = stage.spec().tp, tp_rank = stage.spec().tp_rank;
  for (const auto& slot : stage.param_slots()) {
    const std::string name = prefix + slot.spec.name;
    const NamedTensor* t = file.find(name);
    if (!t) return Status::invalid_input("checkpoint: tensor " + name + " is missing (a checkpoint of another model shape?)");
    if (t->shape != slot.spec.shape) {
      std::string want, got;
      for (auto d : slot.spec.shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      for (auto d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return Status::invalid_input("checkpoint: tensor " + name + " has shape [" + got + "], the configured model needs [" + want + "]");
    }
    model::extract_shard(slot.spec, tp, tp_rank, t->data.data(), dst + slot.offset);
  }
  return Status::OK();
}

Status load_expert_shards(const GptStage& stage, const TensorFile& file, const std::string& prefix, float* dst) {
  for (const auto& slot : stage.expert_slots()) {
    const std::string name = prefix + slot.spec.name;
    const NamedTensor* t = file.find(name);
    if (!t) return Status::invalid_input("checkpoint: tensor " + name + " is missing (a checkpoint of another model shape?)");
    if (t->shape != slot.spec.shape || t->data.size() != slot.count) {
      return Status::invalid_input("checkpoint: tensor " + name + " has another shape than the configured model's expert");
    }
    std::copy(t->data.begin(), t->data.end(), dst + slot.offset);
  }
  return Status::OK();
}

void add_expert_shards(const GptStage& stage, const float* src, const std::string& prefix, std::map<std::string, NamedTensor>& full) {
  for (const auto& slot : stage.expert_slots()) {
    NamedTensor& t = full[prefix + slot.spec.name];
    t.name = prefix + slot.spec.name;
    t.shape = slot.spec.shape;
    t.data.assign(src + slot.offset, src + slot.offset + slot.count);
  }
}

void add_shards(const GptStage& stage, const float* src, const std::string& prefix, std::map<std::string, NamedTensor>& full) {
  const int tp = stage.spec().tp, tp_rank = stage.spec().tp_rank;
  for (const auto& slot : stage.param_slots()) {
    if (slot.head_copy) continue;
    if (slot.spec.split == model::Split::kReplicated && tp_rank != 0) continue;
    NamedTensor& t = full[prefix + slot.spec.name];
    if (t.data.empty()) {
      t.name = prefix + slot.spec.name;
      t.shape = slot.spec.shape;
      t.data.assign(static_cast<size_t>(slot.spec.numel()), 0.0f);
    }
    model::insert_shard(slot.spec, tp, tp_rank, src + slot.offset, t.data.data());
  }
}

namespace {

namespace fs = std::filesystem;

// "<dir>/step-5" -> the start of its siblings' names while a save is in progress ("step-5.partial-"
// and the saving process's id; with ".old" the checkpoint it replaces, where the names cannot swap).
std::string partial_name(const fs::path& dir) { return dir.filename().string() + ".partial-"; }

// Puts the complete directory `ready` in the place of `path` (which may hold an older checkpoint
// of the same step). Linux swaps the two names at once (renameat2 RENAME_EXCHANGE), so `path` is
// never missing; where the file system cannot, the old one steps aside first. What was there is
// removed afterwards.
Status install(const std::string& ready, const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    fs::rename(ready, path, ec);
    if (ec) return Status::io_error("checkpoint: cannot rename " + ready + " to " + path + ": " + ec.message());
    return Status::OK();
  }
  if (::renameat2(AT_FDCWD, ready.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(ready, ec);  // now the old checkpoint
    return Status::OK();
  }
  const std::string old = ready + ".old";
  fs::rename(path, old, ec);
  if (ec) return Status::io_error("checkpoint: cannot move the old " + path + " aside: " + ec.message());
  fs::rename(ready, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::rename(old, path, ec);  // put the old one back
    return Status::io_error("checkpoint: cannot rename " + ready + " to " + path + ": " + why);
  }
  fs::remove_all(old, ec);
  return Status::OK();
}

// Writes the checkpoint's files into `dir`, trainer.json last.
Status write_files(const std::string& dir, const config::ModelConfig& model, const std::string& run_yaml,
                   const std::vector<NamedTensor>& model_tensors, const std::vector<NamedTensor>& optimizer_tensors,
                   const TrainerState& state) {
  // The file names of the architecture's class (model::hf_file_name: a Mixtral's MoE tensors).
  std::vector<NamedTensor> renamed;  // a renamed copy, where names differ, used before the next call
  auto named = [&](const std::vector<NamedTensor>& tensors) -> const std::vector<NamedTensor>& {
    renamed.clear();
    bool differ = false;
    for (const auto& t : tensors) differ = differ || model::hf_file_name(model, t.name) != t.name;
    if (!differ) return tensors;
    for (const auto& t : tensors) {
      renamed.push_back(t);
      renamed.back().name = model::hf_file_name(model, t.name);
    }
    return renamed;
  };
  if (Status s = write_safetensors(dir + "/model.safetensors", named(model_tensors), {{"format", "pt"}}); !s) return s;
  if (!optimizer_tensors.empty()) {
    if (Status s = write_safetensors(dir + "/optimizer.safetensors", named(optimizer_tensors)); !s) return s;
  }
  if (Status s = config::write_text_file_atomic(dir + "/config.json", model::hf_config_json(model)); !s) return s;
  if (Status s = config::write_text_file_atomic(dir + "/run.yaml", run_yaml); !s) return s;
  Json t = Json::object();
  t.set("step", static_cast<long long>(state.step));
  t.set("seed", static_cast<unsigned long long>(state.seed));
  t.set("tokens", state.tokens);
  if (state.loss_scale > 0) {
    t.set("loss_scale", state.loss_scale);
    t.set("loss_scale_clean_steps", static_cast<long long>(state.loss_scale_clean_steps));
  }
  // Kept whatever the precision: AdamW's step count leaves the skipped steps out, also after a
  // resume in another precision.
  if (state.loss_scale > 0 || state.skipped_steps > 0) t.set("skipped_steps", static_cast<long long>(state.skipped_steps));
  return config::write_text_file_atomic(dir + "/trainer.json", t.dump(2) + "\n");
}

}  // namespace

Status write_checkpoint(const std::string& path, const config::ModelConfig& model, const std::string& run_yaml,
                        const std::vector<NamedTensor>& model_tensors, const std::vector<NamedTensor>& optimizer_tensors,
                        const TrainerState& state) {
  const fs::path target(path);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Status::io_error("checkpoint: cannot create " + parent.string() + ": " + ec.message());
  // What saves of this step that did not finish left behind.
  const std::string partial = partial_name(target);
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    if (e.path().filename().string().rfind(partial, 0) == 0) fs::remove_all(e.path(), ec);
  }
  // The new checkpoint is written whole beside the old one, then takes its name: a crash or a full
  // disk at any point leaves the old checkpoint as it was.
  const std::string ready = (parent / (partial + std::to_string(::getpid()))).string();
  fs::create_directory(ready, ec);
  if (ec) return Status::io_error("checkpoint: cannot create " + ready + ": " + ec.message());
  Status s = write_files(ready, model, run_yaml, model_tensors, optimizer_tensors, state);
  if (s) s = install(ready, path);
  if (s) s = config::sync_directory(parent.string());
  if (!s) fs::remove_all(ready, ec);
  return s;
}

namespace {

// trainer.json's optional whole number `key`, at least `lo`, into `out` (left as it is where absent).
Status read_count(const Json& j, const char* key, int64_t lo, int64_t& out, const std::string& where) {
  const Json* v = j.find(key);
  if (!v) return Status::OK();
  if (!v->is_int() || v->as_int() < lo) {
    return Status::invalid_input(where + ": " + key + " must be a whole number" +
                                 (lo == std::numeric_limits<int64_t>::min() ? std::string() : " of at least " + std::to_string(lo)) +
                                 "; the file is damaged: resume from another checkpoint");
  }
  out = v->as_int();
  return Status::OK();
}

// The directory's config.json against the configured model: the first difference, named by the
// config key to set. A checkpoint's (model::hf_config_json) or a Hugging Face model's; a config.json
// of a model that Stagecraft's architectures cannot run (rope scaling, o_proj biases, another MLP)
// is refused naming its key.
Status check_model(const std::string& path, const config::ModelConfig& m) {
  auto text = config::read_text_file(path + "/config.json");
  if (!text.ok()) return Status::OK();  // a checkpoint without one: its tensors' names and shapes are checked alone
  auto j = Json::parse(text.value());
  if (!j.ok() || !j->is_object()) return Status::invalid_input("checkpoint " + path + "/config.json is not a JSON object; the file is damaged");
  const std::string other = "checkpoint " + path + " is of another model: its config.json has ";
  auto int_of = [&](const char* key) -> std::optional<long long> {
    const Json* v = j->find(key);
    return v && v->is_int() ? std::optional<long long>(v->as_int()) : std::nullopt;
  };
  auto text_of = [&](const char* key) -> std::string {
    const Json* v = j->find(key);
    return v && v->is_string() ? v->as_string() : std::string();
  };
  const model::ModelDesc d = model::ModelDesc::from(m);
  // The architecture: model_type names it (gpt2; llama, mistral, qwen2).
  const std::string type = text_of("model_type");
  if (!type.empty()) {
    const bool moe_type = type == "mixtral" || type == "qwen3_moe";
    const bool llama_type = type == "llama" || type == "mistral" || type == "qwen2" || moe_type;
    if (type != "gpt2" && !llama_type) {
      return Status::invalid_input(other + "model_type " + type +
                                   ", which Stagecraft does not train (gpt2, llama, mistral, qwen2, mixtral or qwen3_moe)");
    }
    if (llama_type && moe_type != d.moe()) {
      return Status::invalid_input(other + "model_type " + type + (moe_type ? " (a mixture of experts); set model.moe.experts to use it"
                                                                          : " (no experts); set model.moe.experts: 0 to use it"));
    }
    if (llama_type != d.llama()) {
      const std::string want = llama_type ? "llama" : "gpt2";
      return Status::invalid_input(other + "model_type " + type + ", the configured model.arch " + d.name() + "; set model.arch: " + want +
                                   " to use it");
    }
    if (d.llama() && (type == "qwen2") != d.qkv_bias) {
      return Status::invalid_input(other + "model_type " + type + (type == "qwen2" ? " (biases on q, k and v)" : " (no biases)") +
                                   "; set model.qkv_bias: " + (type == "qwen2" ? "true" : "false") + " to use it");
    }
  }
  struct Field {
    const char* hf;
    const char* key;
    long long want;
    std::optional<long long> got;  // absent: not compared
  };
  std::vector<Field> fields;
  bool tied_default = true;
  if (d.llama()) {
    tied_default = false;  // transformers' LlamaConfig, MistralConfig and Qwen2Config
    fields = {{"num_hidden_layers", "model.layers", m.layers, int_of("num_hidden_layers")},
              {"hidden_size", "model.hidden", m.hidden, int_of("hidden_size")},
              {"num_attention_heads", "model.heads", m.heads, int_of("num_attention_heads")},
              {"num_key_value_heads", "model.kv_heads", m.kv(), int_of("num_key_value_heads") ? int_of("num_key_value_heads") : int_of("num_attention_heads")},
              {"vocab_size", "model.vocab", m.vocab, int_of("vocab_size")},
              {"intermediate_size", "model.ffn_hidden", m.ffn(), int_of("intermediate_size")}};
    if (d.moe()) {  // Mixtral's or Qwen3-MoE's keys, where present
      fields.push_back({"num_local_experts", "model.moe.experts", d.experts, int_of("num_local_experts")});
      fields.push_back({"num_experts", "model.moe.experts", d.experts, int_of("num_experts")});
      fields.push_back({"num_experts_per_tok", "model.moe.top_k", d.top_k, int_of("num_experts_per_tok")});
      fields.push_back({"moe_intermediate_size", "model.moe.ffn_hidden", d.expert_ffn, int_of("moe_intermediate_size")});
    }
    if (auto hd = int_of("head_dim"); hd && m.heads > 0 && *hd * m.heads != m.hidden) {
      return Status::invalid_input(other + "head_dim " + std::to_string(*hd) + "; Stagecraft's llama has head_dim = hidden / heads = " +
                                   std::to_string(m.hidden / m.heads));
    }
    if (const Json* v = j->find("rope_scaling"); v && !v->is_null()) {
      return Status::invalid_input(other + "rope_scaling " + v->dump() + "; Stagecraft's rotary positions are unscaled (rope_theta only)");
    }
    if (const Json* v = j->find("attention_bias"); v && v->is_bool() && v->as_bool() && type != "qwen2") {
      return Status::invalid_input(other + "attention_bias true (o_proj's bias too); Stagecraft's llama has biases on q, k and v only");
    }
    if (const Json* v = j->find("mlp_bias"); v && v->is_bool() && v->as_bool()) {
      return Status::invalid_input(other + "mlp_bias true; Stagecraft's llama MLP has no biases");
    }
    if (const std::string act = text_of("hidden_act"); !act.empty() && act != "silu") {
      return Status::invalid_input(other + "hidden_act " + act + "; Stagecraft's llama MLP is SwiGLU (silu)");
    }
    struct Real {
      const char* hf;
      const char* key;
      double want;
    };
    for (const Real& r : {Real{"rope_theta", "model.rope_theta", d.rope_theta}, Real{"rms_norm_eps", "model.norm_eps", d.norm_eps}}) {
      const Json* v = j->find(r.hf);
      if (v && v->is_number() && std::abs(v->as_double() - r.want) > 1e-9 * std::abs(r.want)) {
        char got[32], want[32];
        std::snprintf(got, sizeof got, "%.10g", v->as_double());
        std::snprintf(want, sizeof want, "%.10g", r.want);
        return Status::invalid_input(other + r.hf + " " + got + ", the configured " + r.key + " " + want + "; set " + r.key + ": " + got +
                                     " to use it");
      }
    }
  } else {
    // n_inner null is GPT-2's 4 x n_embd, as model::hf_config_json writes it.
    std::optional<long long> inner = int_of("n_inner");
    if (const Json* v = j->find("n_inner"); (!v || v->is_null()) && int_of("n_embd")) inner = 4 * *int_of("n_embd");
    fields = {{"n_layer", "model.layers", m.layers, int_of("n_layer")},
              {"n_embd", "model.hidden", m.hidden, int_of("n_embd")},
              {"n_head", "model.heads", m.heads, int_of("n_head")},
              {"vocab_size", "model.vocab", m.vocab, int_of("vocab_size")},
              {"n_positions", "model.seq_len", m.seq_len, int_of("n_positions")},
              {"n_inner", "model.ffn_hidden", m.ffn(), inner}};
  }
  for (const auto& f : fields) {
    if (f.got && *f.got != f.want) {
      return Status::invalid_input(other + f.hf + " " + std::to_string(*f.got) + ", the configured model " + f.key + " " + std::to_string(f.want) +
                                   "; set " + f.key + ": " + std::to_string(*f.got) + " to use it");
    }
  }
  const Json* tie = j->find("tie_word_embeddings");
  const bool tied = tie && tie->is_bool() ? tie->as_bool() : tied_default;
  if ((tie || d.llama()) && tied != m.tied_embeddings) {
    return Status::invalid_input(other + "tie_word_embeddings " + (tied ? "true" : "false") + "; set model.tied_embeddings: " +
                                 (tied ? "true" : "false") + " to use it");
  }
  return Status::OK();
}

// The description's names of a file's tensors (model::description_name: Mixtral's MoE names).
void to_description_names(TensorFile& file) {
  for (auto& t : file.tensors) t.name = model::description_name(t.name);
}

// Older Hugging Face Llama checkpoints also hold each layer's rotary inverse frequencies, a
// buffer computed from rope_theta rather than a parameter.
bool is_buffer(const std::string& name) {
  static const std::string suffix = ".rotary_emb.inv_freq";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every tensor of `file` is one of the model's, under `prefixes`: a tensor the model does not use
// means the checkpoint is of another model, and loading the rest would quietly drop it.
Status check_names(const TensorFile& file, const std::string& file_path, const config::ModelConfig& m,
                   std::initializer_list<const char*> prefixes) {
  std::set<std::string> names;
  for (const auto& p : model::ModelDesc::from(m).params()) {
    for (const char* prefix : prefixes) names.insert(prefix + p.name);
  }
  for (const auto& t : file.tensors) {
    if (is_buffer(t.name)) continue;
    if (!names.count(t.name)) {
      return Status::invalid_input(file_path + ": tensor " + t.name + " is not part of the configured model (a checkpoint of another model?)");
    }
  }
  return Status::OK();
}

}  // namespace

Result<Checkpoint> read_checkpoint(const std::string& path, const config::ModelConfig& model, bool with_optimizer) {
  auto text = config::read_text_file(path + "/trainer.json");
  if (!text.ok()) {
    return Status::invalid_input("checkpoint " + path + ": no trainer.json (not a checkpoint directory, or an unfinished save)");
  }
  const std::string where = "checkpoint " + path + "/trainer.json";
  auto j = Json::parse(text.value());
  if (!j.ok() || !j->is_object() || !j->find("step") || !j->find("step")->is_int() || j->find("step")->as_int() < 0) {
    return Status::invalid_input(where + ": expected {\"step\": N, ...} with N a whole number of at least 0");
  }
  Checkpoint c;
  c.state.step = j->find("step")->as_int();
  // The seed is a uint64, written as the int64 of the same bits (json.h): any whole number.
  int64_t seed = 0;
  if (Status s = read_count(*j, "seed", std::numeric_limits<int64_t>::min(), seed, where); !s) return s;
  c.state.seed = static_cast<uint64_t>(seed);
  if (const Json* t = j->find("tokens")) {
    if (!t->is_number() || !std::isfinite(t->as_double()) || t->as_double() < 0) {
      return Status::invalid_input(where + ": tokens must be a number of at least 0; the file is damaged: resume from another checkpoint");
    }
    c.state.tokens = t->as_double();
  }
  if (const Json* t = j->find("loss_scale")) {
    // The scaler starts at 2^16 and only doubles or halves, down to 1: a power of two that a float holds.
    int exp = 0;
    const double v = t->is_number() ? t->as_double() : -1;
    if (!(v >= 1 && v <= 0x1p127 && std::frexp(v, &exp) == 0.5)) {
      return Status::invalid_input(where + ": loss_scale must be a power of two from 1 to 2^127; the file is damaged: resume from "
                                           "another checkpoint");
    }
    c.state.loss_scale = v;
  }
  if (Status s = read_count(*j, "loss_scale_clean_steps", 0, c.state.loss_scale_clean_steps, where); !s) return s;
  if (Status s = read_count(*j, "skipped_steps", 0, c.state.skipped_steps, where); !s) return s;
  if (c.state.skipped_steps > c.state.step) {
    return Status::invalid_input(where + ": skipped_steps " + std::to_string(c.state.skipped_steps) + " exceeds step " +
                                 std::to_string(c.state.step) + "; the file is damaged: resume from another checkpoint");
  }
  if (Status s = check_model(path, model); !s) return s;
  auto tensors = read_safetensors(path + "/model.safetensors");
  if (!tensors.ok()) return tensors.status();
  to_description_names(tensors.value());
  if (Status s = check_names(tensors.value(), path + "/model.safetensors", model, {""}); !s) return s;
  c.model = std::move(tensors).value();
  if (with_optimizer) {
    auto opt = read_safetensors(path + "/optimizer.safetensors");
    if (!opt.ok()) return opt.status().with_context("checkpoint " + path + ": resume needs the optimizer state");
    to_description_names(opt.value());
    if (Status s = check_names(opt.value(), path + "/optimizer.safetensors", model, {"exp_avg.", "exp_avg_sq."}); !s) return s;
    c.optimizer = std::move(opt).value();
  }
  return c;
}

Result<TensorFile> read_model_dir(const std::string& path, const config::ModelConfig& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return Status::invalid_input(path + " is not a directory (a checkpoint or a Hugging Face model directory)");
  if (Status s = check_model(path, model); !s) return s;
  const std::string single = path + "/model.safetensors", index = path + "/model.safetensors.index.json";
  TensorFile out;
  if (fs::exists(single, ec)) {
    auto t = read_safetensors(single);
    if (!t.ok()) return t.status();
    out = std::move(t).value();
  } else if (fs::exists(index, ec)) {
    // Sharded: the index's weight_map names the file of every tensor.
    auto text = config::read_text_file(index);
    if (!text.ok()) return text.status();
    auto j = Json::parse(text.value());
    const Json* map = j.ok() && j->is_object() ? j->find("weight_map") : nullptr;
    if (!map || !map->is_object()) return Status::invalid_input(index + ": expected {\"weight_map\": {tensor: file, ...}}");
    std::set<std::string> files;
    for (const auto& [name, file] : map->as_object()) {
      if (!file.is_string() || file.as_string().empty() || file.as_string().find('/') != std::string::npos) {
        return Status::invalid_input(index + ": weight_map's entry for " + name + " must name a file beside the index");
      }
      files.insert(file.as_string());
    }
    std::set<std::string> seen;
    for (const auto& f : files) {
      auto t = read_safetensors(path + "/" + f);
      if (!t.ok()) return t.status();
      for (auto& tensor : t->tensors) {
        if (!seen.insert(tensor.name).second) return Status::invalid_input(path + "/" + f + ": tensor " + tensor.name + " is in two shards");
        out.tensors.push_back(std::move(tensor));
      }
    }
  } else {
    return Status::invalid_input(path + " holds neither model.safetensors nor model.safetensors.index.json");
  }
  to_description_names(out);
  if (Status s = check_names(out, path, model, {""}); !s) return s;
  return out;
}

}  // namespace stagecraft::runtime
