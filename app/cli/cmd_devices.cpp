// stagecraft-cli devices: the device catalog the cost model plans with, and the user's calibrated
// devices (profiles in the user catalog, config/device_profile.h).
#include <cstdio>
#include <vector>

#include "args.h"
#include "commands.h"
#include "stagecraft/config/device.h"

namespace stagecraft::cli {

int cmd_devices(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json"};
  auto args = parse_args(argv, spec, "devices");
  if (!args.ok()) return report(args.status());
  if (!args->positionals.empty()) {
    return report(Status::invalid_input("devices: takes no arguments (usage: stagecraft-cli devices [--json])"));
  }
  // The built-in catalog, then the user's calibrated profiles (config/device.h).
  std::vector<config::DeviceSpec> all = config::device_catalog();
  all.insert(all.end(), config::user_devices().begin(), config::user_devices().end());
  for (const auto& problem : config::user_device_problems()) std::fprintf(stderr, "stagecraft-cli: warning: %s (left out)\n", problem.c_str());
  std::string out;
  if (args->has("--json")) {
    Json list = Json::array();
    for (const auto& d : all) list.push_back(config::device_to_json(d));
    out = list.dump(2) + "\n";
  } else {
    out = config::devices_to_text(all);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
