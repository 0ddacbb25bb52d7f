// The tokenizer behind python_literal.h: Python source split into logical lines of tokens.
//
// A logical line is what Python calls one: physical lines joined inside brackets and after a
// backslash, with comments and blank lines dropped, plus the indentation (in columns, tabs to
// the next multiple of 8) of its first physical line. Strings are decoded (escapes, implicit
// concatenation happens in the evaluator); f-strings and bytes keep their text but are marked
// so that the evaluator treats them as unevaluable. Numbers are converted; an integer beyond
// 64 bits or an imaginary number is marked the same way.
//
// Fails only on what Python itself would reject while tokenizing: an unterminated string or
// bracket, a mismatched closing bracket, a stray character, a NUL byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::interop {

struct PyToken {
  enum class Kind { kName, kInt, kFloat, kString, kOp };
  Kind kind = Kind::kOp;
  std::string text;     // kName: the name; kOp: the operator; kString: the decoded value
  int64_t i = 0;        // kInt
  double f = 0.0;       // kFloat
  std::string opaque;   // non-empty: a literal Stagecraft does not evaluate, and why
  int line = 0;

  bool is_op(std::string_view op) const { return kind == Kind::kOp && text == op; }
  bool is_name(std::string_view name) const { return kind == Kind::kName && text == name; }
};

struct PyLine {
  int indent = 0;  // columns before the first token
  int line = 0;    // physical line of the first token
  std::vector<PyToken> tokens;
};

// `origin` prefixes error messages: "origin:line: message".
Result<std::vector<PyLine>> py_tokenize(std::string_view text, std::string_view origin);

}  // namespace stagecraft::interop
