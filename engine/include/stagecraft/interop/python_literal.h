// A small, safe evaluator for Python configuration files (LiBai, PaddlePaddle, Colossal-AI).
//
// It runs the statements of a file the way the import of those frameworks' configs needs, and
// nothing more: literals (numbers, strings, True/False/None, lists, tuples, dicts), dict(...) and
// a few pure builtins (list, tuple, int, float, bool, str, len, min, max, abs, sum, range), names
// bound earlier in the file, arithmetic and comparisons, `+` list concatenation and `*` list
// repetition (LiBai's `[0]*6 + [1]*7`), attribute and subscript assignment
// (`train.dist.tensor_parallel_size = 2`, `cfg["dp_degree"] = 2`), `if`/`elif`/`else` with
// conditions it can evaluate, and `with`/`try` bodies. It never imports, calls unknown functions,
// or loops: imported names and results of unknown calls are *objects* whose attributes may be
// assigned (so `strategy = fleet.DistributedStrategy(); strategy.hybrid_configs = {...}` works);
// an expression it cannot evaluate (a lambda, a comprehension, `AMP_TYPE.TORCH`, an undefined
// name) yields an *opaque* value that records the line and why. Assignments inside `for`/`while`
// loops, `except` blocks and branches behind an unknown condition bind opaque values, so that a
// reader asking for them learns why instead of getting a stale value. `def` and `class` bodies are
// skipped. Whether an opaque value matters is the reader's decision.
//
// Failure: only text that is not Python at the token level (an unterminated string or bracket,
// a stray character, inconsistent indentation) fails, with "origin:line: message". Anything
// else evaluates. Work and memory are bounded (PyLimits): it never hangs or crashes, on any input.
// Pure; safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::interop {

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

struct PyValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kList, kTuple, kDict, kObject, kOpaque };

  Kind kind = Kind::kNone;
  bool b = false;      // kBool
  int64_t i = 0;       // kInt
  double f = 0.0;      // kFloat
  std::string s;       // kStr: the text; kObject: what it is ("the name train imported from
                       // .common.train"); kOpaque: why it cannot be evaluated
  std::vector<PyRef> items;                       // kList, kTuple
  std::vector<std::pair<PyRef, PyRef>> entries;   // kDict (any keys), kObject (str keys: attributes)
  std::unordered_map<std::string, size_t> index;  // entries by hashable key, kept by the evaluator
  int line = 0;        // 1-based line of the expression or statement that made it

  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_container() const { return kind == Kind::kList || kind == Kind::kTuple; }
  // Dict entry or object attribute by string key; nullptr when absent or not a mapping.
  const PyValue* get(std::string_view key) const;
};

// Python's repr of a value (`[0, 0, 1]`, `{'a': 1}`, `'text'`), shortened to about `max_chars`;
// objects and opaque values read `<object: ...>` and `<cannot evaluate: ...>`.
std::string py_repr(const PyValue& v, size_t max_chars = 200);
// A short name of the kind for messages: "an integer", "a string", "a list", ...
std::string py_kind_name(const PyValue& v);

struct PyLimits {
  size_t max_bytes = 4u << 20;       // input size
  int max_depth = 100;               // nesting of brackets and operators in one expression
  size_t max_items = 1u << 20;       // elements of one list, tuple, dict or string
  size_t max_total_items = 4u << 20; // elements created by repetition, concatenation and range in all
};

class PyModule {
 public:
  // The value a dotted path of names and attributes (dict keys) reaches from the module's
  // globals, e.g. "train.dist.pipeline_num_layers"; nullptr when nothing in the file set it. An
  // opaque value on the way is returned itself, so the caller can report why.
  const PyValue* find(std::string_view dotted) const;
  // The module's global names (a kObject whose attributes are the globals).
  const PyValue& globals() const;
  const std::string& origin() const { return origin_; }

 private:
  friend class PyRunner;
  // Shared by copies; the last one breaks reference cycles among the values so all are freed.
  struct Graph {
    PyRef globals;
    ~Graph();
  };
  std::shared_ptr<Graph> graph_;
  std::string origin_;
};

Result<PyModule> run_python_config(std::string_view text, std::string_view origin, const PyLimits& limits = {});

}  // namespace stagecraft::interop
