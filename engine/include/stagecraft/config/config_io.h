// Reading and writing run configurations (YAML), with command-line overrides.
//
// parse_config() turns one YAML document plus `key.path=value` overrides (applied in order, as
// LiBai's command line does) into a validated RunConfig. Every problem of the document is found
// in one pass and reported together: the returned Status holds one line per problem, each
// starting with where it is ("bert.yaml:7: " or "command line: ") and naming the key, the value
// and the rule, e.g.
//   bert.yaml:7: parallel.tp=3: 8 GPUs are not divisible by tp x pp = 6
//   bert.yaml:9: pipeline.schedul: unknown key; did you mean pipeline.schedule?
// Status code kInvalidInput for any problem of the input; kNotFound / kIoError for the file.
//
// to_yaml() writes every key, defaults included, so that a saved file documents the whole run;
// parse_config(to_yaml(c)) == c for every valid c. save_config_file() writes atomically
// (temporary file, then rename) so that a failed save never leaves a half-written file.
// All functions are pure or touch only the named file; safe to call from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/config/run_config.h"
#include "stagecraft/config/validate.h"
#include "stagecraft/core/status.h"

namespace stagecraft::config {

// `rules`: which consistency rules to hold the result to (validate.h); kExceptLayout loads a
// base for `search`, whose layout keys need only parse.
Result<RunConfig> parse_config(std::string_view yaml, std::string_view origin,
                               const std::vector<std::string>& overrides = {}, Rules rules = Rules::kAll);
Result<RunConfig> load_config_file(const std::string& path,
                                   const std::vector<std::string>& overrides = {}, Rules rules = Rules::kAll);

// Applies `key.path=value` overrides to an already valid config (as the GUI and the CLI's
// import do); the result is validated like a loaded file.
Result<RunConfig> apply_overrides(const RunConfig& base, const std::vector<std::string>& overrides);

std::string to_yaml(const RunConfig& config);
Status save_config_file(const std::string& path, const RunConfig& config);

// Every key a configuration may hold, as its full dotted path, in document order: the paths of
// config_schema() (config_schema.h), which describes each key.
const std::vector<std::string>& config_keys();

// The closest known key to `key` when one is close enough to be a likely typo, else "".
std::string suggest_key(std::string_view key);

// Reads a whole file; kNotFound when it does not exist, kIoError when it cannot be read.
Result<std::string> read_text_file(const std::string& path);
// Writes through a temporary file in the same directory, synced to the disk, then renamed over
// `path` and the directory synced: a crash leaves the old file or the whole new one.
Status write_text_file_atomic(const std::string& path, std::string_view text);
// fsync(2) of a directory (its entries: names made, renamed or removed), "" meaning the current one.
Status sync_directory(const std::string& dir);

}  // namespace stagecraft::config
