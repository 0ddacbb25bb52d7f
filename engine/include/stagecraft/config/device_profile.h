// Device profiles: a catalog device with the cost model's constants fitted to a person's own runs
// (`stagecraft-cli calibrate` writes them; plan/calibrate.h fits them).
//
// The file is YAML:
//   # comments: what it was fitted from and how well (the calibrate command writes them)
//   name: cpu-calibrated          # the device's name in plans; defaults to the file's stem
//   base: cpu                     # a built-in device: its memory, peaks and links
//   calibration:                  # any of config::CostCalibration's fields; the rest default
//     gemm_efficiency: 0.41
//     memory_efficiency: 0.33
//     step_overhead_s: 0.0012
// Unknown keys, a base that is not a built-in device, and constants out of their range are refused
// with one line naming the file and the key. Efficiencies lie in (0, 4]: above 1 where the
// device's nominal figures undercount what its ranks get (a CPU whose ranks take turns on the
// cores: an idle pipeline stage leaves its core to the others); times and sizes are >= 0; the
// experts' load imbalance is >= 1.
//
// A config uses a profile as `cluster.device: {base: cpu, profile: FILE}` (the base must match),
// or by its name when the file lies in config::user_devices_dir(). Pure functions over files;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "stagecraft/config/device.h"
#include "stagecraft/core/status.h"

namespace stagecraft::config {

struct DeviceProfile {
  std::string name;
  std::string base;
  CostCalibration calibration;
  std::vector<std::string> comments;  // written as "# ..." lines at the top; not read back
};

// The calibration's fields by their YAML names, in file order, for readers, writers and fits.
struct CalibrationField {
  const char* key;
  double CostCalibration::*field;
  const char* help;
  bool efficiency = false;  // a fraction of a peak, in (0, kMaxEfficiency]; the others are >= at_least
  double at_least = 0.0;    // the smallest value that means something (moe_imbalance: 1)
};
inline constexpr double kMaxEfficiency = 4.0;
const std::vector<CalibrationField>& calibration_fields();

Result<DeviceProfile> parse_device_profile(std::string_view yaml, const std::string& origin);
Result<DeviceProfile> read_device_profile(const std::string& path);
std::string device_profile_to_yaml(const DeviceProfile& profile);
// Writes atomically, making the folder when missing.
Status write_device_profile(const std::string& path, const DeviceProfile& profile);

// The profile's device: its base with the profile's name, constants and file.
Result<DeviceSpec> profile_device(const DeviceProfile& profile, const std::string& path);

}  // namespace stagecraft::config
