// Python expression evaluation for the config evaluator. See python_eval.h.
//
// A recursive-descent parser over Python's precedence levels (conditional, or, and, not,
// comparisons, | ^ &, shifts, + -, * / // %, unary, **, primaries with calls, subscripts and
// attributes) that computes values as it parses. `fail()` stops the expression: the caller gets
// one opaque value carrying the reason. Values that cannot be computed are opaque values.
#include "python_eval.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace stagecraft::interop {

using K = PyValue::Kind;

namespace {

const char* kBuiltins[] = {"dict", "list", "tuple", "int", "float", "bool", "str", "len", "min", "max", "abs", "sum", "range"};

bool is_builtin(const std::string& name) {
  for (const char* b : kBuiltins) {
    if (name == b) return true;
  }
  return false;
}

// A primary expression with what a following call needs to know about it.
struct Primary {
  PyRef value;
  std::string dotted;   // "a.b.c" when written as a plain dotted name
  std::string builtin;  // a builtin function not shadowed by a global
  PyRef receiver;       // for method calls: the dict or list before ".name"
  std::string method;
};


class Eval {
 public:
  Eval(const std::vector<PyToken>& t, size_t begin, size_t end, const PyValue& globals, PyBudget& budget)
      : t_(t), pos_(begin), end_(end), globals_(globals), budget_(budget), line_(t[begin].line) {}

  PyRef run() {
    PyRef v = expr_list();
    if (!failed_ && pos_ < end_) fail("unexpected '" + tok_text(t_[pos_]) + "'");
    if (failed_) return py_make_opaque("cannot evaluate this expression: " + why_, line_);
    return v;
  }

 private:
  // ----- helpers -----
  static std::string tok_text(const PyToken& tok) {
    if (tok.kind == PyToken::Kind::kString) return "a string";
    if (tok.kind == PyToken::Kind::kInt) return std::to_string(tok.i);
    if (tok.kind == PyToken::Kind::kFloat) return "a number";
    return tok.text;
  }
  PyRef fail(const std::string& why) {
    if (!failed_) {
      failed_ = true;
      why_ = why;
    }
    return py_make_opaque(why, line_);
  }
  bool at_end() const { return pos_ >= end_; }
  bool peek_op(std::string_view op) const { return !at_end() && t_[pos_].is_op(op); }
  bool peek_name(std::string_view n) const { return !at_end() && t_[pos_].is_name(n); }
  bool accept_op(std::string_view op) {
    if (!peek_op(op)) return false;
    ++pos_;
    return true;
  }
  bool expect_op(std::string_view op) {
    if (accept_op(op)) return true;
    fail("expected '" + std::string(op) + "'" + (at_end() ? " at the end" : " before '" + tok_text(t_[pos_]) + "'"));
    return false;
  }
  int line() const { return at_end() ? t_[end_ - 1].line : t_[pos_].line; }
  bool starts_expression() const {
    if (at_end()) return false;
    const auto& tok = t_[pos_];
    if (tok.kind != PyToken::Kind::kOp) return !(tok.is_name("for") || tok.is_name("if") || tok.is_name("else") || tok.is_name("in"));
    return tok.text == "(" || tok.text == "[" || tok.text == "{" || tok.text == "-" || tok.text == "+" || tok.text == "~" ||
           tok.text == "*" || tok.text == "...";
  }
  PyRef opaque(const std::string& why) { return py_make_opaque(why, line_); }
  static PyRef propagate(const PyRef& a, const PyRef& b) { return py_propagate(a, b); }
  bool spend(size_t n, size_t result_size) { return py_spend(budget_, n, result_size); }

  struct Depth {
    explicit Depth(Eval& e) : e_(e) {
      if (++e_.depth_ > e_.budget_.limits.max_depth) e_.fail("nested deeper than " + std::to_string(e_.budget_.limits.max_depth) + " levels");
    }
    ~Depth() { --e_.depth_; }
    Eval& e_;
  };

