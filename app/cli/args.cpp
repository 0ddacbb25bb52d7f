// Command-line splitting for stagecraft-cli. See args.h.
#include "args.h"

#include <algorithm>

namespace stagecraft::cli {

namespace {

std::string closest(const std::string& word, const ArgSpec& spec) {
  std::string best;
  size_t best_d = 3;  // suggest only near misses
  auto consider = [&](const std::string& cand) {
    // Plain edit distance, small strings only.
    std::vector<size_t> prev(cand.size() + 1), cur(cand.size() + 1);
    for (size_t j = 0; j <= cand.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= cand.size(); ++j) {
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (word[i - 1] == cand[j - 1] ? 0 : 1)});
      }
      std::swap(prev, cur);
    }
    if (prev[cand.size()] < best_d) {
      best_d = prev[cand.size()];
      best = cand;
    }
  };
  for (const auto& f : spec.flags) consider(f);
  for (const auto& o : spec.options) consider(o);
  return best;
}

}  // namespace

Result<Args> parse_args(const std::vector<std::string>& argv, const ArgSpec& spec, const std::string& command) {
  Args a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-' && !(arg.size() > 1 && std::isdigit(static_cast<unsigned char>(arg[1])))) {
      std::string name = arg, value;
      bool has_value = false;
      if (const size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        has_value = true;
      }
      if (spec.flags.count(name)) {
        if (has_value) return Status::invalid_input(command + ": " + name + " takes no value");
        a.flags.insert(name);
      } else if (spec.options.count(name)) {
        if (!has_value) {
          if (i + 1 >= argv.size()) return Status::invalid_input(command + ": " + name + " needs a value");
          value = argv[++i];
        }
        if (spec.repeatable.count(name)) {
          a.repeated[name].push_back(value);
        } else if (a.options.count(name)) {
          return Status::invalid_input(command + ": " + name + " given twice");
        }
        a.options[name] = value;
      } else {
        const std::string hint = closest(name, spec);
        return Status::invalid_input(command + ": unknown option " + name + (hint.empty() ? "" : "; did you mean " + hint + "?") +
                                     " (see stagecraft-cli " + command + " --help)");
      }
      continue;
    }
    if (spec.overrides && arg.find('=') != std::string::npos && !a.positionals.empty()) {
      a.overrides.push_back(arg);
      continue;
    }
    a.positionals.push_back(arg);
  }
  return a;
}

}  // namespace stagecraft::cli
