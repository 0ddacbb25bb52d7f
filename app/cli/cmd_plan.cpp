// stagecraft-cli plan: load, validate and plan a configuration; print tables or JSON.
#include <charconv>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "history_file.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/plan.h"

namespace stagecraft::cli {

int cmd_plan(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json"};
  spec.options = {"--tokens"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "plan");
  if (!args.ok()) return report(args.status());
  double tokens = 0;
  if (auto t = args->option("--tokens")) {
    auto [p, ec] = std::from_chars(t->data(), t->data() + t->size(), tokens);
    if (ec != std::errc() || p != t->data() + t->size() || !(tokens > 0) || tokens > 1e18) {
      return report(Status::invalid_input("plan: --tokens " + *t + ": expected a positive number of tokens, e.g. 300e9"));
    }
  }
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input("plan: expected one CONFIG file (usage: stagecraft-cli plan CONFIG [key=value ...] [--tokens N] [--json])"));
  }
  auto cfg = load_run_config(args->positionals[0], args->overrides, nullptr);
  if (!cfg.ok()) return report(cfg.status());
  auto plan = plan::make_plan(cfg.value());
  if (!plan.ok()) return report(plan.status());
  if (args->has("--json")) {
    std::string out = plan::plan_to_json(plan.value()).dump(2);
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    const std::string out = plan::plan_to_text(plan.value(), tokens);
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
