// stagecraft-cli calibrate: fits the cost model's device constants to recorded runs
// (plan/calibrate.h over launch/run_measurement.h) and writes a device profile
// (config/device_profile.h) that plans use through cluster.device.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/device_profile.h"
#include "stagecraft/core/json.h"
#include "stagecraft/launch/run_measurement.h"
#include "stagecraft/plan/calibrate.h"

namespace stagecraft::cli {

namespace {

std::string percent(double x) {
  char b[16];
  std::snprintf(b, sizeof b, "%+.1f%%", x * 100);
  return b;
}

}  // namespace

int cmd_calibrate(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json"};
  spec.options = {"--db", "-o", "--name"};
  auto args = parse_args(argv, spec, "calibrate");
  if (!args.ok()) return report(args.status());
  const Args& a = args.value();
  if (!a.overrides.empty()) return report(Status::invalid_input("calibrate: " + a.overrides.front() + ": takes run ids, not config overrides"));
  if (a.positionals.empty()) {
    return report(Status::invalid_input("calibrate: name one or more recorded runs (usage: stagecraft-cli calibrate RUN_ID ... [-o PROFILE.yaml])"));
  }
  std::vector<int64_t> ids;
  for (const auto& p : a.positionals) {
    char* end = nullptr;
    errno = 0;
    const long long id = std::strtoll(p.c_str(), &end, 10);
    if (p.empty() || *end != '\0' || errno != 0 || id <= 0) {
      return report(Status::invalid_input("calibrate: " + p + ": not a run id (a positive number from `stagecraft-cli runs list`)"));
    }
    ids.push_back(id);
  }
  if (const auto out = a.option("-o"); out && std::filesystem::is_directory(*out)) {
    return report(Status::invalid_input("calibrate: -o " + *out + ": is a folder; give the profile's file name (e.g. " + *out + "/lab.yaml)"));
  }
  const auto db = a.option("--db");
  auto st = open_history_to_read(db ? &*db : nullptr);
  if (!st.ok()) return report(st.status());
  if (!st.value()) return report(Status::not_found("calibrate: no run history yet at " + history_path(nullptr) + "; run something first"));
  auto samples = launch::calibration_samples(*st.value(), ids);
  if (!samples.ok()) return report(samples.status().with_context("calibrate"));
  // One base device: constants fitted over several devices would describe none of them.
  const auto& first = samples->front().input.device;
  for (const auto& s : samples.value()) {
    if (s.input.device.name != first.name) {
      return report(Status::invalid_input("calibrate: " + samples->front().label + " ran on " + first.name + " but " + s.label + " on " +
                                          s.input.device.name + "; calibrate one device at a time"));
    }
  }
  const config::DeviceSpec* builtin = config::find_builtin_device(first.name);
  std::string base = builtin ? builtin->name : std::string();
  if (!builtin) {
    // A profile's device: its base is the built-in device the profile calibrated.
    if (!first.profile.empty()) {
      auto p = config::read_device_profile(first.profile);
      if (p.ok()) base = p->base;
    }
    if (base.empty()) {
      return report(Status::invalid_input("calibrate: the runs' device " + first.name + " is not a catalog device; a profile calibrates one"));
    }
  }
  auto fit = plan::calibrate(samples.value(), first.calibration);
  if (!fit.ok()) return report(fit.status());

  config::DeviceProfile profile;
  profile.base = base;
  profile.name = a.option("--name").value_or(base + "-calibrated");
  profile.calibration = fit->calibration;
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  profile.comments.push_back(std::string("Stagecraft device profile, fitted ") + when + " by `stagecraft-cli calibrate` to:");
  for (size_t i = 0; i < samples->size(); ++i) {
    profile.comments.push_back("  " + samples.value()[i].label + ": step " + plan::format_seconds(samples.value()[i].measured.step_s) +
                               " measured; predicted " + percent(fit->step_error_before[i]) + " before, " + percent(fit->step_error_after[i]) +
                               " after");
  }
  for (const auto& k : fit->kept) profile.comments.push_back("  " + k);
  const std::string path = a.option("-o").value_or(config::user_devices_dir() + "/" + profile.name + ".yaml");
  if (Status s = config::write_device_profile(path, profile); !s) return report(s.with_context("calibrate"));

  if (a.has("--json")) {
    Json j = Json::object();
    j.set("profile", path);
    j.set("name", profile.name);
    j.set("base", profile.base);
    Json c = Json::object();
    for (const auto& f : config::calibration_fields()) c.set(f.key, fit->calibration.*(f.field));
    j.set("calibration", std::move(c));
    j.set("fitted", Json::array_of(fit->fitted));
    Json kept = Json::array();
    for (const auto& k : fit->constants) {
      if (k.informed) continue;
      Json x = Json::object();
      x.set("constant", k.key);
      x.set("why", k.why_kept);
      kept.push_back(std::move(x));
    }
    j.set("kept", std::move(kept));
    Json sens = Json::object();
    for (const auto& k : fit->constants) sens.set(k.key, k.sensitivity);
    j.set("sensitivity", std::move(sens));
    Json runs = Json::array();
    for (size_t i = 0; i < samples->size(); ++i) {
      Json r = Json::object();
      r.set("label", samples.value()[i].label);
      r.set("step_s", samples.value()[i].measured.step_s);
      r.set("error_before", fit->step_error_before[i]);
      r.set("error_after", fit->step_error_after[i]);
      runs.push_back(std::move(r));
    }
    j.set("runs", std::move(runs));
    j.set("rms_before", fit->rms_before);
    j.set("rms_after", fit->rms_after);
    j.set("pull_scale", fit->pull_scale);
    Json held = Json::array();
    for (const auto& h : fit->held_out) {
      Json x = Json::object();
      x.set("pull_scale", h.pull_scale);
      x.set("worst_change", h.worst_change);
      held.push_back(std::move(x));
    }
    j.set("held_out", std::move(held));
    j.set("notes", Json::array_of(fit->kept));  // every plain line of the text's "what the runs could not tell"
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("calibrated %s from %zu run%s (fitted: ", base.c_str(), samples->size(), samples->size() == 1 ? "" : "s");
  for (size_t i = 0; i < fit->fitted.size(); ++i) std::printf("%s%s", i ? ", " : "", fit->fitted[i].c_str());
  std::printf(")\n");
  for (const auto& f : config::calibration_fields()) {
    const double before = first.calibration.*(f.field), after = fit->calibration.*(f.field);
    const char* how = "";
    for (const auto& k : fit->constants) {
      if (k.key == f.key) how = k.informed ? "fitted" : "kept  ";
    }
    std::printf("  %-22s %12.4g -> %-12.4g %-6s  %s\n", f.key, before, after, how, f.help);
  }
  if (!fit->kept.empty()) {
    std::printf("what the runs could not tell:\n");
    for (const auto& k : fit->kept) std::printf("  %s\n", k.c_str());
  }
  std::printf("step time, predicted against measured:\n");
  for (size_t i = 0; i < samples->size(); ++i) {
    std::printf("  %-44s %10s  before %8s  after %8s\n", samples.value()[i].label.c_str(),
                plan::format_seconds(samples.value()[i].measured.step_s).c_str(), percent(fit->step_error_before[i]).c_str(),
                percent(fit->step_error_after[i]).c_str());
  }
  std::printf("every part, rms error relative to the step: %.1f%% before, %.1f%% after\n", fit->rms_before * 100, fit->rms_after * 100);
  std::printf("wrote %s; use it with cluster.device: {base: %s, profile: %s}%s\n", path.c_str(), base.c_str(), path.c_str(),
              a.option("-o") ? "" : (" or cluster.device: " + profile.name).c_str());
  return 0;
}

}  // namespace stagecraft::cli
