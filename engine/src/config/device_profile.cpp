// Device profiles: reading and writing. See device_profile.h.
#include "stagecraft/config/device_profile.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "stagecraft/config/config_io.h"
#include "yaml_tree.h"

namespace stagecraft::config {

const std::vector<CalibrationField>& calibration_fields() {
  static const std::vector<CalibrationField> kFields = {
      {"gemm_efficiency", &CostCalibration::gemm_efficiency, "fraction of the peak a large GEMM sustains", true},
      {"gemm_half_dim", &CostCalibration::gemm_half_dim, "GEMM dimension that halves its efficiency"},
      {"memory_efficiency", &CostCalibration::memory_efficiency, "fraction of the memory bandwidth streaming work gets", true},
      {"link_efficiency", &CostCalibration::link_efficiency, "fraction of the node-local link collectives get", true},
      {"network_efficiency", &CostCalibration::network_efficiency, "fraction of the network collectives get", true},
      {"collective_step_s", &CostCalibration::collective_step_s, "latency of one ring step of a collective, s"},
      {"tp_link_efficiency", &CostCalibration::tp_link_efficiency, "fraction of the link tensor-parallel collectives get", true},
      {"tp_step_s", &CostCalibration::tp_step_s, "latency of one ring step of a tensor-parallel collective, s"},
      {"kernel_s", &CostCalibration::kernel_s, "fixed cost of one kernel, s"},
      {"attention_efficiency", &CostCalibration::attention_efficiency, "fraction of the peak fused attention sustains", true},
      {"gpu_workspace_gib", &CostCalibration::gpu_workspace_gib, "GPU memory of the framework itself, GiB"},
      {"step_overhead_s", &CostCalibration::step_overhead_s, "fixed time per step outside the parts, s"},
      {"moe_imbalance", &CostCalibration::moe_imbalance, "busiest expert-parallel rank's tokens over the mean (1 balanced)", false, 1.0},
  };
  return kFields;
}

Result<DeviceProfile> parse_device_profile(std::string_view yaml, const std::string& origin) {
  auto root = parse_yaml(yaml);
  if (!root.ok()) return Status::invalid_input(origin + ": " + root.status().message());
  const YamlNode& doc = *root.value();
  if (!doc.is_mapping()) return Status::invalid_input(origin + ": a device profile is a mapping with base and calibration");
  DeviceProfile p;
  for (const auto& [key, value] : doc.entries) {
    const std::string where = origin + ": line " + std::to_string(value->line) + ": ";
    if (key == "name" || key == "base") {
      if (!value->is_scalar() || value->is_null() || value->scalar.find('\n') != std::string::npos) {
        return Status::invalid_input(where + key + " must be one line of text");
      }
      (key == "name" ? p.name : p.base) = value->scalar;
    } else if (key == "calibration") {
      if (!value->is_mapping()) return Status::invalid_input(where + "calibration must be a mapping of constants");
      for (const auto& [ck, cv] : value->entries) {
        const CalibrationField* f = nullptr;
        for (const auto& cand : calibration_fields()) {
          if (ck == cand.key) f = &cand;
        }
        const std::string at = origin + ": line " + std::to_string(cv->line) + ": calibration." + one_line(ck);
        if (!f) {
          std::string keys;
          for (const auto& cand : calibration_fields()) keys += (keys.empty() ? "" : ", ") + std::string(cand.key);
          return Status::invalid_input(at + ": unknown constant; the constants are " + keys);
        }
        double x = 0;
        const std::string text = cv->is_scalar() ? cv->scalar : std::string();
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(x)) {
          return Status::invalid_input(at + ": expected a number, got " + one_line(text));
        }
        if (x < f->at_least || (f->efficiency && (x <= 0 || x > kMaxEfficiency))) {
          char least[32];
          std::snprintf(least, sizeof least, "at least %g", f->at_least);
          return Status::invalid_input(at + "=" + one_line(text) + ": out of range (" +
                                       (f->efficiency ? std::string("an efficiency in (0, 4]") : std::string(least)) + ")");
        }
        p.calibration.*(f->field) = x;
      }
    } else {
      return Status::invalid_input(where + one_line(key) + ": unknown key; a device profile has name, base and calibration");
    }
  }
  if (p.base.empty()) return Status::invalid_input(origin + ": base is missing (the built-in device the profile calibrates, e.g. base: cpu)");
  if (!find_builtin_device(p.base)) {
    return Status::invalid_input(origin + ": base=" + one_line(p.base) + ": not a built-in device (stagecraft-cli devices lists them)");
  }
  return p;
}

Result<DeviceProfile> read_device_profile(const std::string& path) {
  auto text = read_text_file(path);
  if (!text.ok()) return Status::invalid_input("device profile " + text.status().message());
  auto p = parse_device_profile(text.value(), path);
  if (!p.ok()) return p.status();
  if (p->name.empty()) p->name = std::filesystem::path(path).stem().string();
  return p;
}

std::string device_profile_to_yaml(const DeviceProfile& profile) {
  std::ostringstream o;
  for (const auto& c : profile.comments) o << "# " << c << "\n";
  if (!profile.name.empty()) o << "name: " << yaml_string(profile.name) << "\n";
  o << "base: " << yaml_string(profile.base) << "\n";
  o << "calibration:\n";
  for (const auto& f : calibration_fields()) o << "  " << f.key << ": " << yaml_double(profile.calibration.*(f.field)) << "\n";
  return o.str();
}

Status write_device_profile(const std::string& path, const DeviceProfile& profile) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return Status::io_error(parent.string() + ": cannot make the folder: " + ec.message());
  }
  return write_text_file_atomic(path, device_profile_to_yaml(profile));
}

Result<DeviceSpec> profile_device(const DeviceProfile& profile, const std::string& path) {
  const DeviceSpec* base = find_builtin_device(profile.base);
  if (!base) return Status::invalid_input(path + ": base=" + profile.base + ": not a built-in device");
  DeviceSpec d = *base;
  if (!profile.name.empty()) d.name = profile.name;
  d.description = base->name + " calibrated (" + path + ")";
  d.calibration = profile.calibration;
  d.profile = path;
  return d;
}

}  // namespace stagecraft::config
