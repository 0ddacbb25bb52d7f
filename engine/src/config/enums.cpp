// Spellings of the configuration's enums, as they appear in YAML: each a lookup in its table
// (run_config.h).
#include "stagecraft/config/run_config.h"

#include <algorithm>
#include <array>

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
std::string_view to_string(CpComm v) { return enum_to_string(kCpCommNames, v); }
std::string_view to_string(MetricsFormat v) { return enum_to_string(kMetricsFormatNames, v); }
std::string_view to_string(LaunchFramework v) { return enum_to_string(kLaunchFrameworkNames, v); }
std::string_view to_string(DataDtype v) { return enum_to_string(kDataDtypeNames, v); }
std::string_view to_string(FlashKernels v) { return enum_to_string(kFlashKernelsNames, v); }
std::string_view to_string(GemmBias v) { return enum_to_string(kGemmBiasNames, v); }
std::string_view to_string(NormWarps v) { return enum_to_string(kNormWarpsNames, v); }

std::optional<TpMode> parse_tp_mode(std::string_view s) { return enum_parse(kTpModeNames, s); }
std::optional<Schedule> parse_schedule(std::string_view s) { return enum_parse(kScheduleNames, s); }
std::optional<Recompute> parse_recompute(std::string_view s) { return enum_parse(kRecomputeNames, s); }
std::optional<Precision> parse_precision(std::string_view s) { return enum_parse(kPrecisionNames, s); }
std::optional<Attention> parse_attention(std::string_view s) { return enum_parse(kAttentionNames, s); }
std::optional<Backend> parse_backend(std::string_view s) { return enum_parse(kBackendNames, s); }

std::vector<Axis> complete_order(const std::vector<Axis>& order) {
  std::array<int, kAxisCount> count{};
  for (Axis a : order) {
    const int i = static_cast<int>(a);
    if (i < 0 || i >= kAxisCount || ++count[static_cast<size_t>(i)] > 1) return {};
  }
  std::vector<Axis> out = order;
  // Each missing axis goes right after its predecessor in the default order (first when it has none).
  for (size_t d = 0; d < std::size(kDefaultOrder); ++d) {
    const Axis a = kDefaultOrder[d];
    if (count[static_cast<size_t>(a)] != 0) continue;
    auto at = out.begin();
    if (d > 0) at = std::find(out.begin(), out.end(), kDefaultOrder[d - 1]) + 1;
    out.insert(at, a);
    count[static_cast<size_t>(a)] = 1;
  }
  return out;
}

std::optional<std::vector<Axis>> parse_order(std::string_view text) {
  std::vector<Axis> order;
  std::string_view rest = text;
  if (rest.empty()) return std::nullopt;
  int ep_after = -1;  // where "ep" was: after this many axes; -1 when not named
  while (true) {
    const size_t dash = rest.find('-');
    const std::string_view word = rest.substr(0, dash);
    if (word == "ep") {
      if (ep_after >= 0) return std::nullopt;
      ep_after = static_cast<int>(order.size());
    } else {
      const auto a = enum_parse(kAxisNames, word);
      if (!a) return std::nullopt;
      order.push_back(*a);
    }
    if (dash == std::string_view::npos) break;
    rest = rest.substr(dash + 1);
  }
  for (Axis a : {Axis::kTp, Axis::kDp, Axis::kPp}) {
    if (std::count(order.begin(), order.end(), a) != 1) return std::nullopt;
  }
  // ep takes cp's place in the expert layers' order: right after cp, or after tp where cp is not named.
  if (ep_after >= 0) {
    const bool has_cp = std::count(order.begin(), order.end(), Axis::kCp) == 1;
    if (ep_after == 0 || order[static_cast<size_t>(ep_after - 1)] != (has_cp ? Axis::kCp : Axis::kTp)) return std::nullopt;
  }
  auto full = complete_order(order);
  if (full.empty()) return std::nullopt;
  return full;
}

std::string order_text(const std::vector<Axis>& order) {
  std::string out;
  for (Axis a : order) out += (out.empty() ? "" : "-") + std::string(to_string(a));
  return out;
}

Comm comm_of(const RunConfig& c) {
  if (c.comm != Comm::kAuto) return c.comm;
  return c.backend == Backend::kCuda ? Comm::kNccl : Comm::kGloo;
}

}  // namespace stagecraft::config
