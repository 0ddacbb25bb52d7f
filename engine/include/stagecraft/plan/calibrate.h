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
// fall-off, memory-bandwidth efficiency, link efficiency and collective latency, tensor
// parallelism's own link efficiency and latency, per-step overhead, the experts' load imbalance) to one or more runs by least
// squares on the relative error of every part and of the step time, in log space so every
// constant stays positive (Nelder-Mead). It moves a constant only as far as the runs carry
// information about it: each constant's sensitivity in the runs (how much a part or the step of
// any run moves, relative to its step, per relative change of the constant) decides whether it
// is fitted at all (below kMinSensitivity it keeps the starting value: a run without TP leaves
// TP's constants where they were), and a fitted one is pulled towards its starting value (a
// prior of about a factor e against measurements good to about 3%, stronger as its sensitivity
// falls), so a constant the runs barely see, or a combination they cannot tell apart, moves little.
// With two or more runs the strength of that pull is chosen by leaving each run out in turn: a
// part the model gets wrong in one layout would otherwise move constants it shares with others,
// and a fit to the other runs predicting the one left out worse than the start did shows it; the
// pull grows (x4 a time) until none is worse by more than kHeldOutSlack of its step, and the fit
// says so in plain words among what the runs could not tell.
// Pure and deterministic; thread-safe. Microseconds per estimate, so a fit over a few runs takes
// a second or two (the held-out fits included).
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
  double moe_a2a_s = 0;    // expert parallelism's all-to-alls; 0: not timed apart (a worker that does not
                           // time them apart has them inside its forwards and backwards: compared with
                           // the predicted compute plus all-to-all)
  double tokens_per_s = 0;
  std::vector<double> memory_bytes;  // peak per pp rank (the largest of its ranks); 0: not measured
  bool parts = true;  // false: only the step time was measured (a benchmark's figure): the parts are
                      // neither compared nor fitted, the step alone is
};

// One row of a comparison: predicted and measured, and the prediction's relative error
// (predicted - measured) / measured; NaN when nothing was measured.
struct ComparisonRow {
  std::string part;  // "compute", "recompute", "TP", "EP all-to-all" (timed apart only), "PP + bubble", "DP",
                     // "optimizer", "overhead", "step", "tokens/s", "memory pp N"
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

// Below this sensitivity (a 10% change of the constant moves no part of any run by 0.1% of its
// step) the runs carry no information about a constant: it keeps its starting value.
inline constexpr double kMinSensitivity = 0.01;

// With two or more runs, how far the fit trusts them is chosen by leaving each out: the pull
// towards the start is scaled by 1, 4, 16, ... until no run, predicted from a fit to the others,
// is worse than the start predicted it by more than kHeldOutSlack of its step; kMaxPullScale where
// none is (the constants then stay near the start).
inline constexpr double kHeldOutSlack = 0.02;
inline constexpr double kMaxPullScale = 1024;

// One pull tried by leaving runs out: the scale, and the most a held-out run's step error grew
// (as a fraction of its step; negative: every one improved).
struct HeldOutTrial {
  double pull_scale = 1;
  double worst_change = 0;
};

// One constant of a fit: how much the runs told about it, and in plain words why it was kept.
struct FittedConstant {
  std::string key;           // config::calibration_fields()'s key
  double before = 0, after = 0;
  double sensitivity = 0;    // the largest d(part or step)/step per d(log constant) over the runs
  bool informed = false;     // sensitivity >= kMinSensitivity: fitted
  std::string why_kept;      // informed: empty; else e.g. "no tensor-parallel run: TP latency kept"
};

struct CalibrationFit {
  config::CostCalibration calibration;
  std::vector<std::string> fitted;      // the constants the runs informed, fitted
  std::vector<FittedConstant> constants;  // every time constant, informed or kept, in field order
  std::vector<std::string> kept;        // one plain line per reason a constant was kept, no repeats
  std::vector<double> step_error_before;  // per sample: (predicted - measured) / measured step time
  std::vector<double> step_error_after;
  double rms_before = 0, rms_after = 0;   // over every compared part of every sample
  double pull_scale = 1;                  // the prior's scale the fit used (1: the runs agree)
  std::vector<HeldOutTrial> held_out;     // the scales tried, weakest first (empty with one run)
};

// Fits from `start` (usually the device's current constants); the constants named in `hold`
// (calibration_fields() keys) keep their starting values whatever the runs say (a figure measured
// apart, such as the cpu device's TP latency). Fails (invalid input) with no samples, a sample
// without a measured step time, or an unknown key in `hold`.
Result<CalibrationFit> calibrate(const std::vector<CalibrationSample>& samples, const config::CostCalibration& start,
                                 const std::vector<std::string>& hold = {});

// "compute 12.3 ms vs 11.0 ms (+12%)" lines, and the fit's summary, for the CLI.
std::string comparison_to_text(const std::vector<ComparisonRow>& rows);
Json comparison_to_json(const std::vector<ComparisonRow>& rows);

}  // namespace stagecraft::plan
