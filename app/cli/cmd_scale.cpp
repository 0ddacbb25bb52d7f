// stagecraft-cli scale: the best layout of a configuration's model and global batch at 1, 2, 4,
// ... nodes, with tokens/s, MFU, days to train and ideal linear scaling (plan/scale.h).
#include <charconv>
#include <cstdio>
#include <tuple>

#include "args.h"
#include "commands.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/scale.h"

namespace stagecraft::cli {

int cmd_scale(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json", "--csv", "--plausible"};
  spec.options = {"--max-nodes", "--tokens", "--cp", "--ep", "--expert-tp", "--max-zero"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "scale");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input(
        "scale: expected one CONFIG file (usage: stagecraft-cli scale CONFIG [key=value ...] [--max-nodes N] [--tokens N] [--cp N] [--ep N] "
        "[--expert-tp N] [--max-zero N] [--plausible] [--json|--csv])"));
  }
  if (args->has("--json") && args->has("--csv")) return report(Status::invalid_input("scale: --json and --csv: choose one"));
  plan::ScaleOptions options;
  if (auto n = args->option("--max-nodes")) {
    int v = 0;
    auto [p, ec] = std::from_chars(n->data(), n->data() + n->size(), v);
    if (ec != std::errc() || p != n->data() + n->size() || v < 1 || v > (1 << 20)) {
      return report(Status::invalid_input("scale: --max-nodes " + *n + ": expected a whole number from 1 to 1048576"));
    }
    options.max_nodes = v;
  }
  if (auto t = args->option("--tokens")) {
    auto [p, ec] = std::from_chars(t->data(), t->data() + t->size(), options.tokens);
    if (ec != std::errc() || p != t->data() + t->size() || !(options.tokens > 0) || options.tokens > 1e18) {
      return report(Status::invalid_input("scale: --tokens " + *t + ": expected a positive number of tokens, e.g. 300e9"));
    }
  }
  // Every size's layouts with a fixed context- or expert-parallel size, the experts' tensor
  // parallelism, or ZeRO stages up to one.
  for (auto [name, lo, hi, field] : {std::tuple{"--cp", 1, 1 << 20, &options.search.constraints.cp},
                                     std::tuple{"--ep", 1, 1 << 20, &options.search.constraints.ep},
                                     std::tuple{"--expert-tp", 1, 1 << 20, &options.search.expert_tp},
                                     std::tuple{"--max-zero", 0, 3, &options.search.constraints.max_zero}}) {
    if (auto n = args->option(name)) {
      int v = 0;
      auto [p, ec] = std::from_chars(n->data(), n->data() + n->size(), v);
      if (ec != std::errc() || p != n->data() + n->size() || v < lo || v > hi) {
        return report(Status::invalid_input(std::string("scale: ") + name + " " + *n + ": expected a whole number from " + std::to_string(lo) +
                                            " to " + std::to_string(hi)));
      }
      *field = v;
    }
  }
  options.search.cap_at_published_mfu = args->has("--plausible");
  // As for search, the layout keys are what each size chooses; the file's values only need to parse.
  auto cfg = config::load_config_file(args->positionals[0], args->overrides, config::Rules::kExceptLayout);
  if (!cfg.ok()) return report(cfg.status());
  auto result = plan::scale(cfg.value(), options);
  if (!result.ok()) return report(result.status());
  std::string out = args->has("--json")  ? plan::scale_to_json(result.value()).dump(2) + "\n"
                    : args->has("--csv") ? plan::scale_to_csv(result.value())
                                         : plan::scale_to_text(result.value());
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace stagecraft::cli
