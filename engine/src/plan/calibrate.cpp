// Comparison and calibration. See calibrate.h.
#include "stagecraft/plan/calibrate.h"

#include "stagecraft/config/device_profile.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string_view>

#include "stagecraft/core/units.h"

namespace stagecraft::plan {

namespace {

double rel_error(double predicted, double measured) {
  if (measured > 0) return (predicted - measured) / measured;
  return predicted == 0 ? 0.0 : NAN;
}

// The parts both sides have, in the estimate's order: predicted from a breakdown, measured.
struct Part {
  const char* name;
  double (*predicted)(const StepBreakdown&);
  double MeasuredStep::*measured;
};
constexpr Part kParts[] = {
    {"compute", [](const StepBreakdown& b) { return b.compute_s; }, &MeasuredStep::compute_s},
    {"recompute", [](const StepBreakdown& b) { return b.recompute_s; }, &MeasuredStep::recompute_s},
    {"TP", [](const StepBreakdown& b) { return b.tp_comm_s; }, &MeasuredStep::tp_s},
    {"EP all-to-all", [](const StepBreakdown& b) { return b.moe_a2a_s; }, &MeasuredStep::moe_a2a_s},
    {"PP + bubble", [](const StepBreakdown& b) { return b.pp_comm_s + b.bubble_s; }, &MeasuredStep::pp_bubble_s},
    {"DP", [](const StepBreakdown& b) { return b.dp_comm_s; }, &MeasuredStep::dp_s},
    {"optimizer", [](const StepBreakdown& b) { return b.optimizer_s; }, &MeasuredStep::optimizer_s},
    {"overhead", [](const StepBreakdown& b) { return b.overhead_s; }, &MeasuredStep::overhead_s},
};

// Expert parallelism's all-to-alls are a part of their own only where the run timed them apart;
// otherwise they ran inside its forwards and backwards, and the compute part carries them. A
// measurement of the step alone compares no part.
bool compared(const Part& p, const MeasuredStep& m) { return m.parts && (p.measured != &MeasuredStep::moe_a2a_s || m.moe_a2a_s > 0); }
double predicted_part(const Part& p, const StepBreakdown& b, const MeasuredStep& m) {
  const double v = p.predicted(b);
  if (p.measured == &MeasuredStep::compute_s && !(m.moe_a2a_s > 0)) return v + b.moe_a2a_s;
  return v;
}

// The constants a step's time depends on (gpu_workspace_gib is memory only), in the fit's
// coordinate order; and why the samples could not inform one, in plain words, by what they lack.
std::vector<const config::CalibrationField*> time_constants() {
  std::vector<const config::CalibrationField*> out;
  for (const auto& f : config::calibration_fields()) {
    if (std::string_view(f.key) != "gpu_workspace_gib") out.push_back(&f);
  }
  return out;
}

std::string format_constant(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string why_uninformed(std::string_view key, const std::vector<CalibrationSample>& samples) {
  bool tp = false, comm = false, network = false, flash = false, overhead = false, ep = false;
  for (const auto& s : samples) {
    const auto& in = s.input;
    tp = tp || in.tp > 1;
    ep = ep || (in.config.model.moe.enabled() && in.ep > 1);
    comm = comm || in.dp > 1 || in.pp > 1 || in.cp > 1;
    network = network || in.tp_nodes > 1 || in.dp_nodes > 1 || in.cp_nodes > 1 || in.pp_crosses_nodes;
    flash = flash || in.config.train.attention == config::Attention::kFlash;
    overhead = overhead || s.measured.overhead_s > 0;
  }
  if ((key == "tp_link_efficiency" || key == "tp_step_s") && !tp) return "no tensor-parallel run: TP bandwidth and latency kept";
  if ((key == "link_efficiency" || key == "collective_step_s") && !comm) {
    return "no data-, context- or pipeline-parallel run: link efficiency and collective latency kept";
  }
  if (key == "network_efficiency" && !network) return "no run across nodes: network efficiency kept";
  if (key == "attention_efficiency" && !flash) return "no run with flash attention: its efficiency kept";
  if (key == "step_overhead_s" && !overhead) return "no run measured time outside the parts: step overhead kept";
  if (key == "moe_imbalance" && !ep) return "no run with expert parallelism: the experts' load imbalance kept";
  return std::string(key) + " kept: the runs spend too little of their steps on it to tell";
}

// |predicted - measured| / measured step time of `s` with the constants `cal`.
double step_error(const CalibrationSample& s, const config::CostCalibration& cal) {
  EstimateInput in = s.input;
  in.device.calibration = cal;
  return std::fabs(rel_error(estimate(in).step_time_s, s.measured.step_s));
}

// Sum of squared errors of every part and (twice weighted) of the step, each relative to the
// measured step time, so a part's error counts by the share of the step it misjudges.
double misfit(const std::vector<CalibrationSample>& samples, const config::CostCalibration& cal, std::vector<double>* step_errors,
              double* rms) {
  double sum = 0;
  int terms = 0;
  if (step_errors) step_errors->clear();
  for (const auto& s : samples) {
    EstimateInput in = s.input;
    in.device.calibration = cal;
    const Estimate e = estimate(in);
    const double step = s.measured.step_s;
    for (const Part& p : kParts) {
      if (!compared(p, s.measured)) continue;
      const double d = (predicted_part(p, e.breakdown, s.measured) - s.measured.*(p.measured)) / step;
      sum += d * d;
      ++terms;
    }
    const double ds = (e.step_time_s - step) / step;
    sum += 2 * ds * ds;
    terms += 2;
    if (step_errors) step_errors->push_back(ds);
  }
  if (rms) *rms = terms > 0 ? std::sqrt(sum / terms) : 0.0;
  return sum;
}

// Per sample, every compared part and the step as fractions of the measured step.
std::vector<double> residual_terms(const std::vector<CalibrationSample>& samples, const config::CostCalibration& cal) {
  std::vector<double> out;
  for (const auto& s : samples) {
    EstimateInput in = s.input;
    in.device.calibration = cal;
    const Estimate e = estimate(in);
    const double step = s.measured.step_s;
    for (const Part& p : kParts) {
      if (compared(p, s.measured)) out.push_back(predicted_part(p, e.breakdown, s.measured) / step);
    }
    out.push_back(e.step_time_s / step);
  }
  return out;
}

// How much the samples tell about one constant at `cal`: the largest change of a part or a step
// (as a fraction of its measured step) per unit change of the constant's logarithm, by central
// differences over a factor of 1.1 each way.
double sensitivity(const std::vector<CalibrationSample>& samples, const config::CostCalibration& cal, const config::CalibrationField& f) {
  const double v = cal.*(f.field);
  if (!(v > 0)) return 0.0;
  config::CostCalibration up = cal, down = cal;
  up.*(f.field) = f.efficiency ? std::min(config::kMaxEfficiency, v * 1.1) : v * 1.1;
  down.*(f.field) = v / 1.1;
  const double span = std::log(up.*(f.field) / down.*(f.field));
  const auto hi = residual_terms(samples, up), lo = residual_terms(samples, down);
  double most = 0;
  for (size_t i = 0; i < hi.size(); ++i) most = std::max(most, std::fabs(hi[i] - lo[i]) / span);
  return most;
}

// Nelder-Mead (Lagarias et al. 1998's standard coefficients) on f over R^n from x0 with initial
// steps `step`; returns the best point after `max_evals` evaluations or when the simplex's
// values agree to `tol`.
template <typename F>
std::vector<double> nelder_mead(F&& f, std::vector<double> x0, double step, int max_evals, double tol) {
  const size_t n = x0.size();
  std::vector<std::vector<double>> x(n + 1, x0);
  for (size_t i = 0; i < n; ++i) x[i + 1][i] += step;
  std::vector<double> fx(n + 1);
  for (size_t i = 0; i <= n; ++i) fx[i] = f(x[i]);
  int evals = static_cast<int>(n + 1);
  std::vector<size_t> order(n + 1);
  auto point = [&](const std::vector<double>& c, const std::vector<double>& w, double t) {
    std::vector<double> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = c[i] + t * (w[i] - c[i]);
    return p;
  };
  while (evals < max_evals) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fx[a] < fx[b]; });
    const size_t best = order.front(), worst = order.back(), second = order[n - 1];
    if (std::fabs(fx[worst] - fx[best]) <= tol * (std::fabs(fx[best]) + 1e-30)) break;
    std::vector<double> c(n, 0.0);  // centroid of all but the worst
    for (size_t k = 0; k < n; ++k) {
      for (size_t i = 0; i < n; ++i) c[i] += x[order[k]][i] / static_cast<double>(n);
    }
    const auto r = point(c, x[worst], -1.0);
    const double fr = f(r);
    ++evals;
    if (fr < fx[best]) {
      const auto e = point(c, x[worst], -2.0);
      const double fe = f(e);
      ++evals;
      if (fe < fr) {
        x[worst] = e;
        fx[worst] = fe;
      } else {
        x[worst] = r;
        fx[worst] = fr;
      }
    } else if (fr < fx[second]) {
      x[worst] = r;
      fx[worst] = fr;
    } else {
      const bool outside = fr < fx[worst];
      const auto k = point(c, outside ? r : x[worst], 0.5);
      const double fk = f(k);
      ++evals;
      if (fk < (outside ? fr : fx[worst])) {
        x[worst] = k;
        fx[worst] = fk;
      } else {  // shrink towards the best
        for (size_t j = 0; j <= n; ++j) {
          if (j == best) continue;
          x[j] = point(x[best], x[j], 0.5);
          fx[j] = f(x[j]);
          ++evals;
        }
      }
    }
  }
  size_t best = 0;
  for (size_t i = 1; i <= n; ++i) {
    if (fx[i] < fx[best]) best = i;
  }
  return x[best];
}

}  // namespace

