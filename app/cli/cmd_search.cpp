// stagecraft-cli search: every valid layout of a configuration's cluster and model, estimated,
// those that do not fit dropped, the rest ranked by predicted throughput.
#include <charconv>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/search.h"

namespace stagecraft::cli {

int cmd_search(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json"};
  spec.options = {"--top"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "search");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("search: expected one CONFIG file (usage: stagecraft-cli search CONFIG [key=value ...] [--top N] [--json])"));
  }
  plan::SearchOptions options;
  if (auto top = args->option("--top")) {
    int n = 0;
    auto [p, ec] = std::from_chars(top->data(), top->data() + top->size(), n);
    if (ec != std::errc() || p != top->data() + top->size() || n < 1 || n > 100000) {
      return report(Status::invalid_input("search: --top " + *top + ": expected a whole number from 1 to 100000"));
    }
    options.top = n;
  }
  // The layout keys are what search chooses; the file's values for them only need to parse.
  auto cfg = config::load_config_file(args->positionals[0], args->overrides, config::Rules::kExceptLayout);
  if (!cfg.ok()) return report(cfg.status());
  auto result = plan::search(cfg.value(), options);
  if (!result.ok()) return report(result.status());
  std::string out = args->has("--json") ? plan::search_to_json(result.value()).dump(2) + "\n" : plan::search_to_text(result.value());
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