  // ----- grammar -----
  PyRef expr_list() {
    PyRef first = star_or_test();
    if (!peek_op(",")) return first->kind == K::kTuple && first->line == -1 ? fail("a starred expression") : first;
    auto tup = py_make(K::kTuple, line_);
    tup->items.push_back(first);
    while (!failed_ && accept_op(",")) {
      if (!starts_expression()) break;
      tup->items.push_back(star_or_test());
    }
    return unpack_stars(tup);
  }

  // `*x` inside displays: marked by wrapping in a one-item tuple with line -1, unpacked later.
  PyRef star_or_test() {
    if (accept_op("*")) {
      PyRef v = or_expr();
      auto mark = py_make(K::kTuple, -1);
      mark->items.push_back(v);
      return mark;
    }
    return test();
  }
  PyRef unpack_stars(PyRef seq) {
    bool any = false;
    for (const auto& it : seq->items) any = any || (it->kind == K::kTuple && it->line == -1);
    if (!any) return seq;
    auto out = py_make(seq->kind, seq->line);
    for (const auto& it : seq->items) {
      if (!(it->kind == K::kTuple && it->line == -1)) {
        out->items.push_back(it);
        continue;
      }
      const PyRef& inner = it->items[0];
      if (!inner->is_container()) return inner->kind == K::kOpaque ? inner : opaque("cannot unpack " + py_kind_name(*inner) + " with *");
      if (!spend(inner->items.size(), out->items.size() + inner->items.size())) return opaque("the list is too large");
      out->items.insert(out->items.end(), inner->items.begin(), inner->items.end());
    }
    return out;
  }

  PyRef test() {
    Depth d(*this);
    if (failed_) return opaque(why_);
    if (peek_name("lambda")) return fail("a lambda");
    if (peek_name("yield") || peek_name("await")) return fail("'" + t_[pos_].text + "'");
    PyRef v = or_test();
    if (peek_op(":=")) return fail("an assignment expression (:=)");
    if (!peek_name("if")) return v;
    ++pos_;
    PyRef cond = or_test();
    if (!peek_name("else")) return fail("a conditional expression without 'else'");
    ++pos_;
    PyRef other = test();
    const int truth = py_truth(*cond);
    if (truth < 0) return propagate(cond, nullptr);
    return truth ? v : other;
  }

  PyRef or_test() {
    PyRef v = and_test();
    while (!failed_ && peek_name("or")) {
      ++pos_;
      PyRef r = and_test();
      const int truth = py_truth(*v);
      if (truth < 0) v = propagate(v, nullptr);
      else if (!truth) v = r;
    }
    return v;
  }

  PyRef and_test() {
    PyRef v = not_test();
    while (!failed_ && peek_name("and")) {
      ++pos_;
      PyRef r = not_test();
      const int truth = py_truth(*v);
      if (truth < 0) v = propagate(v, nullptr);
      else if (truth) v = r;
    }
    return v;
  }

  PyRef not_test() {
    if (peek_name("not")) {
      Depth d(*this);
      if (failed_) return opaque(why_);
      ++pos_;
      PyRef v = not_test();
      const int truth = py_truth(*v);
      return truth < 0 ? propagate(v, nullptr) : py_make_bool(!truth, line_);
    }
    return comparison();
  }

  PyRef comparison() {
    PyRef left = bit_or();
    PyRef result;
    while (!failed_ && !at_end()) {
      std::string op;
      const auto& tok = t_[pos_];
      if (tok.kind == PyToken::Kind::kOp && (tok.text == "==" || tok.text == "!=" || tok.text == "<" || tok.text == ">" ||
                                             tok.text == "<=" || tok.text == ">=")) {
        op = tok.text;
        ++pos_;
      } else if (tok.is_name("in")) {
        op = "in";
        ++pos_;
      } else if (tok.is_name("not") && pos_ + 1 < end_ && t_[pos_ + 1].is_name("in")) {
        op = "not in";
        pos_ += 2;
      } else if (tok.is_name("is")) {
        ++pos_;
        op = accept_name("not") ? "is not" : "is";
      } else {
        break;
      }
      PyRef right = bit_or();
      PyRef r = py_compare(left, op, right, line_);
      if (!result) {
        result = r;
      } else if (result->kind == K::kBool && !result->b) {
        // already false
      } else if (r->kind != K::kBool || result->kind != K::kBool) {
        result = r->kind == K::kOpaque ? r : result;
      } else {
        result = r;
      }
      left = right;
    }
    return result ? result : left;
  }
  bool accept_name(std::string_view n) {
    if (!peek_name(n)) return false;
    ++pos_;
    return true;
  }

