// Args: the command line of one stagecraft-cli command, split into positionals, key=value
// overrides, flags and options, checked against what the command accepts.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::cli {

struct ArgSpec {
  std::set<std::string> flags;    // e.g. "--json"
  std::set<std::string> options;  // take a value: "--to X" or "--to=X"
  std::set<std::string> repeatable;  // options that may be given more than once (also in `options`)
  bool overrides = false;         // accepts key.path=value after the positionals
};

struct Args {
  std::vector<std::string> positionals;
  std::vector<std::string> overrides;
  std::set<std::string> flags;
  std::map<std::string, std::string> options;           // the last value of each option
  std::map<std::string, std::vector<std::string>> repeated;  // every value of a repeatable option, in order

  bool has(const std::string& flag) const { return flags.count(flag) != 0; }
  std::optional<std::string> option(const std::string& name) const {
    auto it = options.find(name);
    if (it == options.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> all(const std::string& name) const {
    auto it = repeated.find(name);
    return it == repeated.end() ? std::vector<std::string>{} : it->second;
  }
};

// argv after the command name. Fails with a message naming the bad argument.
Result<Args> parse_args(const std::vector<std::string>& argv, const ArgSpec& spec, const std::string& command);

}  // namespace stagecraft::cli
