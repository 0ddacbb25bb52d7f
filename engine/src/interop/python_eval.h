// Expression evaluation for python_literal.h: one Python expression (a token range of a logical
// line) evaluated against the module's globals.
//
// Syntax it does not take (lambda, comprehensions, `:=`, `yield`, set displays, ...) makes the
// whole expression opaque with the reason; values it cannot compute (an undefined name, an
// unknown call's attribute, 1/0, an integer past 64 bits) are opaque values that propagate
// through operators. Work is bounded by PyLimits and a budget shared by the whole file.
#pragma once

#include <cstddef>
#include <memory>
#include <cstdint>
#include <string>
#include <vector>

#include "python_lexer.h"
#include "stagecraft/interop/python_literal.h"

namespace stagecraft::interop {

// Work shared by every expression of one file.
struct PyBudget {
  PyLimits limits;
  size_t items_used = 0;  // elements created by repetition, concatenation, range
};

// Every PyValue is made here. Their shared_ptr deleter frees nested values iteratively, so that
// dropping a value nested a million deep cannot overflow the stack.
PyRef py_make(PyValue::Kind kind, int line);
PyRef py_copy(const PyValue& v);  // a shallow copy
// While `created` is set (on this thread), containers made by py_make are recorded in it, so
// that the runner can break cycles the file built among values it then dropped.
void py_track_containers(std::vector<std::weak_ptr<PyValue>>* created);
PyRef py_make_int(int64_t v, int line);
PyRef py_make_str(std::string s, int line);
PyRef py_make_opaque(std::string why, int line);
PyRef py_make_object(std::string what, int line);
PyRef py_make_bool(bool b, int line);
PyRef py_make_float(double f, int line);

inline bool py_is_intlike(const PyValue& v) { return v.kind == PyValue::Kind::kInt || v.kind == PyValue::Kind::kBool; }
inline int64_t py_as_int(const PyValue& v) { return v.kind == PyValue::Kind::kBool ? (v.b ? 1 : 0) : v.i; }
inline double py_as_double(const PyValue& v) { return v.kind == PyValue::Kind::kFloat ? v.f : static_cast<double>(py_as_int(v)); }
inline bool py_numeric(const PyValue& v) { return py_is_intlike(v) || v.kind == PyValue::Kind::kFloat; }
// Objects and opaque values: nothing can be computed from them.
bool py_unknown(const PyValue& v);
// The result of an operation on an unknown operand: the first opaque one, or an opaque value
// naming the object.
PyRef py_propagate(const PyRef& a, const PyRef& b);
// Takes n items from the budget for a result of result_size items; false when over a limit.
bool py_spend(PyBudget& budget, size_t n, size_t result_size);

// Python truthiness; -1 when it cannot be known (an opaque value).
int py_truth(const PyValue& v);
// Python ==; -1 when it cannot be known.
int py_equal(const PyValue& a, const PyValue& b);

// The canonical text of a key hashable by value ("s:text"; "n:1" for 1, 1.0 and True; tuples of
// those), or "" for a key that is not (a list, an object, an opaque value).
std::string py_hash_key(const PyValue& key);
// The value slot of `key` in a dict or object; nullptr when absent. Hashed keys are found through
// PyValue::index, others by comparison.
PyRef* py_lookup(PyValue& mapping, const PyValue& key);
const PyRef* py_lookup(const PyValue& mapping, const PyValue& key);
PyRef* py_slot(PyValue& mapping, const std::string& key);  // a string key
// Sets key to value, replacing an equal key in place, else appending (and indexing) it.
void py_set(PyValue& mapping, PyRef key, PyRef value);
// Empties a container (items, entries and index).
void py_clear(PyValue& v);

// Ordering of numbers, strings and same-kind sequences: -1, 0, 1, or 2 when they cannot be ordered.
int py_order(const PyValue& a, const PyValue& b);
// op: == != < > <= >= in "not in" is "is not". A bool, or an opaque value.
PyRef py_compare(const PyRef& a, const std::string& op, const PyRef& b, int line);
// op: + - * / // % ** << >> & | ^ @. Numbers, and + and * on strings, lists and tuples.
PyRef py_binary(const PyRef& a, const std::string& op, const PyRef& b, PyBudget& budget, int line);

// One argument of a call: positional, keyword (name), *x (star 1) or **x (star 2).
struct PyArg {
  std::string name;
  PyRef value;
  int star = 0;
};
// A builtin named in the header comment of python_builtins.cpp; others are opaque.
PyRef py_call_builtin(const std::string& name, const std::vector<PyArg>& args, PyBudget& budget, int line);
// self.name(args) for dicts and lists.
PyRef py_call_method(const PyRef& self, const std::string& name, const std::vector<PyArg>& args, int line);

// Evaluates tokens [begin, end) as one expression. Never fails: problems become opaque values
// (with `line` of the first token). `globals` is the module's globals object.
PyRef py_eval(const std::vector<PyToken>& tokens, size_t begin, size_t end, const PyValue& globals, PyBudget& budget);

}  // namespace stagecraft::interop
