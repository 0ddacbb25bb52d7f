// Evaluation of a checkpoint. See evaluate.h.
#include "stagecraft/runtime/evaluate.h"

#include "stagecraft/runtime/checkpoint.h"
#include "stagecraft/runtime/gpt_stage.h"
#include "stagecraft/runtime/token_data.h"

#include <vector>

namespace stagecraft::runtime {

Result<EvalResult> evaluate_checkpoint(const config::ModelConfig& model, const std::string& checkpoint_dir,
                                       const std::string& data_path, int windows, Device* device, config::DataDtype data_dtype) {
  if (windows < 1) return Status::invalid_input("eval: --windows must be at least 1");
  auto data = TokenData::open(data_path, static_cast<size_t>(model.seq_len) + 1, token_bytes(data_dtype, model.vocab));
  if (!data.ok()) return data.status();
  if (data->vocab_needed() > model.vocab) {
    return Status::invalid_input("eval: " + data_path + " holds token ids up to " + std::to_string(data->vocab_needed() - 1) +
                                 ", beyond model.vocab=" + std::to_string(model.vocab));
  }
  const size_t T = static_cast<size_t>(model.seq_len);
  const size_t available = (data->size() - 1) / T;
  if (static_cast<size_t>(windows) > available) {
    return Status::invalid_input("eval: --windows " + std::to_string(windows) + ": " + data_path + " holds " + std::to_string(available) +
                                 " windows of seq_len + 1 = " + std::to_string(T + 1) + " tokens");
  }
  auto weights = read_model_dir(checkpoint_dir, model);  // a checkpoint, or a Hugging Face model directory
  if (!weights.ok()) return weights.status();
  auto stage = GptStage::create(StageSpec::whole_model(model), nullptr, device);
  if (!stage.ok()) return stage.status();
  GptStage& st = *stage.value();
  std::vector<float> host(st.num_params());
  if (Status s = load_shards(st, weights.value(), "", host.data()); !s) return s.with_context("checkpoint " + checkpoint_dir);
  if (Status s = st.upload_params(host.data()); !s) return s;
  std::vector<float> experts(st.num_expert_params());  // a mixture of experts: every expert, whole
  if (Status s = load_expert_shards(st, weights.value(), "", experts.data()); !s) return s.with_context("checkpoint " + checkpoint_dir);
  if (Status s = st.upload_expert_params(experts.data()); !s) return s;
  std::vector<int32_t> inputs(T), targets(T);
  EvalResult r;
  double sum = 0;
  for (int k = 0; k < windows; ++k) {
    data->window(static_cast<size_t>(k) * T, static_cast<int>(T), inputs.data(), targets.data());
    double loss = 0;
    if (Status s = st.forward(0, 0, inputs.data(), nullptr, targets.data(), 0.0f, nullptr, &loss); !s) return s;
    st.discard(0, 0);
    sum += loss;
  }
  r.windows = windows;
  r.tokens = static_cast<long long>(windows) * static_cast<long long>(T);
  r.loss = sum / windows;
  return r;
}

}  // namespace stagecraft::runtime