std::vector<ComparisonRow> compare(const Estimate& predicted, const MeasuredStep& measured) {
  std::vector<ComparisonRow> rows;
  for (const Part& p : kParts) {
    if (!compared(p, measured)) continue;
    const double pr = predicted_part(p, predicted.breakdown, measured), me = measured.*(p.measured);
    rows.push_back({p.name, pr, me, rel_error(pr, me), true});
  }
  rows.push_back({"step", predicted.step_time_s, measured.step_s, rel_error(predicted.step_time_s, measured.step_s), true});
  rows.push_back({"tokens/s", predicted.tokens_per_s, measured.tokens_per_s, rel_error(predicted.tokens_per_s, measured.tokens_per_s), false});
  for (const auto& m : predicted.memory) {
    const size_t r = static_cast<size_t>(m.pp_rank);
    const double me = r < measured.memory_bytes.size() ? measured.memory_bytes[r] : 0.0;
    rows.push_back({"memory pp " + std::to_string(m.pp_rank), m.total(), me, me > 0 ? rel_error(m.total(), me) : NAN, false});
  }
  return rows;
}

// The prior every fitted constant is pulled towards its starting value with, per squared unit of
// its log (or logit) coordinate: a maximum-a-posteriori fit with measurement noise of about 3% of
// a step on each compared term and a prior spread of about a factor e, 0.03^2 / 1. Directions the
// runs cannot tell apart (GEMM efficiency against its fall-off, on runs of one model shape) stay
// near the start instead of running to a bound.
constexpr double kPriorWeight = 1e-3;

