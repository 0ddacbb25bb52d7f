// stagecraft-cli devices: the device catalog the cost model plans with.
#include <cstdio>

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
  std::string out;
  if (args->has("--json")) {
    Json list = Json::array();
    for (const auto& d : config::device_catalog()) list.push_back(config::device_to_json(d));
    out = list.dump(2) + "\n";
  } else {
    out = config::devices_to_text(config::device_catalog());
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
