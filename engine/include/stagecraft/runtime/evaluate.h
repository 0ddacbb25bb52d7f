// Evaluation: the mean next-token cross-entropy of a checkpoint (or a Hugging Face model directory,
// checkpoint.h: read_model_dir) on a token file.
//
// Window k (k = 0 .. windows-1) is the seq_len + 1 tokens starting at token k x seq_len: the
// first seq_len are the input, the last seq_len the targets; the result is the mean over all
// windows and positions. Runs the whole model in this process (no parallelism needed).
#pragma once

#include <string>

#include "stagecraft/config/run_config.h"
#include "stagecraft/core/status.h"
#include "stagecraft/runtime/device.h"

namespace stagecraft::runtime {

struct EvalResult {
  double loss = 0;     // mean cross-entropy, nats per token
  int windows = 0;
  long long tokens = 0;
};

// Fails (invalid input) for a checkpoint of another shape, unreadable data, or more windows than
// the data holds (naming how many it holds). `device` (default: the CPU) runs the model; a .bin
// file's tokens are as wide as `data_dtype` says (token_data.h).
Result<EvalResult> evaluate_checkpoint(const config::ModelConfig& model, const std::string& checkpoint_dir,
                                       const std::string& data_path, int windows, Device* device = nullptr,
                                       config::DataDtype data_dtype = config::DataDtype::kAuto);

}  // namespace stagecraft::runtime
