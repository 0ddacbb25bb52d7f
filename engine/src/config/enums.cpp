// Spellings of the configuration's enums, as they appear in YAML: each a lookup in its table
// (run_config.h).
#include "stagecraft/config/run_config.h"

namespace stagecraft::config {

std::string_view to_string(TpMode v) { return enum_to_string(kTpModeNames, v); }
std::string_view to_string(Schedule v) { return enum_to_string(kScheduleNames, v); }
std::string_view to_string(PartitionKind v) { return enum_to_string(kPartitionKindNames, v); }
std::string_view to_string(Recompute v) { return enum_to_string(kRecomputeNames, v); }
std::string_view to_string(Precision v) { return enum_to_string(kPrecisionNames, v); }
std::string_view to_string(Attention v) { return enum_to_string(kAttentionNames, v); }
std::string_view to_string(Backend v) { return enum_to_string(kBackendNames, v); }
std::string_view to_string(Comm v) { return enum_to_string(kCommNames, v); }
std::string_view to_string(Axis v) { return enum_to_string(kAxisNames, v); }
std::string_view to_string(MetricsFormat v) { return enum_to_string(kMetricsFormatNames, v); }
std::string_view to_string(LaunchFramework v) { return enum_to_string(kLaunchFrameworkNames, v); }
std::string_view to_string(DataDtype v) { return enum_to_string(kDataDtypeNames, v); }

std::optional<TpMode> parse_tp_mode(std::string_view s) { return enum_parse(kTpModeNames, s); }
std::optional<Schedule> parse_schedule(std::string_view s) { return enum_parse(kScheduleNames, s); }
std::optional<Recompute> parse_recompute(std::string_view s) { return enum_parse(kRecomputeNames, s); }
std::optional<Precision> parse_precision(std::string_view s) { return enum_parse(kPrecisionNames, s); }
std::optional<Attention> parse_attention(std::string_view s) { return enum_parse(kAttentionNames, s); }
std::optional<Backend> parse_backend(std::string_view s) { return enum_parse(kBackendNames, s); }

Comm comm_of(const RunConfig& c) {
  if (c.comm != Comm::kAuto) return c.comm;
  return c.backend == Backend::kCuda ? Comm::kNccl : Comm::kGloo;
}

}  // namespace stagecraft::config
