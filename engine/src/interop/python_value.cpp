// PyValue helpers for the config evaluator: construction, truth, equality, ordering, the
// arithmetic and sequence operators, repr. See python_eval.h.
//
// Integers are 64-bit; an operation past that is an opaque value ("integer overflow"), as is
// division by zero. List and string results are bounded by PyLimits and the file's budget.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "python_eval.h"
#include "stagecraft/core/text.h"

namespace stagecraft::interop {

using K = PyValue::Kind;

bool py_unknown(const PyValue& v) { return v.kind == K::kOpaque || v.kind == K::kObject; }

namespace {

// Values whose last reference went away, freed one at a time: deleting a value releases its
// children, whose deleters only queue them while the loop below drains the queue.
struct Graveyard {
  std::vector<PyValue*> pending;
  bool draining = false;
};
thread_local Graveyard t_graveyard;
thread_local std::vector<std::weak_ptr<PyValue>>* t_created = nullptr;

struct Deleter {
  void operator()(PyValue* v) const noexcept {
    Graveyard& g = t_graveyard;
    if (g.draining) {
      g.pending.push_back(v);
      return;
    }
    g.draining = true;
    delete v;
    while (!g.pending.empty()) {
      PyValue* x = g.pending.back();
      g.pending.pop_back();
      delete x;
    }
    g.draining = false;
  }
};

PyRef adopt(PyValue* raw) {
  PyRef v(raw, Deleter{});
  if (t_created && (v->kind == K::kList || v->kind == K::kTuple || v->kind == K::kDict || v->kind == K::kObject)) {
    t_created->push_back(v);
  }
  return v;
}

}  // namespace

void py_track_containers(std::vector<std::weak_ptr<PyValue>>* created) { t_created = created; }

PyRef py_make(K kind, int line) {
  auto* raw = new PyValue();
  raw->kind = kind;
  raw->line = line;
  return adopt(raw);
}

PyRef py_copy(const PyValue& v) { return adopt(new PyValue(v)); }
PyRef py_make_int(int64_t i, int line) {
  auto v = py_make(K::kInt, line);
  v->i = i;
  return v;
}
PyRef py_make_str(std::string s, int line) {
  auto v = py_make(K::kStr, line);
  v->s = std::move(s);
  return v;
}
PyRef py_make_opaque(std::string why, int line) {
  auto v = py_make(K::kOpaque, line);
  v->s = std::move(why);
  return v;
}
PyRef py_make_object(std::string what, int line) {
  auto v = py_make(K::kObject, line);
  v->s = std::move(what);
  return v;
}

PyRef py_make_bool(bool b, int line) {
  auto v = py_make(K::kBool, line);
  v->b = b;
  return v;
}
PyRef py_make_float(double f, int line) {
  auto v = py_make(K::kFloat, line);
  v->f = f;
  return v;
}

namespace {
PyRef opaque(int line, std::string why) { return py_make_opaque(std::move(why), line); }
}  // namespace

int py_truth(const PyValue& v) {
  switch (v.kind) {
    case K::kNone: return 0;
    case K::kBool: return v.b ? 1 : 0;
    case K::kInt: return v.i != 0 ? 1 : 0;
    case K::kFloat: return v.f != 0.0 ? 1 : 0;
    case K::kStr: return v.s.empty() ? 0 : 1;
    case K::kList: case K::kTuple: return v.items.empty() ? 0 : 1;
    case K::kDict: return v.entries.empty() ? 0 : 1;
    case K::kObject: case K::kOpaque: return -1;
  }
  return -1;
}

namespace {
int equal_at(const PyValue& a, const PyValue& b, int depth);
}  // namespace

int py_equal(const PyValue& a, const PyValue& b) { return equal_at(a, b, 0); }

namespace {
int equal_at(const PyValue& a, const PyValue& b, int depth) {
  if (&a == &b) return 1;
  if (depth > 64) return -1;  // nested deeper than any configuration, or a cycle
  if (py_unknown(a) || py_unknown(b)) return -1;
  if (py_numeric(a) && py_numeric(b)) {
    if (py_is_intlike(a) && py_is_intlike(b)) return py_as_int(a) == py_as_int(b) ? 1 : 0;
    return py_as_double(a) == py_as_double(b) ? 1 : 0;
  }
  if (a.kind != b.kind) return 0;
  switch (a.kind) {
    case K::kNone: return 1;
    case K::kStr: return a.s == b.s ? 1 : 0;
    case K::kList: case K::kTuple: {
      if (a.items.size() != b.items.size()) return 0;
      int all = 1;
      for (size_t k = 0; k < a.items.size(); ++k) {
        const int e = equal_at(*a.items[k], *b.items[k], depth + 1);
        if (e == 0) return 0;
        if (e < 0) all = -1;
      }
      return all;
    }
    case K::kDict: {
      if (a.entries.size() != b.entries.size()) return 0;
      int all = 1;
      for (const auto& [k, v] : a.entries) {
        const PyRef* slot = py_lookup(b, *k);
        const PyValue* other = slot ? slot->get() : nullptr;
        if (!other) return 0;
        const int e = equal_at(*v, *other, depth + 1);
        if (e == 0) return 0;
        if (e < 0) all = -1;
      }
      return all;
    }
    default: return -1;
  }
}
}  // namespace

std::string py_hash_key(const PyValue& key) {
  switch (key.kind) {
    case K::kNone: return "N";
    case K::kBool: case K::kInt: return "n:" + std::to_string(py_as_int(key));
    case K::kFloat:
      if (std::isfinite(key.f) && key.f == std::trunc(key.f) && std::fabs(key.f) < 9.2e18) return "n:" + std::to_string(static_cast<int64_t>(key.f));
      return "f:" + py_repr(key);
    case K::kStr: return "s:" + key.s;
    case K::kTuple: {
      std::string out = "t" + std::to_string(key.items.size()) + ":";
      for (const auto& it : key.items) {
        const std::string k = py_hash_key(*it);
        if (k.empty()) return "";
        out += std::to_string(k.size()) + ":" + k;
      }
      return out;
    }
    default: return "";
  }
}

namespace {

template <typename Mapping>
auto lookup_in(Mapping& m, const PyValue& key) -> decltype(&m.entries[0].second) {
  const std::string hk = py_hash_key(key);
  if (!hk.empty() && m.index.size() == m.entries.size()) {
    auto it = m.index.find(hk);
    return it == m.index.end() ? nullptr : &m.entries[it->second].second;
  }
  for (auto& [k, v] : m.entries) {
    if (py_equal(*k, key) == 1) return &v;
  }
  return nullptr;
}

void reindex(PyValue& m) {
  m.index.clear();
  for (size_t k = 0; k < m.entries.size(); ++k) {
    const std::string hk = py_hash_key(*m.entries[k].first);
    m.index[hk.empty() ? "#" + std::to_string(k) : hk] = k;  // unhashable keys keep a place of their own
  }
}

}  // namespace

PyRef* py_lookup(PyValue& mapping, const PyValue& key) { return lookup_in(mapping, key); }
const PyRef* py_lookup(const PyValue& mapping, const PyValue& key) { return lookup_in(mapping, key); }

PyRef* py_slot(PyValue& mapping, const std::string& key) {
  PyValue k;
  k.kind = K::kStr;
  k.s = key;
  return py_lookup(mapping, k);
}

void py_set(PyValue& mapping, PyRef key, PyRef value) {
  if (mapping.index.size() != mapping.entries.size()) reindex(mapping);
  const std::string hk = py_hash_key(*key);
  if (hk.empty()) {
    for (auto& [k, v] : mapping.entries) {
      if (py_equal(*k, *key) == 1) {
        v = std::move(value);
        return;
      }
    }
    mapping.index["#" + std::to_string(mapping.entries.size())] = mapping.entries.size();
  } else {
    auto it = mapping.index.find(hk);
    if (it != mapping.index.end()) {
      mapping.entries[it->second].second = std::move(value);
      return;
    }
    mapping.index[hk] = mapping.entries.size();
  }
  mapping.entries.emplace_back(std::move(key), std::move(value));
}

void py_clear(PyValue& v) {
  v.items.clear();
  v.entries.clear();
  v.index.clear();
}

const PyValue* PyValue::get(std::string_view key) const {
  if (kind != K::kDict && kind != K::kObject) return nullptr;
  PyValue k;
  k.kind = K::kStr;
  k.s = std::string(key);
  const PyRef* slot = py_lookup(*this, k);
  return slot ? slot->get() : nullptr;
}

PyRef py_propagate(const PyRef& a, const PyRef& b) {
  if (a->kind == K::kOpaque) return a;
  if (b && b->kind == K::kOpaque) return b;
  const PyRef& o = a->kind == K::kObject ? a : b;
  return py_make_opaque("it uses " + py_repr(*o, 80) + ", which Stagecraft does not evaluate", o->line);
}

bool py_spend(PyBudget& budget, size_t n, size_t result_size) {
  if (result_size > budget.limits.max_items) return false;
  if (budget.items_used + n > budget.limits.max_total_items) return false;
  budget.items_used += n;
  return true;
}

PyRef py_compare(const PyRef& a, const std::string& op, const PyRef& b, int line) {
  if (op == "==" || op == "!=") {
    const int e = py_equal(*a, *b);
    if (e < 0) return py_propagate(a, b);
    return py_make_bool((e == 1) == (op == "=="), line);
  }
  if (op == "is" || op == "is not") {
    int same = -1;
    if (a.get() == b.get()) same = 1;
    else if (a->kind == K::kNone || b->kind == K::kNone || a->kind == K::kBool || b->kind == K::kBool) {
      same = (a->kind == b->kind && (a->kind == K::kNone || a->b == b->b)) ? 1 : 0;
    }
    if (same < 0) return py_propagate(a, b);
    return py_make_bool((same == 1) == (op == "is"), line);
  }
  if (op == "in" || op == "not in") {
    int found = 0;
    if (b->kind == K::kStr && a->kind == K::kStr) {
      found = b->s.find(a->s) != std::string::npos ? 1 : 0;
    } else if (b->is_container()) {
      for (const auto& it : b->items) {
        const int e = py_equal(*a, *it);
        if (e == 1) { found = 1; break; }
        if (e < 0) found = -1;
      }
    } else if (b->kind == K::kDict) {
      for (const auto& [k, v] : b->entries) {
        const int e = py_equal(*a, *k);
        if (e == 1) { found = 1; break; }
        if (e < 0) found = -1;
      }
    } else {
      return py_unknown(*b) || py_unknown(*a) ? py_propagate(a, b) : opaque(line, "'in' needs a list, tuple, dict or string, got " + py_kind_name(*b));
    }
    if (found < 0) return py_propagate(a, b);
    return py_make_bool((found == 1) == (op == "in"), line);
  }
  const int c = py_order(*a, *b);
  if (c == 2) return py_unknown(*a) || py_unknown(*b) ? py_propagate(a, b) : opaque(line, "cannot order " + py_kind_name(*a) + " and " + py_kind_name(*b));
  bool r = false;
  if (op == "<") r = c < 0;
  else if (op == ">") r = c > 0;
  else if (op == "<=") r = c <= 0;
  else r = c >= 0;
  return py_make_bool(r, line);
}
namespace {
int order_at(const PyValue& a, const PyValue& b, int depth);
}  // namespace

int py_order(const PyValue& a, const PyValue& b) { return order_at(a, b, 0); }

namespace {
int order_at(const PyValue& a, const PyValue& b, int depth) {
  if (depth > 64) return 2;
  if (py_numeric(a) && py_numeric(b)) {
    if (py_is_intlike(a) && py_is_intlike(b)) return py_as_int(a) < py_as_int(b) ? -1 : py_as_int(a) > py_as_int(b) ? 1 : 0;
    const double x = py_as_double(a), y = py_as_double(b);
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind == K::kStr && b.kind == K::kStr) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  if (a.kind == b.kind && a.is_container()) {
    for (size_t k = 0; k < std::min(a.items.size(), b.items.size()); ++k) {
      const int e = py_equal(*a.items[k], *b.items[k]);
      if (e < 0) return 2;
      if (e == 0) return order_at(*a.items[k], *b.items[k], depth + 1);
    }
    return a.items.size() < b.items.size() ? -1 : a.items.size() > b.items.size() ? 1 : 0;
  }
  return 2;
}
}  // namespace


PyRef py_binary(const PyRef& a, const std::string& op, const PyRef& b, PyBudget& budget, int line) {
  if (py_unknown(*a) || py_unknown(*b)) return py_propagate(a, b);
  // Sequences.
  if (op == "+" && a->kind == b->kind && (a->kind == K::kList || a->kind == K::kTuple || a->kind == K::kStr)) {
    if (a->kind == K::kStr) {
      const size_t n = a->s.size() + b->s.size();
      if (!py_spend(budget, n, n)) return opaque(line, "the string is too large");
      return py_make_str(a->s + b->s, line);
    }
    const size_t n = a->items.size() + b->items.size();
    if (!py_spend(budget, n, n)) return opaque(line, "the list is too large (more than " + std::to_string(budget.limits.max_items) + " items)");
    auto out = py_make(a->kind, line);
    out->items = a->items;
    out->items.insert(out->items.end(), b->items.begin(), b->items.end());
    return out;
  }
  if (op == "*" && ((py_is_intlike(*b) && (a->is_container() || a->kind == K::kStr)) || (py_is_intlike(*a) && (b->is_container() || b->kind == K::kStr)))) {
    const PyRef& seq = py_is_intlike(*b) ? a : b;
    const int64_t times = std::max<int64_t>(0, py_as_int(py_is_intlike(*b) ? *b : *a));
    const size_t unit = seq->kind == K::kStr ? seq->s.size() : seq->items.size();
    if (unit > 0 && static_cast<uint64_t>(times) > budget.limits.max_items / unit) {
      return opaque(line, "the repetition makes more than " + std::to_string(budget.limits.max_items) + " items");
    }
    if (unit == 0 || times == 0) return seq->kind == K::kStr ? py_make_str("", line) : py_make(seq->kind, line);
    const size_t n = unit * static_cast<size_t>(times);
    if (seq->kind == K::kStr) {
      if (!py_spend(budget, n, n)) return opaque(line, "the file builds more text than Stagecraft evaluates");
      std::string s;
      s.reserve(n);
      for (int64_t k = 0; k < times; ++k) s += seq->s;
      return py_make_str(std::move(s), line);
    }
    if (!py_spend(budget, n, n)) return opaque(line, "the file builds more list items than Stagecraft evaluates");
    auto out = py_make(seq->kind, line);
    out->items.reserve(n);
    for (int64_t k = 0; k < times; ++k) out->items.insert(out->items.end(), seq->items.begin(), seq->items.end());
    return out;
  }
  if (op == "%" && a->kind == K::kStr) return opaque(line, "%-formatting of strings");
  if (!py_numeric(*a) || !py_numeric(*b)) {
    return opaque(line, "cannot apply '" + op + "' to " + py_kind_name(*a) + " and " + py_kind_name(*b));
  }
  if (op == "@") return opaque(line, "matrix multiplication");
  const bool ints = py_is_intlike(*a) && py_is_intlike(*b);
  if (ints && op != "/") {
    const int64_t x = py_as_int(*a), y = py_as_int(*b);
    int64_t out = 0;
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &out);
    else if (op == "-") overflow = __builtin_sub_overflow(x, y, &out);
    else if (op == "*") overflow = __builtin_mul_overflow(x, y, &out);
    else if (op == "//" || op == "%") {
      if (y == 0) return opaque(line, "integer division by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return opaque(line, "integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      out = op == "//" ? q : r;
    } else if (op == "**") {
      if (y < 0) return py_make_float(std::pow(static_cast<double>(x), static_cast<double>(y)), line);
      out = 1;
      for (int64_t k = 0; k < y && !overflow; ++k) {
        overflow = __builtin_mul_overflow(out, x, &out);
        if (out == 0 || out == 1) break;
      }
      if (!overflow && out == 1 && x == -1 && (y % 2 == 1)) out = -1;
    } else if (op == "<<" || op == ">>") {
      if (y < 0) return opaque(line, "negative shift count");
      if (op == ">>") out = y >= 63 ? (x < 0 ? -1 : 0) : (x >> y);
      else if (y >= 63 || (x != 0 && (std::abs(static_cast<double>(x)) * std::ldexp(1.0, static_cast<int>(y)) >= 9.2e18))) overflow = true;
      else out = static_cast<int64_t>(static_cast<uint64_t>(x) << y);
    } else if (op == "&") out = x & y;
    else if (op == "|") out = x | y;
    else if (op == "^") out = x ^ y;
    if (overflow) return opaque(line, "integer overflow (more than 64 bits)");
    return py_make_int(out, line);
  }
  if (op == "&" || op == "|" || op == "^" || op == "<<" || op == ">>") return opaque(line, "'" + op + "' needs integers");
  const double x = py_as_double(*a), y = py_as_double(*b);
  double out = 0;
  if (op == "+") out = x + y;
  else if (op == "-") out = x - y;
  else if (op == "*") out = x * y;
  else if (op == "/") {
    if (y == 0) return opaque(line, "division by zero");
    out = x / y;
  } else if (op == "//" || op == "%") {
    if (y == 0) return opaque(line, "division by zero");
    out = op == "//" ? std::floor(x / y) : x - std::floor(x / y) * y;
  } else if (op == "**") {
    out = std::pow(x, y);
  }
  return py_make_float(out, line);
}


std::string py_kind_name(const PyValue& v) {
  switch (v.kind) {
    case K::kNone: return "None";
    case K::kBool: return "a boolean";
    case K::kInt: return "an integer";
    case K::kFloat: return "a float";
    case K::kStr: return "a string";
    case K::kList: return "a list";
    case K::kTuple: return "a tuple";
    case K::kDict: return "a dict";
    case K::kObject: return "an object (" + v.s + ")";
    case K::kOpaque: return "an unevaluable value";
  }
  return "a value";
}

namespace {

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  std::string s(buf, end);
  if (s.find_first_of(".eninf") == std::string::npos) s += ".0";
  return s;
}

void repr_to(std::string& out, const PyValue& v, size_t max_chars, int depth) {
  if (out.size() > max_chars) return;
  switch (v.kind) {
    case K::kNone: out += "None"; return;
    case K::kBool: out += v.b ? "True" : "False"; return;
    case K::kInt: out += std::to_string(v.i); return;
    case K::kFloat: out += float_repr(v.f); return;
    case K::kStr: {
      out += '\'';
      for (char ch : v.s) {
        if (out.size() > max_chars) break;
        if (ch == '\'' || ch == '\\') out += '\\';
        append_visible(out, ch);
      }
      out += '\'';
      return;
    }
    case K::kList:
    case K::kTuple: {
      if (depth > 20) {
        out += "...";
        return;
      }
      out += v.kind == K::kList ? '[' : '(';
      for (size_t k = 0; k < v.items.size() && out.size() <= max_chars; ++k) {
        if (k) out += ", ";
        repr_to(out, *v.items[k], max_chars, depth + 1);
      }
      if (v.kind == K::kTuple && v.items.size() == 1) out += ',';
      out += v.kind == K::kList ? ']' : ')';
      return;
    }
    case K::kDict: {
      if (depth > 20) {
        out += "...";
        return;
      }
      out += '{';
      for (size_t k = 0; k < v.entries.size() && out.size() <= max_chars; ++k) {
        if (k) out += ", ";
        repr_to(out, *v.entries[k].first, max_chars, depth + 1);
        out += ": ";
        repr_to(out, *v.entries[k].second, max_chars, depth + 1);
      }
      out += '}';
      return;
    }
    case K::kObject: out += "<object: " + v.s + ">"; return;
    case K::kOpaque: out += "<cannot evaluate: " + v.s + ">"; return;
  }
}

}  // namespace

std::string py_repr(const PyValue& v, size_t max_chars) {
  std::string out;
  repr_to(out, v, max_chars, 0);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

}  // namespace stagecraft::interop
