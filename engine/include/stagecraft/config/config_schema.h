// The configuration schema: every key of a run configuration described once — its dotted path,
// type, accepted range, default, one-line help, the setup form's label, the names other
// frameworks give it, and how its value is read from and written to a RunConfig.
//
// The YAML reader and writer (config_io.cpp), command-line overrides, suggest_key(), the
// foreign-name hints and the setup form are all driven from this table; a test checks it
// against the key reference in docs/configuration.md. It describes single keys; rules that relate keys (tp x pp
// divides the world) live in validate.cpp.
//
// Adding an ordinary key (int, double, bool, text or enum) is one entry in config_schema.cpp:
//   {.path = "train.log_every", .type = KeyType::kInt, .default_text = "10", .help = "steps between log lines",
//    .min = 1, .max = 1e9, .access = field([](auto& c) -> auto& { return c.train.log_every; })},
// plus the field in RunConfig, a line in docs/configuration.md's key reference and any rule in validate.cpp.
//
// Everything here is immutable after first use; safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stagecraft/config/run_config.h"

namespace stagecraft::config {

enum class KeyType {
  kInt,        // an integer in [min, max]
  kUint64,     // a non-negative 64-bit integer
  kDouble,     // a finite number in [min, max]
  kBool,       // true or false (also yes/no, on/off)
  kText,       // one line of text
  kEnum,       // one of `choices`
  // Keys with a form of their own, read and written by config_io.cpp:
  kDevice,     // cluster.device: a catalog name, or a mapping {base | name, memory_gib, ...}
  kHosts,      // cluster.hosts: a list of {host: NAME, slots: N}
  kOrder,      // parallel.order: tp, dp and pp joined by '-', innermost first
  kPartition,  // pipeline.partition: uniform, balanced, or a list of one stage id per layer
};

// A key's value as the schema moves it: int keys as long long, enums, device, order and
// partition as their YAML text, the rest as themselves.
using KeyValue = std::variant<long long, uint64_t, double, bool, std::string>;

struct KeyAccess {
  KeyValue (*get)(const RunConfig&) = nullptr;
  // Returns false, changing nothing, when the value has the wrong type or names no choice.
  bool (*set)(RunConfig&, const KeyValue&) = nullptr;
};

struct KeySpec {
  std::string_view path;          // "parallel.tp"; a top-level key has no dot
  KeyType type = KeyType::kInt;
  std::string_view default_text;  // the default as YAML writes it ("1", "auto", "3.0e-4", "\"\"")
  std::string_view help;          // one line
  double min = 0, max = 0;        // kInt, kDouble: the accepted range, inclusive
  std::vector<std::string_view> choices;  // kEnum: every name, in the order they are listed
  std::string_view label;         // the setup form's label; empty: the form has no field for it
  std::string_view zero_label;    // kInt: what 0 stands for ("auto", "4 x hidden"); 0 itself
                                  // is then allowed as a default below min
  bool zero_label_is_yaml = false;  // the zero_label is also how YAML writes 0 (dp: auto)
  bool allow_empty = false;       // kText: "" is a value
  bool omit_default = false;      // the writer leaves the key out while it has its default
  std::vector<std::string_view> foreign;  // other frameworks' names for it (LiBai, Megatron, Paddle)
  // A rule about this key alone beyond type and range: the message for a bad value, else "".
  std::string (*rule)(const KeyValue&) = nullptr;
  // kInt with a zero_label: the value 0 stands for (4 x hidden), for the writer's comment.
  long long (*derived)(const RunConfig&) = nullptr;
  KeyAccess access;               // empty for kHosts

  // Keys nest one mapping per dot: "model.moe.experts" is experts in the mapping moe in model.
  std::string_view section() const;  // "parallel" for "parallel.tp", "model.moe" for "model.moe.experts"; "" at the top
  std::string_view leaf() const;     // "tp" for "parallel.tp", "experts" for "model.moe.experts"
};

// Every key, in document order (name, cluster.*, model.*, parallel.*, pipeline.*, train.*,
// backend, comm, launch.*).
const std::vector<KeySpec>& config_schema();
// The key with this full path, or nullptr.
const KeySpec* find_key(std::string_view path);
// The names under the document's root in document order: top-level keys and sections.
const std::vector<std::string>& root_names();
// The keys of one section (or of the root for ""), leaf names in document order; a nested
// section's name ("moe" in "model") stands where its first key is.
std::vector<std::string> section_keys(std::string_view section);
// The Stagecraft key another framework's name stands for ("tensor_parallel_size" ->
// "parallel.tp"), or "".
std::string_view foreign_key(std::string_view name);

// `choices` as a person reads them: "fp32, fp16 or bf16".
std::string choices_text(const KeySpec& key);

}  // namespace stagecraft::config
