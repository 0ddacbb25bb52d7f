// The builtins and methods the config evaluator runs: dict, list, tuple, int, float, bool, str,
// len, min, max, abs, sum, range; dict.get/copy/keys/values/items, list.copy. Pure functions of
// their arguments; anything else is an object ("the result of ...") or an opaque value.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "python_eval.h"

namespace stagecraft::interop {

using K = PyValue::Kind;

namespace {
PyRef opaque(int line, std::string why) { return py_make_opaque(std::move(why), line); }
}  // namespace

PyRef py_call_method(const PyRef& self, const std::string& name, const std::vector<PyArg>& args, int line) {
  for (const auto& a : args) {
    if (py_unknown(*a.value)) return py_propagate(a.value, nullptr);
  }
  if (name == "copy" && args.empty()) {
    auto out = py_make(self->kind, line);
    out->items = self->items;
    out->entries = self->entries;
    out->index = self->index;
    return out;
  }
  if (self->kind == K::kDict && name == "get" && (args.size() == 1 || args.size() == 2)) {
    for (const auto& [k, v] : self->entries) {
      if (py_equal(*k, *args[0].value) == 1) return v;
    }
    return args.size() == 2 ? args[1].value : py_make(K::kNone, line);
  }
  if (self->kind == K::kDict && (name == "keys" || name == "values" || name == "items") && args.empty()) {
    auto out = py_make(K::kList, line);
    for (const auto& [k, v] : self->entries) {
      if (name == "keys") out->items.push_back(k);
      else if (name == "values") out->items.push_back(v);
      else {
        auto pair = py_make(K::kTuple, line);
        pair->items = {k, v};
        out->items.push_back(pair);
      }
    }
    return out;
  }
  return py_make_object("the result of ." + name + "(...) on line " + std::to_string(line), line);
}

PyRef py_call_builtin(const std::string& name, const std::vector<PyArg>& raw, PyBudget& budget, int line) {
  std::vector<PyRef> pos;
  std::vector<std::pair<std::string, PyRef>> kw;
  for (const auto& a : raw) {
    if (a.star == 1) {
      if (!a.value->is_container()) return py_unknown(*a.value) ? py_propagate(a.value, nullptr) : opaque(line, "cannot unpack " + py_kind_name(*a.value));
      pos.insert(pos.end(), a.value->items.begin(), a.value->items.end());
    } else if (a.star == 2) {
      if (a.value->kind != K::kDict) return py_unknown(*a.value) ? py_propagate(a.value, nullptr) : opaque(line, "cannot unpack " + py_kind_name(*a.value) + " with **");
      for (const auto& [k, v] : a.value->entries) {
        if (k->kind != K::kStr) return opaque(line, "keyword names must be strings");
        kw.emplace_back(k->s, v);
      }
    } else if (!a.name.empty()) {
      kw.emplace_back(a.name, a.value);
    } else {
      pos.push_back(a.value);
    }
  }
  if (name == "dict") {
    auto out = py_make(K::kDict, line);
    if (pos.size() > 1) return opaque(line, "dict() takes at most one positional argument");
    if (pos.size() == 1) {
      const PyRef& src = pos[0];
      if (src->kind == K::kDict) {
        out->entries = src->entries;
        out->index = src->index;
      }
      else if (src->is_container()) {
        for (const auto& it : src->items) {
          if (!it->is_container() || it->items.size() != 2) return opaque(line, "dict() needs pairs");
          py_set(*out, it->items[0], it->items[1]);
        }
      } else return py_unknown(*src) ? py_propagate(src, nullptr) : opaque(line, "dict() of " + py_kind_name(*src));
    }
    for (auto& [k, v] : kw) py_set(*out, py_make_str(k, v->line ? v->line : line), v);
    return out;
  }
  if (!kw.empty()) return opaque(line, name + "() with keyword arguments");
  for (const auto& a : pos) {
    if (py_unknown(*a)) return py_propagate(a, nullptr);
  }
  auto iterable = [&](const PyRef& v) -> const std::vector<PyRef>* { return v->is_container() ? &v->items : nullptr; };
  if (name == "list" || name == "tuple") {
    auto out = py_make(name == "list" ? K::kList : K::kTuple, line);
    if (pos.empty()) return out;
    if (pos.size() != 1) return opaque(line, name + "() takes one argument");
    if (pos[0]->kind == K::kDict) {
      for (const auto& [k, v] : pos[0]->entries) out->items.push_back(k);
    } else if (pos[0]->kind == K::kStr) {
      for (char ch : pos[0]->s) out->items.push_back(py_make_str(std::string(1, ch), line));
    } else if (const auto* items = iterable(pos[0])) {
      out->items = *items;
    } else {
      return opaque(line, name + "() of " + py_kind_name(*pos[0]));
    }
    return out;
  }
  if (name == "len") {
    if (pos.size() != 1) return opaque(line, "len() takes one argument");
    const PyValue& v = *pos[0];
    if (v.kind == K::kStr) return py_make_int(static_cast<int64_t>(v.s.size()), line);
    if (v.is_container()) return py_make_int(static_cast<int64_t>(v.items.size()), line);
    if (v.kind == K::kDict) return py_make_int(static_cast<int64_t>(v.entries.size()), line);
    return opaque(line, "len() of " + py_kind_name(v));
  }
  if (name == "int" || name == "float" || name == "bool" || name == "str" || name == "abs") {
    if (pos.size() != 1) {
      if (pos.empty() && name != "abs") return name == "str" ? py_make_str("", line) : name == "bool" ? py_make_bool(false, line) : name == "int" ? py_make_int(0, line) : py_make_float(0, line);
      return opaque(line, name + "() takes one argument here");
    }
    const PyValue& v = *pos[0];
    if (name == "bool") {
      const int truth = py_truth(v);
      return truth < 0 ? opaque(line, "bool() of an unknown value") : py_make_bool(truth == 1, line);
    }
    if (name == "str") {
      if (v.kind == K::kStr) return pos[0];
      return py_make_str(py_repr(v, 1u << 16), line);
    }
    if (name == "abs") {
      if (v.kind == K::kFloat) return py_make_float(std::fabs(v.f), line);
      if (!py_is_intlike(v)) return opaque(line, "abs() of " + py_kind_name(v));
      if (py_as_int(v) == std::numeric_limits<int64_t>::min()) return opaque(line, "integer overflow");
      return py_make_int(std::llabs(py_as_int(v)), line);
    }
    if (name == "int") {
      if (py_is_intlike(v)) return py_make_int(py_as_int(v), line);
      if (v.kind == K::kFloat) {
        if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return opaque(line, "int() of " + py_repr(v));
        return py_make_int(static_cast<int64_t>(std::trunc(v.f)), line);
      }
      if (v.kind == K::kStr) {
        std::string s;
        for (char ch : v.s) {
          if (ch != '_' && !std::isspace(static_cast<unsigned char>(ch))) s += ch;
        }
        if (!s.empty() && s[0] == '+') s.erase(0, 1);
        int64_t out = 0;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return opaque(line, "int() of " + py_repr(v));
        return py_make_int(out, line);
      }
      return opaque(line, "int() of " + py_kind_name(v));
    }
    // float
    if (py_numeric(v)) return py_make_float(py_as_double(v), line);
    if (v.kind == K::kStr) {
      double out = 0;
      std::string s = v.s;
      if (!s.empty() && s[0] == '+') s.erase(0, 1);
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      if (ec != std::errc() || p != s.data() + s.size()) return opaque(line, "float() of " + py_repr(v));
      return py_make_float(out, line);
    }
    return opaque(line, "float() of " + py_kind_name(v));
  }
  if (name == "min" || name == "max" || name == "sum") {
    std::vector<PyRef> items = pos;
    if (pos.size() == 1 || (name == "sum" && pos.size() == 2)) {
      const auto* it = iterable(pos[0]);
      if (!it) return opaque(line, name + "() of " + py_kind_name(*pos[0]));
      items = *it;
    }
    if (name == "sum") {
      PyRef acc = pos.size() == 2 ? pos[1] : py_make_int(0, line);
      for (const auto& it : items) {
        acc = py_binary(acc, "+", it, budget, line);
        if (acc->kind == K::kOpaque) return acc;
      }
      return acc;
    }
    if (items.empty()) return opaque(line, name + "() of an empty sequence");
    PyRef best = items[0];
    for (size_t k = 1; k < items.size(); ++k) {
      const int c = py_order(*items[k], *best);
      if (c == 2) return opaque(line, "cannot compare the items of " + name + "()");
      if ((name == "min" && c < 0) || (name == "max" && c > 0)) best = items[k];
    }
    return best;
  }
  if (name == "range") {
    if (pos.empty() || pos.size() > 3) return opaque(line, "range() takes 1 to 3 arguments");
    for (const auto& a : pos) {
      if (!py_is_intlike(*a)) return opaque(line, "range() needs integers");
    }
    const int64_t start = pos.size() == 1 ? 0 : py_as_int(*pos[0]);
    const int64_t stop = pos.size() == 1 ? py_as_int(*pos[0]) : py_as_int(*pos[1]);
    const int64_t step = pos.size() == 3 ? py_as_int(*pos[2]) : 1;
    if (step == 0) return opaque(line, "range() step must not be zero");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
    if (count > static_cast<double>(budget.limits.max_items) || !py_spend(budget, static_cast<size_t>(count), static_cast<size_t>(count))) {
      return opaque(line, "range() makes too many items");
    }
    auto out = py_make(K::kList, line);
    for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out->items.push_back(py_make_int(start + k * step, line));
    return out;
  }
  return opaque(line, "the builtin " + name + "()");
}


}  // namespace stagecraft::interop