Result<CalibrationFit> calibrate(const std::vector<CalibrationSample>& samples, const config::CostCalibration& start,
                                 const std::vector<std::string>& hold) {
  if (samples.empty()) return Status::invalid_input("calibrate: no runs to fit");
  for (const auto& h : hold) {
    bool known = false;
    for (const auto* f : time_constants()) known = known || h == f->key;
    if (!known) return Status::invalid_input("calibrate: cannot hold " + h + ": not a constant of the step time");
  }
  for (const auto& s : samples) {
    if (!(s.measured.step_s > 0)) return Status::invalid_input("calibrate: " + s.label + " has no measured step time");
  }
  CalibrationFit fit;
  (void)misfit(samples, start, &fit.step_error_before, &fit.rms_before);
  config::CostCalibration from = start;
  // The overhead starts at the measured one (the others at the starting constants): it may be 0,
  // which log space cannot hold.
  std::vector<double> overheads;
  for (const auto& s : samples) overheads.push_back(s.measured.overhead_s);
  std::sort(overheads.begin(), overheads.end());
  from.step_overhead_s = std::max(1e-7, std::max(from.step_overhead_s, overheads[overheads.size() / 2]));
  // What the runs tell about each constant decides whether it moves.
  std::vector<const config::CalibrationField*> free;
  std::vector<double> pull_weight;
  for (const auto* f : time_constants()) {
    FittedConstant c;
    c.key = f->key;
    c.before = start.*(f->field);
    c.sensitivity = sensitivity(samples, from, *f);
    const bool held = std::find(hold.begin(), hold.end(), c.key) != hold.end();
    c.informed = c.sensitivity >= kMinSensitivity && !held;
    if (c.informed) {
      free.push_back(f);
      // The pull towards the start: the prior, and more for a constant the runs barely see (at the
      // threshold, as strong again as a 1% misfit per unit of log).
      pull_weight.push_back(kPriorWeight + 1e-4 * (kMinSensitivity / c.sensitivity) * (kMinSensitivity / c.sensitivity));
    } else {
      c.why_kept = held ? c.key + " held at " + format_constant(c.before) + ", as asked" : why_uninformed(c.key, samples);
      if (std::find(fit.kept.begin(), fit.kept.end(), c.why_kept) == fit.kept.end()) fit.kept.push_back(c.why_kept);
    }
    fit.constants.push_back(std::move(c));
  }
  bool overhead_free = false;
  for (const auto* f : free) overhead_free = overhead_free || std::string_view(f->key) == "step_overhead_s";
  if (!overhead_free) from.step_overhead_s = start.step_overhead_s;  // kept: as it was
  // Coordinates: an efficiency e in (0, kMaxEfficiency) as x = logit(e / kMaxEfficiency), so the
  // bound (config/device_profile.h's) is smooth; every other constant as its logarithm.
  using config::kMaxEfficiency;
  std::vector<double> x0;
  for (size_t i = 0; i < free.size(); ++i) {
    const double v = std::max(1e-12, from.*(free[i]->field));
    if (free[i]->efficiency) {
      const double q = std::clamp(v / kMaxEfficiency, 1e-6, 1 - 1e-6);
      x0.push_back(std::log(q / (1 - q)));
    } else {
      x0.push_back(std::log(v));
    }
  }
  auto at = [&](const std::vector<double>& x) {
    config::CostCalibration c = from;
    for (size_t i = 0; i < free.size(); ++i) {
      c.*(free[i]->field) = free[i]->efficiency ? kMaxEfficiency / (1 + std::exp(-x[i])) : std::max(free[i]->at_least, std::exp(x[i]));
    }
    return c;
  };
  // The minimum of the misfit plus the pull (scaled by `strength`) over `fit_on`, from the
  // starting constants: Nelder-Mead, then restarts from points spread around the best so far (a
  // fixed sequence: the fit is deterministic), each polished; the best wins.
  auto fit_over = [&](const std::vector<CalibrationSample>& fit_on, double strength, int restarts) {
    auto objective = [&](const std::vector<double>& x) {
      double pull = 0;
      for (size_t i = 0; i < x.size(); ++i) pull += strength * pull_weight[i] * (x[i] - x0[i]) * (x[i] - x0[i]);
      return misfit(fit_on, at(x), nullptr, nullptr) + pull;
    };
    std::vector<double> best = nelder_mead(objective, x0, 1.0, 6000, 1e-14);
    double best_f = objective(best);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next_unit = [&] {  // splitmix64 -> [-1, 1)
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      return static_cast<double>(z >> 11) / static_cast<double>(1ull << 52) - 1.0;
    };
    for (int restart = 0; restart < restarts; ++restart) {
      std::vector<double> start_x = best;
      for (double& v : start_x) v += 2.0 * next_unit();
      std::vector<double> x = nelder_mead(objective, start_x, 1.0, 4000, 1e-14);
      x = nelder_mead(objective, x, 0.1, 2000, 1e-14);
      const double fx = objective(x);
      if (fx < best_f) {
        best_f = fx;
        best = x;
      }
    }
    return at(nelder_mead(objective, best, 0.05, 2000, 1e-15));
  };
  if (free.empty()) {
    fit.calibration = from;
  } else {
    // How far to trust the runs: with two or more, each is predicted from a fit to the others, at
    // pulls of 1, 4, 16, ... times the prior. A part the model gets wrong in one layout moves the
    // constants it shares with others; fitted without that run, the others' constants then
    // predict it worse than the start did. The weakest pull at which no run left out is predicted
    // worse than from the start by more than kHeldOutSlack of its step wins; where none is,
    // kMaxPullScale (the loop's end, not tried).
    double strength = 1;
    if (samples.size() >= 2) {
      std::vector<double> start_error;  // at the constants the fit starts from
      for (const auto& s : samples) start_error.push_back(step_error(s, from));
      for (strength = 1; strength < kMaxPullScale; strength *= 4) {
        double worst = -1;
        for (size_t out = 0; out < samples.size(); ++out) {
          std::vector<CalibrationSample> rest;
          for (size_t i = 0; i < samples.size(); ++i) {
            if (i != out) rest.push_back(samples[i]);
          }
          worst = std::max(worst, step_error(samples[out], fit_over(rest, strength, 3)) - start_error[out]);
        }
        fit.held_out.push_back({strength, worst});
        if (worst <= kHeldOutSlack) break;
      }
      if (strength > 1) {
        char line[200];
        std::snprintf(line, sizeof line,
                      "the runs disagree (fitted to the others, one is predicted %.0f%% of its step worse than before): every fitted "
                      "constant pulled %.0fx harder towards its start",
                      100 * fit.held_out.front().worst_change, strength);
        fit.kept.emplace_back(line);
      }
    }
    fit.pull_scale = strength;
    fit.calibration = fit_over(samples, strength, 12);
  }
  (void)misfit(samples, fit.calibration, &fit.step_error_after, &fit.rms_after);
  for (const auto* f : free) fit.fitted.emplace_back(f->key);
  for (auto& c : fit.constants) {
    for (const auto& f : config::calibration_fields()) {
      if (c.key == f.key) c.after = fit.calibration.*(f.field);
    }
  }
  return fit;
}

