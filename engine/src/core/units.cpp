// Figures with their unit chosen by magnitude. See units.h.
#include "stagecraft/core/units.h"

#include <cmath>
#include <cstdio>

namespace stagecraft {

std::string format_flop_rate(double flop_per_s) {
  if (!std::isfinite(flop_per_s) || flop_per_s <= 0) return "0 FLOP/s";
  static const char* const kUnits[] = {"FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s", "EFLOP/s"};
  constexpr int kLast = static_cast<int>(sizeof kUnits / sizeof kUnits[0]) - 1;
  int unit = 0;
  double v = flop_per_s;
  // 999.95 and above prints as 1000.0 with one decimal: that is 1.0 of the next prefix.
  while (v >= 999.95 && unit < kLast) {
    v /= 1000.0;
    ++unit;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[unit]);
  return buf;
}

}  // namespace stagecraft