  PyRef bit_or() { return binary_level(0); }

  PyRef binary(const PyRef& a, const std::string& op, const PyRef& b) {
    if (failed_) return a;
    return py_binary(a, op, b, budget_, line_);
  }

  // Levels: 0 '|', 1 '^', 2 '&', 3 shifts, 4 '+' '-', 5 '*' '/' '//' '%' '@'.
  PyRef binary_level(int level) {
    static const std::vector<std::vector<std::string>> kOps = {{"|"}, {"^"}, {"&"}, {"<<", ">>"}, {"+", "-"}, {"*", "/", "//", "%", "@"}};
    PyRef v = level == 5 ? factor() : binary_level(level + 1);
    while (!failed_ && !at_end() && t_[pos_].kind == PyToken::Kind::kOp) {
      const std::string op = t_[pos_].text;
      if (std::find(kOps[static_cast<size_t>(level)].begin(), kOps[static_cast<size_t>(level)].end(), op) == kOps[static_cast<size_t>(level)].end()) break;
      ++pos_;
      PyRef r = level == 5 ? factor() : binary_level(level + 1);
      v = binary(v, op, r);
    }
    return v;
  }

  PyRef factor() {
    if (!at_end() && t_[pos_].kind == PyToken::Kind::kOp && (t_[pos_].text == "-" || t_[pos_].text == "+" || t_[pos_].text == "~")) {
      Depth d(*this);
      if (failed_) return opaque(why_);
      const std::string op = t_[pos_++].text;
      PyRef v = factor();
      if (failed_) return v;
      if (py_unknown(*v)) return propagate(v, nullptr);
      if (op == "~") {
        if (!py_is_intlike(*v)) return opaque("'~' needs an integer");
        return py_make_int(~py_as_int(*v), line_);
      }
      if (!py_numeric(*v)) return opaque("unary '" + op + "' needs a number, got " + py_kind_name(*v));
      if (op == "+") return v->kind == K::kBool ? py_make_int(py_as_int(*v), line_) : v;
      if (v->kind == K::kFloat) return py_make_float(-v->f, line_);
      int64_t out = 0;
      if (__builtin_sub_overflow(int64_t{0}, py_as_int(*v), &out)) return opaque("integer overflow");
      return py_make_int(out, line_);
    }
    return power();
  }

  PyRef power() {
    PyRef base = primary();
    if (!failed_ && accept_op("**")) {
      PyRef exp = factor();
      return binary(base, "**", exp);
    }
    return base;
  }

  // atom trailers: calls, subscripts, attributes.
  PyRef primary() {
    Depth d(*this);
    if (failed_) return opaque(why_);
    Primary p = atom();
    while (!failed_ && !at_end()) {
      if (accept_op(".")) {
        if (at_end() || t_[pos_].kind != PyToken::Kind::kName) return fail("expected a name after '.'");
        const std::string name = t_[pos_++].text;
        Primary next;
        next.dotted = p.dotted.empty() ? "" : p.dotted + "." + name;
        next.value = attribute(p, name);
        if (p.value->kind == K::kDict || p.value->kind == K::kList) {
          next.receiver = p.value;
          next.method = name;
        }
        p = std::move(next);
      } else if (peek_op("(")) {
        ++pos_;
        std::vector<PyArg> args = call_args();
        if (failed_) return p.value;
        p = Primary{call(p, args), "", "", nullptr, ""};
      } else if (accept_op("[")) {
        PyRef key = subscript_key();
        if (!expect_op("]")) return p.value;
        p = Primary{index(p.value, key), "", "", nullptr, ""};
      } else {
        break;
      }
    }
    return p.value;
  }

