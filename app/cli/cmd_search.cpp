// stagecraft-cli search: every valid layout of a configuration's cluster and model, estimated,
// those that do not fit dropped, the rest ranked by predicted throughput; constraint options pin
// or rule out parts of the layout (plan::LayoutConstraints).
#include <charconv>
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "stagecraft/config/config_io.h"
#include "stagecraft/plan/search.h"

namespace stagecraft::cli {

namespace {

constexpr const char* kUsage =
    "usage: stagecraft-cli search CONFIG [key=value ...] [--top N] [--all] [--tp N] [--pp N] [--tp-in-node] "
    "[--schedules LIST] [--recompute LIST] [--no-zero] [--max-zero N] [--cp N] [--ep N] [--expert-tp N] [--max-micro-batch N] "
    "[--plausible] [--json]";

// A whole number from `lo` to `hi` given to `option`.
Result<int> whole(const std::string& option, const std::string& text, int lo, int hi) {
  int n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size() || n < lo || n > hi) {
    return Status::invalid_input("search: " + option + " " + text + ": expected a whole number from " + std::to_string(lo) + " to " +
                                 std::to_string(hi));
  }
  return n;
}

// "1f1b,interleaved" -> the values `parse` reads; fails naming the first name it cannot read.
template <typename T, typename Parse>
Result<std::vector<T>> name_list(const std::string& option, const std::string& text, Parse parse, const char* names) {
  std::vector<T> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto v = parse(name);
    if (!v) return Status::invalid_input("search: " + option + " " + text + ": '" + name + "' is not one of " + names);
    out.push_back(*v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int cmd_search(const std::vector<std::string>& argv) {
  ArgSpec spec;
  spec.flags = {"--json", "--all", "--tp-in-node", "--no-zero", "--plausible"};
  spec.options = {"--top", "--tp", "--pp", "--cp", "--ep", "--expert-tp", "--max-zero", "--schedules", "--recompute", "--max-micro-batch"};
  spec.overrides = true;
  auto args = parse_args(argv, spec, "search");
  if (!args.ok()) return report(args.status());
  if (args->positionals.size() != 1) {
    return report(Status::invalid_input(std::string("search: expected one CONFIG file (") + kUsage + ")"));
  }
  plan::SearchOptions options;
  auto& k = options.constraints;
  if (auto top = args->option("--top")) {
    auto n = whole("--top", *top, 1, 100000);
    if (!n.ok()) return report(n.status());
    options.top = n.value();
  }
  // --ep fixes the expert-parallel size (a constraint); --expert-tp sets the experts' own tensor
  // parallelism for every layout (plan::SearchOptions::expert_tp).
  for (auto [name, field] : {std::pair{"--tp", &k.tp}, std::pair{"--pp", &k.pp}, std::pair{"--cp", &k.cp}, std::pair{"--ep", &k.ep},
                            std::pair{"--expert-tp", &options.expert_tp}, std::pair{"--max-micro-batch", &k.max_micro_batch}}) {
    if (auto v = args->option(name)) {
      auto n = whole(name, *v, 1, 1 << 20);
      if (!n.ok()) return report(n.status());
      *field = n.value();
    }
  }
  if (auto v = args->option("--schedules")) {
    auto list = name_list<config::Schedule>("--schedules", *v, config::parse_schedule, "gpipe, 1f1b, interleaved");
    if (!list.ok()) return report(list.status());
    k.schedules = list.value();
  }
  if (auto v = args->option("--recompute")) {
    auto list = name_list<config::Recompute>("--recompute", *v, config::parse_recompute, "none, selective, full");
    if (!list.ok()) return report(list.status());
    k.recomputes = list.value();
  }
  k.fits_only = !args->has("--all");
  options.cap_at_published_mfu = args->has("--plausible");
  k.tp_within_node = args->has("--tp-in-node");
  if (args->has("--no-zero")) k.max_zero = 0;
  if (auto v = args->option("--max-zero")) {
    if (args->has("--no-zero")) return report(Status::invalid_input("search: --no-zero and --max-zero together; give one"));
    auto n = whole("--max-zero", *v, 0, 3);
    if (!n.ok()) return report(n.status());
    k.max_zero = n.value();
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
