// Checkpoint directories. See checkpoint.h.
#include "stagecraft/runtime/checkpoint.h"

#include <filesystem>
#include <system_error>

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

Status write_checkpoint(const std::string& path, const config::ModelConfig& model, const std::string& run_yaml,
                        const std::vector<NamedTensor>& model_tensors, const std::vector<NamedTensor>& optimizer_tensors,
                        const TrainerState& state) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::io_error("checkpoint: cannot create " + path + ": " + ec.message());
  // A directory being rewritten is incomplete until trainer.json lands again.
  std::filesystem::remove(path + "/trainer.json", ec);
  if (Status s = write_safetensors(path + "/model.safetensors", model_tensors, {{"format", "pt"}}); !s) return s;
  if (!optimizer_tensors.empty()) {
    if (Status s = write_safetensors(path + "/optimizer.safetensors", optimizer_tensors); !s) return s;
  }
  if (Status s = config::write_text_file_atomic(path + "/config.json", model::hf_config_json(model)); !s) return s;
  if (Status s = config::write_text_file_atomic(path + "/run.yaml", run_yaml); !s) return s;
  Json t = Json::object();
  t.set("step", static_cast<long long>(state.step));
  t.set("seed", static_cast<unsigned long long>(state.seed));
  t.set("tokens", state.tokens);
  if (state.loss_scale > 0) {
    t.set("loss_scale", state.loss_scale);
    t.set("loss_scale_clean_steps", static_cast<long long>(state.loss_scale_clean_steps));
    t.set("skipped_steps", static_cast<long long>(state.skipped_steps));
  }
  return config::write_text_file_atomic(path + "/trainer.json", t.dump(2) + "\n");
}

Result<Checkpoint> read_checkpoint(const std::string& path, bool with_optimizer) {
  auto text = config::read_text_file(path + "/trainer.json");
  if (!text.ok()) {
    return Status::invalid_input("checkpoint " + path + ": no trainer.json (not a checkpoint directory, or an unfinished save)");
  }
  auto j = Json::parse(text.value());
  if (!j.ok() || !j->is_object() || !j->find("step") || !j->find("step")->is_int()) {
    return Status::invalid_input("checkpoint " + path + "/trainer.json: expected {\"step\": N, ...}");
  }
  Checkpoint c;
  c.state.step = j->find("step")->as_int();
  if (const Json* s = j->find("seed"); s && s->is_number()) c.state.seed = static_cast<uint64_t>(s->as_int());
  if (const Json* t = j->find("tokens"); t && t->is_number()) c.state.tokens = t->as_double();
  if (const Json* t = j->find("loss_scale"); t && t->is_number() && t->as_double() > 0) c.state.loss_scale = t->as_double();
  if (const Json* t = j->find("loss_scale_clean_steps"); t && t->is_int()) c.state.loss_scale_clean_steps = t->as_int();
  if (const Json* t = j->find("skipped_steps"); t && t->is_int()) c.state.skipped_steps = t->as_int();
  auto model = read_safetensors(path + "/model.safetensors");
  if (!model.ok()) return model.status();
  c.model = std::move(model).value();
  if (with_optimizer) {
    auto opt = read_safetensors(path + "/optimizer.safetensors");
    if (!opt.ok()) return opt.status().with_context("checkpoint " + path + ": resume needs the optimizer state");
    c.optimizer = std::move(opt).value();
  }
  return c;
}

}  // namespace stagecraft::runtime
