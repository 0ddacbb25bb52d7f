// Figures as a person reads them: a rate of floating-point operations with its unit chosen by
// magnitude. Pure, thread-safe. Every place that shows FLOP/s (the CLI's plan and search text,
// the window's estimates, reports) formats through here, so a CPU rank's 20 GFLOP/s and a
// cluster's 1.2 PFLOP/s read alike and never as "0.0 TFLOP/s".
#pragma once

#include <string>

namespace stagecraft {

// flop_per_s with one decimal and the largest SI prefix that leaves at least 1 (FLOP/s, kFLOP/s,
// MFLOP/s, GFLOP/s, TFLOP/s, PFLOP/s, EFLOP/s; EFLOP/s for anything larger). A value that rounds
// to 1000.0 takes the next prefix. Examples: 2.0e10 -> "20.0 GFLOP/s", 1.56e14 -> "156.0 TFLOP/s",
// 9.9996e11 -> "1.0 TFLOP/s", 1.2e15 -> "1.2 PFLOP/s". Zero, negative and not-finite values give
// "0 FLOP/s" (an estimate without a step time has no rate).
std::string format_flop_rate(double flop_per_s);

}  // namespace stagecraft
