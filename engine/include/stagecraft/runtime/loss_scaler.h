// LossScaler: the dynamic loss scale of `train.precision: fp16` — how much the loss's gradient is
// multiplied by before the backward pass, so that small gradients survive fp16's range, and
// whether a step's update is applied.
//
// The rule (PyTorch's GradScaler and Megatron's dynamic scaler use the same one):
//   - start at `initial` (2^16);
//   - a step whose gradients are all finite is applied (with the gradients divided by the scale)
//     and counts as clean; after `growth_interval` (2000) clean steps in a row the scale doubles
//     and the count restarts;
//   - a step with a non-finite gradient (an overflow) is skipped: no update, the scale halves
//     (not below `min_scale`, 1) and the count restarts.
// Worked example, initial 4, growth_interval 2: finite, finite -> scale 8; overflow -> 4, skip;
// finite -> 4 (one clean step); overflow -> 2, skip; overflow -> 1, skip; overflow -> 1 (the
// floor), skip.
//
// The scaler is host state and pure: the trainer decides finiteness from the global gradient
// norm (one all-reduced number, so every rank takes the same decision) and asks the scaler.
// Not thread-safe (one per rank, like the trainer).
#pragma once

#include <cstdint>

namespace stagecraft::runtime {

struct LossScalerOptions {
  double initial = 65536.0;     // 2^16
  int64_t growth_interval = 2000;  // clean steps in a row before the scale doubles
  double min_scale = 1.0;        // halving stops here
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {}) : options_(options), scale_(options.initial) {}

  double scale() const { return scale_; }
  int64_t clean_steps() const { return clean_; }  // since the scale last changed

  // Continues from a saved state (a checkpoint's); a scale of 0 or less keeps the current one.
  void restore(double scale, int64_t clean_steps) {
    if (scale <= 0) return;
    scale_ = scale;
    clean_ = clean_steps;
  }

  // Records a step whose gradients were `finite` or not; returns whether to apply its update.
  bool update(bool finite) {
    if (!finite) {
      scale_ = scale_ / 2 < options_.min_scale ? options_.min_scale : scale_ / 2;
      clean_ = 0;
      return false;
    }
    if (++clean_ >= options_.growth_interval) {
      scale_ *= 2;
      clean_ = 0;
    }
    return true;
  }

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_ = 0;
};

}  // namespace stagecraft::runtime