  PyRef attribute(const Primary& p, const std::string& name) {
    const PyRef& v = p.value;
    if (v->kind == K::kOpaque) return v;
    if (v->kind == K::kDict || v->kind == K::kObject) {
      if (const PyRef* slot = py_lookup(*v, *py_make_str(name, line_))) return *slot;
      if (v->kind == K::kDict) {
        if (name == "get" || name == "copy" || name == "keys" || name == "values" || name == "items") return py_make_object("the method dict." + name, line_);
        return opaque((p.dotted.empty() ? "the dict" : p.dotted) + " has no key '" + name + "'");
      }
      const std::string full = p.dotted.empty() ? name : p.dotted + "." + name;
      return opaque(full + " is not set in this file (" + v->s + ")");
    }
    if (v->kind == K::kList && name == "copy") return py_make_object("the method list.copy", line_);
    return opaque(py_kind_name(*v) + " has no attribute '" + name + "'");
  }

  std::vector<PyArg> call_args() {
    std::vector<PyArg> args;
    while (!failed_ && !accept_op(")")) {
      PyArg a;
      if (accept_op("**")) a.star = 2;
      else if (accept_op("*")) a.star = 1;
      else if (!at_end() && t_[pos_].kind == PyToken::Kind::kName && pos_ + 1 < end_ && t_[pos_ + 1].is_op("=")) {
        a.name = t_[pos_].text;
        pos_ += 2;
      }
      a.value = test();
      if (peek_name("for")) {
        fail("a generator expression");
        break;
      }
      args.push_back(std::move(a));
      if (accept_op(")")) break;
      if (!expect_op(",")) break;
    }
    return args;
  }

  PyRef call(const Primary& p, const std::vector<PyArg>& args) {
    const std::string& d = p.dotted;
    // omegaconf's DictConfig(x) and OmegaConf.create(x) wrap a dict that stays usable as one.
    const bool wraps = d == "DictConfig" || d == "OmegaConf.create" || (d.size() > 11 && d.ends_with(".DictConfig")) ||
                       d.ends_with(".OmegaConf.create");
    if (wraps && args.size() == 1 && args[0].star == 0 && args[0].name.empty() && args[0].value->kind == K::kDict) return args[0].value;
    if (!p.builtin.empty()) return py_call_builtin(p.builtin, args, budget_, line_);
    if (p.receiver && !p.method.empty()) return py_call_method(p.receiver, p.method, args, line_);
    if (p.value->kind == K::kObject || p.value->kind == K::kOpaque) {
      return py_make_object("the result of " + (d.empty() ? std::string("a call") : d + "(...)") + " on line " + std::to_string(line_), line_);
    }
    return opaque(py_kind_name(*p.value) + " is not callable");
  }

  PyRef subscript_key() {
    // A slice a:b:c or an expression (a tuple when commas).
    auto slice_part = [&]() -> PyRef {
      if (peek_op(":") || peek_op("]") || peek_op(",")) return py_make(K::kNone, line_);
      return test();
    };
    PyRef first = slice_part();
    if (!peek_op(":")) {
      if (!peek_op(",")) return first;
      auto tup = py_make(K::kTuple, line_);
      tup->items.push_back(first);
      while (accept_op(",") && !peek_op("]")) tup->items.push_back(test());
      return tup;
    }
    auto slice = py_make(K::kTuple, -2);  // marker: a slice (start, stop, step)
    slice->items.push_back(first);
    ++pos_;
    slice->items.push_back(slice_part());
    slice->items.push_back(accept_op(":") ? slice_part() : py_make(K::kNone, line_));
    return slice;
  }

