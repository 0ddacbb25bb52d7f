// Spellings of the configuration's enums, as they appear in YAML.
#include "stagecraft/config/run_config.h"

namespace stagecraft::config {

std::string_view to_string(TpMode v) {
  switch (v) {
    case TpMode::k1d: return "1d";
    case TpMode::k2d: return "2d";
    case TpMode::k2p5d: return "2.5d";
    case TpMode::k3d: return "3d";
  }
  return "1d";
}
std::string_view to_string(Schedule v) {
  switch (v) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1f1b: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
  }
  return "1f1b";
}
std::string_view to_string(PartitionKind v) {
  switch (v) {
    case PartitionKind::kUniform: return "uniform";
    case PartitionKind::kBalanced: return "balanced";
    case PartitionKind::kExplicit: return "explicit";
  }
  return "uniform";
}
std::string_view to_string(Recompute v) {
  switch (v) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "none";
}
std::string_view to_string(Attention v) {
  switch (v) {
    case Attention::kStandard: return "standard";
    case Attention::kFlash: return "flash";
  }
  return "standard";
}
std::string_view to_string(Precision v) {
  switch (v) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
  }
  return "fp32";
}
std::string_view to_string(Backend v) {
  switch (v) {
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "cpu";
}
std::string_view to_string(Axis v) {
  switch (v) {
    case Axis::kTp: return "tp";
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
  }
  return "tp";
}

std::optional<TpMode> parse_tp_mode(std::string_view s) {
  if (s == "1d") return TpMode::k1d;
  if (s == "2d") return TpMode::k2d;
  if (s == "2.5d") return TpMode::k2p5d;
  if (s == "3d") return TpMode::k3d;
  return std::nullopt;
}
std::optional<Schedule> parse_schedule(std::string_view s) {
  if (s == "gpipe") return Schedule::kGpipe;
  if (s == "1f1b") return Schedule::k1f1b;
  if (s == "interleaved") return Schedule::kInterleaved;
  return std::nullopt;
}
std::optional<Recompute> parse_recompute(std::string_view s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  return std::nullopt;
}
std::optional<Precision> parse_precision(std::string_view s) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "fp16") return Precision::kFp16;
  if (s == "bf16") return Precision::kBf16;
  return std::nullopt;
}
std::optional<Attention> parse_attention(std::string_view s) {
  if (s == "standard") return Attention::kStandard;
  if (s == "flash") return Attention::kFlash;
  return std::nullopt;
}
std::optional<Backend> parse_backend(std::string_view s) {
  if (s == "cpu") return Backend::kCpu;
  if (s == "cuda") return Backend::kCuda;
  return std::nullopt;
}

}  // namespace stagecraft::config
