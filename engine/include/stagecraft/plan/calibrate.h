// Predictions against measurements, and the device constants fitted to a person's own runs.
//
// A measured step (MeasuredStep) is what launch/run_measurement.h reads from a run's history: the
// median over its steady steps of the bottleneck rank's parts, in the parts the estimate predicts
// (plan/estimate.h StepBreakdown), with one difference: a stage blocked on a receive cannot tell
// a neighbour still computing from bytes still on the wire, so the measurement has one
// "PP + bubble" part (pipeline waits and sends, and the step's closing sync) where the estimate has
// pp_comm_s and bubble_s.
//
// calibrate() fits config::CostCalibration's constants (GEMM efficiency and its small-dimension
// fall-off, memory-bandwidth efficiency, link efficiency and collective latency, per-step
// overhead) to one or more runs by least squares on the relative error of every part and of the
// step time, in log space so every constant stays positive (Nelder-Mead over the constants the
// runs can tell apart: a run without TP or DP leaves the link constants where they were).
// Pure and deterministic; thread-safe. Microseconds per estimate, so a fit over a few runs takes
// well under a second.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/device.h"
#include "stagecraft/core/status.h"
#include "stagecraft/plan/estimate.h"

namespace stagecraft::plan {

// Seconds per step (and bytes) as measured, in the estimate's parts.
struct MeasuredStep {
  double step_s = 0;
  double compute_s = 0;    // forward + backward, without their TP collectives and recompute
  double recompute_s = 0;
  double tp_s = 0;
  double pp_bubble_s = 0;  // pipeline waits and sends, and the closing sync: pp_comm_s + bubble_s
  double dp_s = 0;
  double optimizer_s = 0;
  double overhead_s = 0;   // the rest of the step (data, zeroing, copies)
  double tokens_per_s = 0;
  std::vector<double> memory_bytes;  // peak per pp rank (the largest of its ranks); 0: not measured
};

// One row of a comparison: predicted and measured, and the prediction's relative error
// (predicted - measured) / measured; NaN when nothing was measured.
struct ComparisonRow {
  std::string part;  // "compute", "recompute", "TP", "PP + bubble", "DP", "optimizer", "overhead",
                     // "step", "tokens/s", "memory pp N"
  double predicted = 0;
  double measured = 0;
  double error = 0;
  bool seconds = true;  // false: tokens/s or bytes
};
std::vector<ComparisonRow> compare(const Estimate& predicted, const MeasuredStep& measured);

// The measured step in the estimate's parts for the estimate's own structure (what compare()
// pairs up), as an Estimate-shaped breakdown.
struct CalibrationSample {
  std::string label;     // e.g. "run 7 (dp 2 x pp 2)"
  EstimateInput input;   // the run's layout, its device as planned (the constants are replaced)
  MeasuredStep measured;
};

struct CalibrationFit {
  config::CostCalibration calibration;
  std::vector<std::string> fitted;      // the constants the runs could tell apart, fitted
  std::vector<double> step_error_before;  // per sample: (predicted - measured) / measured step time
  std::vector<double> step_error_after;
  double rms_before = 0, rms_after = 0;   // over every compared part of every sample
};

// Fits from `start` (usually the device's current constants). Fails (invalid input) with no
// samples or a sample without a measured step time.
Result<CalibrationFit> calibrate(const std::vector<CalibrationSample>& samples, const config::CostCalibration& start);

// "compute 12.3 ms vs 11.0 ms (+12%)" lines, and the fit's summary, for the CLI.
std::string comparison_to_text(const std::vector<ComparisonRow>& rows);
Json comparison_to_json(const std::vector<ComparisonRow>& rows);

}  // namespace stagecraft::plan