  PyRef index(const PyRef& v, const PyRef& key) {
    if (failed_) return v;
    if (py_unknown(*v)) return propagate(v, nullptr);
    const bool is_slice = key->kind == K::kTuple && key->line == -2;
    if (!is_slice && py_unknown(*key)) return propagate(key, nullptr);
    if (v->kind == K::kDict) {
      if (is_slice) return opaque("a dict cannot be sliced");
      if (const PyRef* slot = py_lookup(*v, *key)) return *slot;
      return opaque("the dict has no key " + py_repr(*key, 60));
    }
    const bool str = v->kind == K::kStr;
    if (!v->is_container() && !str) return opaque(py_kind_name(*v) + " cannot be indexed");
    const int64_t n = static_cast<int64_t>(str ? v->s.size() : v->items.size());
    if (is_slice) {
      int64_t bounds[3] = {0, n, 1};
      for (int k = 0; k < 3; ++k) {
        const PyValue& part = *key->items[static_cast<size_t>(k)];
        if (part.kind == K::kNone) continue;
        if (!py_is_intlike(part)) return py_unknown(part) ? propagate(key->items[static_cast<size_t>(k)], nullptr) : opaque("slice bounds must be integers");
        bounds[k] = py_as_int(part);
      }
      if (bounds[2] != 1) return opaque("slices with a step");
      auto clamp = [&](int64_t x) { return x < 0 ? std::max<int64_t>(0, x + n) : std::min(x, n); };
      const int64_t lo = clamp(bounds[0]), hi = std::max(clamp(bounds[1]), clamp(bounds[0]));
      if (str) return py_make_str(v->s.substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)), line_);
      auto out = py_make(v->kind, line_);
      out->items.assign(v->items.begin() + lo, v->items.begin() + hi);
      return out;
    }
    if (!py_is_intlike(*key)) return opaque("indices must be integers, got " + py_kind_name(*key));
    int64_t i = py_as_int(*key);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return opaque("index " + std::to_string(py_as_int(*key)) + " is out of range");
    if (str) return py_make_str(std::string(1, v->s[static_cast<size_t>(i)]), line_);
    return v->items[static_cast<size_t>(i)];
  }

  Primary atom() {
    Primary p;
    if (at_end()) {
      p.value = fail("an expression is missing");
      return p;
    }
    const PyToken& tok = t_[pos_];
    const int line = tok.line;
    switch (tok.kind) {
      case PyToken::Kind::kInt:
      case PyToken::Kind::kFloat: {
        ++pos_;
        if (!tok.opaque.empty()) p.value = py_make_opaque(tok.opaque, line);
        else if (tok.kind == PyToken::Kind::kInt) p.value = py_make_int(tok.i, line);
        else p.value = py_make_float(tok.f, line);
        return p;
      }
      case PyToken::Kind::kString: {
        std::string s;
        std::string why;
        while (!at_end() && t_[pos_].kind == PyToken::Kind::kString) {
          if (!t_[pos_].opaque.empty() && why.empty()) why = t_[pos_].opaque;
          s += t_[pos_].text;
          ++pos_;
          if (s.size() > budget_.limits.max_items) why = "the string is too large";
        }
        p.value = why.empty() ? py_make_str(std::move(s), line) : py_make_opaque(why, line);
        return p;
      }
      case PyToken::Kind::kName: {
        ++pos_;
        const std::string& n = tok.text;
        if (n == "True" || n == "False") p.value = py_make_bool(n == "True", line);
        else if (n == "None") p.value = py_make(K::kNone, line);
        else if (n == "lambda" || n == "yield" || n == "await" || n == "for" || n == "if" || n == "else" || n == "in" || n == "not" ||
                 n == "and" || n == "or" || n == "is" || n == "def" || n == "class" || n == "import" || n == "from" || n == "return") {
          p.value = fail("'" + n + "' here");
        } else {
          p.dotted = n;
          const PyRef* g = py_lookup(globals_, *py_make_str(n, line));
          if (g) {
            // Scalars are copied so that the line of this use is the one reported.
            p.value = *g;
            if (p.value->kind == K::kInt || p.value->kind == K::kFloat || p.value->kind == K::kBool || p.value->kind == K::kStr) {
              auto copy = py_copy(*p.value);
              copy->line = line;
              p.value = copy;
            }
          } else if (is_builtin(n)) {
            p.builtin = n;
            p.value = py_make_object("the builtin " + n, line);
          } else {
            p.value = py_make_opaque("the name '" + n + "' is not defined in this file", line);
          }
        }
        return p;
      }
      case PyToken::Kind::kOp:
        break;
    }
    if (accept_op("...")) {
      p.value = py_make_opaque("Ellipsis", line);
      return p;
    }
    if (accept_op("(")) {
      if (accept_op(")")) {
        p.value = py_make(K::kTuple, line);
        return p;
      }
      PyRef first = star_or_test();
      if (peek_name("for")) {
        p.value = fail("a generator expression");
        return p;
      }
      if (accept_op(")")) {
        p.value = first->kind == K::kTuple && first->line == -1 ? fail("a starred expression in parentheses") : first;
        return p;
      }
      auto tup = py_make(K::kTuple, line);
      tup->items.push_back(first);
      while (!failed_ && accept_op(",")) {
        if (peek_op(")")) break;
        tup->items.push_back(star_or_test());
      }
      expect_op(")");
      p.value = unpack_stars(tup);
      return p;
    }
    if (accept_op("[")) {
      auto list = py_make(K::kList, line);
      while (!failed_ && !accept_op("]")) {
        list->items.push_back(star_or_test());
        if (peek_name("for")) {
          p.value = fail("a list comprehension");
          return p;
        }
        if (accept_op("]")) break;
        if (!expect_op(",")) break;
      }
      if (!spend(list->items.size(), list->items.size())) {
        p.value = opaque("the list is too large");
        return p;
      }
      p.value = unpack_stars(list);
      return p;
    }
    if (accept_op("{")) {
      auto dict = py_make(K::kDict, line);
      PyRef poisoned;  // a key that cannot be evaluated makes the whole dict unknown
      while (!failed_ && !accept_op("}")) {
        if (accept_op("**")) {
          PyRef src = or_expr();
          if (src->kind == K::kDict) {
            for (const auto& [k, v] : src->entries) py_set(*dict, k, v);
          } else if (py_unknown(*src)) {
            if (!poisoned) poisoned = propagate(src, nullptr);
          } else {
            fail("cannot unpack " + py_kind_name(*src) + " with **");
          }
        } else {
          PyRef key = test();
          if (!accept_op(":")) {
            p.value = fail(peek_name("for") ? "a set comprehension" : "a set");
            return p;
          }
          PyRef value = test();
          if (peek_name("for")) {
            p.value = fail("a dict comprehension");
            return p;
          }
          if (py_unknown(*key)) {
            if (!poisoned) poisoned = propagate(key, nullptr);
          } else if (key->kind == K::kList || key->kind == K::kDict) {
            fail("an unhashable dict key");
          } else {
            py_set(*dict, key, value);
          }
        }
        if (accept_op("}")) break;
        if (!expect_op(",")) break;
      }
      p.value = poisoned ? poisoned : dict;
      return p;
    }
    p.value = fail("unexpected '" + tok.text + "'");
    ++pos_;
    return p;
  }

  PyRef or_expr() { return bit_or(); }

  const std::vector<PyToken>& t_;
  size_t pos_;
  size_t end_;
  const PyValue& globals_;
  PyBudget& budget_;
  int line_;
  int depth_ = 0;
  bool failed_ = false;
  std::string why_;
};

}  // namespace

PyRef py_eval(const std::vector<PyToken>& tokens, size_t begin, size_t end, const PyValue& globals, PyBudget& budget) {
  if (begin >= end) return py_make_opaque("an expression is missing", begin < tokens.size() ? tokens[begin].line : 0);
  return Eval(tokens, begin, end, globals, budget).run();
}

}  // namespace stagecraft::interop