std::string comparison_to_text(const std::vector<ComparisonRow>& rows) {
  std::ostringstream o;
  char line[200];
  std::snprintf(line, sizeof line, "  %-12s %12s %12s %8s\n", "part", "predicted", "measured", "error");
  o << line;
  for (const auto& r : rows) {
    auto value = [&](double v) {
      if (r.seconds) return format_seconds(v);
      if (r.part == "tokens/s") {
        char b[32];
        std::snprintf(b, sizeof b, "%.4g", v);
        return std::string(b);
      }
      return v > 0 ? format_bytes(v) : std::string("-");
    };
    char err[16] = "-";
    if (std::isfinite(r.error)) std::snprintf(err, sizeof err, "%+.0f%%", r.error * 100);
    std::snprintf(line, sizeof line, "  %-12s %12s %12s %8s\n", r.part.c_str(), value(r.predicted).c_str(), value(r.measured).c_str(), err);
    o << line;
  }
  return o.str();
}

Json comparison_to_json(const std::vector<ComparisonRow>& rows) {
  Json::Array a;
  for (const auto& r : rows) {
    Json j = Json::object();
    j.set("part", r.part);
    j.set("predicted", r.predicted);
    j.set("measured", r.measured);
    j.set("error", std::isfinite(r.error) ? Json(r.error) : Json());
    j.set("unit", r.seconds ? "s" : r.part == "tokens/s" ? "tokens/s" : "bytes");
    a.push_back(std::move(j));
  }
  return Json(std::move(a));
}

}  // namespace stagecraft::plan
