// YamlNode: a YAML document as a tree of scalars, sequences and mappings, with the line and
// column of every node, built from libyaml's event parser.
//
// This is the loader's private view of YAML: no tags, no type resolution (a scalar stays the text
// it was written as, plus whether it was quoted), aliases shared rather than copied so that a
// malicious document cannot expand exponentially, nesting bounded. Keys must be scalars and
// unique within their mapping. One document per text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::config {

struct YamlNode {
  enum class Kind { kScalar, kSequence, kMapping };
  using Ptr = std::shared_ptr<YamlNode>;

  Kind kind = Kind::kScalar;
  std::string scalar;                               // kScalar: the text as written
  bool quoted = false;                              // kScalar: '...' or "..." (always a string)
  std::vector<Ptr> items;                           // kSequence
  std::vector<std::pair<std::string, Ptr>> entries; // kMapping, in document order
  int line = 0;                                     // 1-based; 0 when made by code
  int column = 0;
  std::string origin;                               // empty: the document; else where it came
                                                    // from, e.g. "command line parallel.tp=4"

  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_sequence() const { return kind == Kind::kSequence; }
  bool is_mapping() const { return kind == Kind::kMapping; }
  bool is_null() const { return kind == Kind::kScalar && !quoted && (scalar.empty() || scalar == "~" || scalar == "null" || scalar == "Null" || scalar == "NULL"); }
  const YamlNode* find(std::string_view key) const;
};

inline constexpr int kMaxYamlDepth = 64;

// Text from a document or a command line made fit for a one-line message: control characters
// escaped (a newline shows as \n), cut after about `max_chars` characters, at a UTF-8 character
// boundary, with "..." after.
std::string one_line(std::string_view text, size_t max_chars = 60);

// Parses one YAML document. An empty text yields an empty mapping. Errors name the line and
// column as libyaml reports them: "line 3, column 7: mapping values are not allowed here".
Result<YamlNode::Ptr> parse_yaml(std::string_view text);

// YAML text for a string: plain when it reads back as the same string, else double-quoted.
std::string yaml_string(const std::string& s);
// YAML text for a number that reads back as the same double ("2.0", "1.5e-06").
std::string yaml_double(double v);

}  // namespace stagecraft::config
