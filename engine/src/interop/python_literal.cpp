// Statement execution for the Python config evaluator. See python_literal.h for the contract.
//
// Logical lines (python_lexer.h) are run block by block. A block runs in one of three modes:
// exec (statements take effect), opaque (assignments bind opaque values that say why: a loop
// body, an except block, a branch behind a condition that cannot be evaluated) and skip (a branch
// not taken, a def or class body). Expressions are evaluated by python_eval.h.
#include "stagecraft/interop/python_literal.h"

#include <unordered_set>

#include "python_eval.h"
#include "python_lexer.h"

namespace stagecraft::interop {

using K = PyValue::Kind;

const PyValue* PyModule::find(std::string_view dotted) const {
  if (!graph_) return nullptr;
  const PyValue* cur = graph_->globals.get();
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string_view part = dotted.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (cur->kind == K::kOpaque) return cur;
    const PyValue* next = cur->get(part);
    if (!next) return nullptr;
    cur = next;
    if (dot == std::string_view::npos) return cur;
    start = dot + 1;
  }
}

const PyValue& PyModule::globals() const {
  static const PyValue kEmpty = [] {
    PyValue v;
    v.kind = PyValue::Kind::kObject;
    return v;
  }();
  return graph_ ? *graph_->globals : kEmpty;
}

namespace {

// Every container reachable from `roots`, held so that none dies while the caller clears them.
std::vector<PyRef> reachable(const std::vector<PyRef>& roots) {
  std::vector<PyRef> out;
  std::unordered_set<const PyValue*> seen;
  std::vector<PyRef> stack = roots;
  while (!stack.empty()) {
    PyRef v = std::move(stack.back());
    stack.pop_back();
    if (!v || !seen.insert(v.get()).second) continue;
    for (const auto& it : v->items) stack.push_back(it);
    for (const auto& [k, val] : v->entries) {
      stack.push_back(k);
      stack.push_back(val);
    }
    if (!v->items.empty() || !v->entries.empty()) out.push_back(std::move(v));
  }
  return out;
}

void clear_all(std::vector<PyRef>& values) {
  for (auto& v : values) py_clear(*v);
  values.clear();
}

bool is_keyword(const std::string& w) {
  static const char* kWords[] = {"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
                                 "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
                                 "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
                                 "with", "yield"};
  for (const char* k : kWords) {
    if (w == k) return true;
  }
  return false;
}

}  // namespace

PyModule::Graph::~Graph() {
  // Values may refer to each other in cycles (`a = {}; a["self"] = a`); clearing every container
  // breaks them so that all of it is freed.
  auto all = reachable({globals});
  clear_all(all);
}

class PyRunner {
 public:
  PyRunner(std::string_view origin, const PyLimits& limits) : origin_(origin) {
    budget_.limits = limits;
    globals_ = py_make_object("the module " + origin_, 0);
    py_track_containers(&created_);
  }
  ~PyRunner() {
    py_track_containers(nullptr);
    // Cycles that the file built and then dropped are unreachable from the globals: break them
    // (all of them when the run failed and no module keeps the globals).
    std::vector<PyRef> alive;
    for (auto& w : created_) {
      if (auto v = w.lock()) alive.push_back(std::move(v));
    }
    auto kept = handed_over_ ? reachable({globals_}) : std::vector<PyRef>{};
    std::unordered_set<const PyValue*> keep;
    for (const auto& v : kept) keep.insert(v.get());
    kept.clear();
    std::vector<PyRef> drop;
    for (auto& v : alive) {
      if (!keep.count(v.get())) drop.push_back(std::move(v));
    }
    alive.clear();
    clear_all(drop);
  }

  Status run(const std::vector<PyLine>& lines) { return block(lines, 0, lines.size(), Mode::kExec, "", 0); }

  PyModule module() {
    PyModule m;
    handed_over_ = true;
    m.graph_ = std::make_shared<PyModule::Graph>();
    m.graph_->globals = globals_;
    m.origin_ = origin_;
    return m;
  }

 private:
  enum class Mode { kExec, kOpaque, kSkip };
  static constexpr int kMaxBlockDepth = 100;  // Python itself allows 20 statically nested blocks

  Status error(int line, const std::string& msg) const {
    return Status::invalid_input(origin_ + ":" + std::to_string(line) + ": " + msg);
  }

  // Index of the first token at bracket depth 0 in [b, e) for which `pred` holds; e if none.
  template <typename Pred>
  static size_t find_top(const std::vector<PyToken>& t, size_t b, size_t e, Pred pred) {
    int depth = 0;
    for (size_t k = b; k < e; ++k) {
      const PyToken& tok = t[k];
      if (tok.kind == PyToken::Kind::kOp) {
        if (tok.text == "(" || tok.text == "[" || tok.text == "{") {
          ++depth;
          continue;
        }
        if (tok.text == ")" || tok.text == "]" || tok.text == "}") {
          --depth;
          continue;
        }
      }
      if (depth == 0 && pred(tok)) return k;
    }
    return e;
  }

  // Index of the bracket closing the one at `open`, or e when it is not closed before e.
  static size_t match_close(const std::vector<PyToken>& t, size_t open, size_t e) {
    int depth = 0;
    for (size_t k = open; k < e; ++k) {
      if (t[k].kind != PyToken::Kind::kOp) continue;
      if (t[k].text == "(" || t[k].text == "[" || t[k].text == "{") ++depth;
      else if ((t[k].text == ")" || t[k].text == "]" || t[k].text == "}") && --depth == 0) return k;
    }
    return e;
  }

  Status block(const std::vector<PyLine>& L, size_t begin, size_t end, Mode mode, const std::string& why, int depth) {
    if (begin >= end) return Status::OK();
    if (depth > kMaxBlockDepth) return error(L[begin].line, "blocks nested deeper than " + std::to_string(kMaxBlockDepth) + " levels");
    const int indent = L[begin].indent;
    std::string previous;  // the compound statement before, for a following else
    size_t i = begin;
    while (i < end) {
      const PyLine& ln = L[i];
      if (ln.indent != indent) {
        return error(ln.line, ln.indent > indent ? "unexpected indent" : "unindent does not match any outer indentation level");
      }
      size_t body_end = i + 1;
      while (body_end < end && L[body_end].indent > indent) ++body_end;
      const auto& tk = ln.tokens;
      std::string kw = tk[0].kind == PyToken::Kind::kName ? tk[0].text : "";
      if (kw == "async" && tk.size() > 1) kw = tk[1].text;
      if (tk[0].is_op("@")) {  // a decorator: the def or class follows
        if (body_end > i + 1) return error(L[i + 1].line, "unexpected indent");
        ++i;
        continue;
      }
      const bool soft = (kw == "match" || kw == "case") && tk.back().is_op(":") && body_end > i + 1;
      static const char* kCompound[] = {"if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def", "class"};
      bool compound = soft;
      for (const char* c : kCompound) compound = compound || kw == c;
      if (!compound) {
        if (body_end > i + 1) return error(L[i + 1].line, "unexpected indent");
        simple(tk, 0, tk.size(), mode, why);
        previous.clear();
        i = body_end;
        continue;
      }
      if (kw == "if") {
        auto st = if_chain(L, i, end, indent, mode, why, depth, &i);
        if (!st.ok()) return st;
        previous = "if";
        continue;
      }
      if (kw == "elif" || (kw == "else" && previous != "for" && previous != "while" && previous != "try")) {
        return error(ln.line, "'" + kw + "' without a matching 'if'");
      }
      Mode inner = mode;
      std::string inner_why = why;
      if (mode == Mode::kExec) {
        if (kw == "for" || kw == "while" || (kw == "else" && (previous == "for" || previous == "while"))) {
          inner = Mode::kOpaque;
          inner_why = "it is assigned inside the `" + (kw == "else" ? previous : kw) + "` loop on line " + std::to_string(ln.line) +
                      ", which Stagecraft does not run";
        } else if (kw == "except" || soft) {
          inner = Mode::kOpaque;
          inner_why = "it is assigned inside the `" + kw + "` block on line " + std::to_string(ln.line) + ", which Stagecraft does not run";
        }
      }
      if (kw == "def" || kw == "class") {
        const size_t n = tk[0].text == "async" ? 2 : 1;
        if (n < tk.size() && tk[n].kind == PyToken::Kind::kName && mode != Mode::kSkip) {
          PyRef v = mode == Mode::kExec ? py_make_object("the " + std::string(kw == "def" ? "function " : "class ") + tk[n].text +
                                                              " defined on line " + std::to_string(ln.line), ln.line)
                                        : py_make_opaque(why, ln.line);
          py_set(*globals_, py_make_str(tk[n].text, ln.line), v);
        }
        inner = Mode::kSkip;
      }
      auto st = body(L, i, body_end, kw, inner, inner_why, depth);
      if (!st.ok()) return st;
      if (kw == "for" || kw == "while" || kw == "try") previous = kw;
      else if (kw == "except") previous = "try";
      else previous.clear();
      i = body_end;
    }
    return Status::OK();
  }

  // The body of the compound statement on line i: the tokens after its ':' or the indented
  // lines [i + 1, body_end).
  Status body(const std::vector<PyLine>& L, size_t i, size_t body_end, const std::string& kw, Mode mode, const std::string& why, int depth) {
    const auto& tk = L[i].tokens;
    const size_t colon = find_top(tk, 0, tk.size(), [](const PyToken& t) { return t.is_op(":"); });
    if (colon >= tk.size()) return error(L[i].line, "expected ':' after '" + kw + "'");
    const bool inline_body = colon + 1 < tk.size();
    if (inline_body && body_end > i + 1) return error(L[i + 1].line, "unexpected indent");
    if (!inline_body && body_end == i + 1) {
      return error(L[i].line, "expected an indented block after '" + kw + "' on line " + std::to_string(L[i].line));
    }
    if (inline_body) {
      if (mode != Mode::kSkip) simple(tk, colon + 1, tk.size(), mode, why);
      return Status::OK();
    }
    return block(L, i + 1, body_end, mode, why, depth + 1);
  }

  Status if_chain(const std::vector<PyLine>& L, size_t i, size_t end, int indent, Mode mode, const std::string& why, int depth, size_t* next) {
    bool decided = false;
    std::string unknown_why;
    while (true) {
      const auto& tk = L[i].tokens;
      const std::string kw = tk[0].text;
      size_t body_end = i + 1;
      while (body_end < end && L[body_end].indent > indent) ++body_end;
      Mode m = mode;
      std::string m_why = why;
      if (mode == Mode::kExec) {
        if (decided) {
          m = Mode::kSkip;
        } else if (!unknown_why.empty()) {
          m = Mode::kOpaque;
          m_why = unknown_why;
        } else if (kw == "else") {
          decided = true;
        } else {
          const size_t colon = find_top(tk, 1, tk.size(), [](const PyToken& t) { return t.is_op(":"); });
          PyRef cond = py_eval(tk, 1, colon, *globals_, budget_);
          const int truth = py_truth(*cond);
          if (truth == 1) {
            decided = true;
          } else if (truth == 0) {
            m = Mode::kSkip;
          } else {
            unknown_why = "it is assigned under the condition on line " + std::to_string(L[i].line) +
                          ", which cannot be evaluated (" + (cond->kind == K::kOpaque ? cond->s : py_repr(*cond, 80)) + ")";
            m = Mode::kOpaque;
            m_why = unknown_why;
          }
        }
      }
      auto st = body(L, i, body_end, kw, m, m_why, depth);
      if (!st.ok()) return st;
      i = body_end;
      if (kw == "else" || i >= end || L[i].indent != indent || L[i].tokens[0].kind != PyToken::Kind::kName) break;
      const std::string& nk = L[i].tokens[0].text;
      if (nk != "elif" && nk != "else") break;
    }
    *next = i;
    return Status::OK();
  }

  // One logical line of simple statements separated by ';'.
  void simple(const std::vector<PyToken>& t, size_t b, size_t e, Mode mode, const std::string& why) {
    while (b < e) {
      const size_t semi = find_top(t, b, e, [](const PyToken& tok) { return tok.is_op(";"); });
      if (semi > b) statement(t, b, semi, mode, why);
      b = semi + 1;
    }
  }

  void statement(const std::vector<PyToken>& t, size_t b, size_t e, Mode mode, const std::string& why) {
    if (mode == Mode::kSkip) return;
    const PyToken& first = t[b];
    const int line = first.line;
    if (first.is_name("import") || first.is_name("from")) {
      imports(t, b, e, mode, why);
      return;
    }
    if (first.kind == PyToken::Kind::kName && is_keyword(first.text) && !first.is_name("True") && !first.is_name("False") &&
        !first.is_name("None") && !first.is_name("not") && !first.is_name("lambda") && !first.is_name("await")) {
      return;  // pass, del, return, raise, global, assert, ...
    }
    static const char* kAug[] = {"+=", "-=", "*=", "/=", "//=", "%=", "**=", "&=", "|=", "^=", "<<=", ">>=", "@="};
    std::vector<size_t> eqs;
    size_t aug = e;
    int depth = 0;
    for (size_t k = b; k < e; ++k) {
      const PyToken& tok = t[k];
      if (tok.kind != PyToken::Kind::kOp) continue;
      if (tok.text == "(" || tok.text == "[" || tok.text == "{") ++depth;
      else if (tok.text == ")" || tok.text == "]" || tok.text == "}") --depth;
      else if (depth == 0 && tok.text == "=") eqs.push_back(k);
      else if (depth == 0 && aug == e && eqs.empty()) {
        for (const char* a : kAug) {
          if (tok.text == a) aug = k;
        }
      }
      if (depth == 0 && tok.is_name("lambda")) break;
    }
    if (aug < e && eqs.empty()) {
      PyRef value;
      if (mode == Mode::kExec) {
        PyRef cur = py_eval(t, b, aug, *globals_, budget_);
        PyRef rhs = py_eval(t, aug + 1, e, *globals_, budget_);
        const std::string op = t[aug].text.substr(0, t[aug].text.size() - 1);
        value = py_binary(cur, op, rhs, budget_, line);
      } else {
        value = py_make_opaque(why, line);
      }
      assign(t, b, aug, value, mode, why);
      return;
    }
    if (!eqs.empty()) {
      PyRef value = mode == Mode::kExec ? py_eval(t, eqs.back() + 1, e, *globals_, budget_) : py_make_opaque(why, line);
      size_t tb = b;
      for (size_t q : eqs) {
        assign(t, tb, q, value, mode, why);
        tb = q + 1;
      }
      return;
    }
    mutation(t, b, e, mode, why);
  }

  // `import a.b as c, d` and `from x import a as b, c`: the names become objects.
  void imports(const std::vector<PyToken>& t, size_t b, size_t e, Mode mode, const std::string& why) {
    std::string module;
    size_t k = b + 1;
    const bool from = t[b].is_name("from");
    if (from) {
      while (k < e && !t[k].is_name("import")) module += t[k++].text;
      ++k;
    }
    while (k < e) {
      if (t[k].is_op("(") || t[k].is_op(")") || t[k].is_op(",")) {
        ++k;
        continue;
      }
      if (t[k].is_op("*")) return;  // `from x import *`: nothing known is bound
      std::string name, bound;
      while (k < e && (t[k].kind == PyToken::Kind::kName || t[k].is_op(".")) && !t[k].is_name("as")) {
        if (bound.empty() && t[k].kind == PyToken::Kind::kName) bound = t[k].text;  // `import a.b` binds a
        name += t[k++].text;
      }
      if (k < e && t[k].is_name("as") && k + 1 < e) {
        bound = t[k + 1].text;
        k += 2;
      }
      if (bound.empty()) {
        ++k;
        continue;
      }
      const std::string what = from ? "the name " + name + " imported from " + module : "the module " + name;
      PyRef v = mode == Mode::kExec ? py_make_object(what, t[b].line) : py_make_opaque(why, t[b].line);
      py_set(*globals_, py_make_str(bound, t[b].line), v);
    }
  }

  // A target path: a name followed by .attr and [key] accessors.
  struct Accessor {
    std::string attr;  // .attr
    PyRef key;         // [key]
  };

  void assign(const std::vector<PyToken>& t, size_t b, size_t e, const PyRef& value, Mode mode, const std::string& why) {
    const size_t colon = find_top(t, b, e, [](const PyToken& tok) { return tok.is_op(":"); });
    e = colon;  // `x: int = 1`
    if (b >= e) return;
    // Parenthesised or bracketed target lists: (a, b) = ...
    if ((t[b].is_op("(") || t[b].is_op("[")) && match_close(t, b, e) == e - 1) {
      if (find_top(t, b + 1, e - 1, [](const PyToken& tok) { return tok.is_op(","); }) < e - 1) {
        unpack(t, b + 1, e - 1, value, mode, why);
        return;
      }
    }
    if (find_top(t, b, e, [](const PyToken& tok) { return tok.is_op(","); }) < e) {
      unpack(t, b, e, value, mode, why);
      return;
    }
    if (b >= e || t[b].kind != PyToken::Kind::kName || is_keyword(t[b].text)) return;
    const std::string root = t[b].text;
    std::vector<Accessor> path;
    size_t k = b + 1;
    while (k < e) {
      if (t[k].is_op(".") && k + 1 < e && t[k + 1].kind == PyToken::Kind::kName) {
        path.push_back({t[k + 1].text, nullptr});
        k += 2;
      } else if (t[k].is_op("[")) {
        const size_t close = match_close(t, k, e);
        if (close >= e) return;
        PyRef key = py_eval(t, k + 1, close, *globals_, budget_);
        if (py_unknown(*key)) return;  // the slot cannot be known; Python would have raised or set something unknown
        path.push_back({"", key});
        k = close + 1;
      } else {
        return;  // not an assignable target (a call, an operator): nothing is bound
      }
    }
    PyRef v = mode == Mode::kExec ? value : py_make_opaque(why, t[b].line);
    set_path(root, path, v, t[b].line);
  }

  void unpack(const std::vector<PyToken>& t, size_t b, size_t e, const PyRef& value, Mode mode, const std::string& why) {
    std::vector<std::pair<size_t, size_t>> parts;
    while (b < e) {
      const size_t comma = find_top(t, b, e, [](const PyToken& tok) { return tok.is_op(","); });
      if (comma > b) parts.emplace_back(b, comma);
      b = comma + 1;
    }
    size_t star = parts.size();
    for (size_t k = 0; k < parts.size(); ++k) {
      if (t[parts[k].first].is_op("*")) star = k;
    }
    const size_t n = value->is_container() ? value->items.size() : 0;
    const bool fits = mode == Mode::kExec && value->is_container() &&
                      (star < parts.size() ? n + 1 >= parts.size() : n == parts.size());
    for (size_t k = 0; k < parts.size(); ++k) {
      const int line = t[parts[k].first].line;
      PyRef v;
      if (mode != Mode::kExec) {
        v = py_make_opaque(why, line);
      } else if (!fits) {
        v = value->kind == K::kOpaque ? value
                                      : py_make_opaque("cannot unpack " + py_kind_name(*value) + " into " + std::to_string(parts.size()) + " names", line);
      } else if (k < star) {
        v = value->items[k];
      } else if (k == star) {  // *rest takes what the others leave, as a list
        v = py_make(K::kList, line);
        v->items.assign(value->items.begin() + static_cast<long>(k), value->items.begin() + static_cast<long>(n - (parts.size() - 1 - k)));
      } else {
        v = value->items[n - (parts.size() - k)];
      }
      const size_t tb = k == star ? parts[k].first + 1 : parts[k].first;
      assign(t, tb, parts[k].second, v, Mode::kExec, why);
    }
  }

  // Binds globals[root] followed by the accessors to `value`, creating namespaces on the way
  // (attribute assignment on imported names and unknown objects, LiBai's LazyConfig dicts).
  void set_path(const std::string& root, const std::vector<Accessor>& path, const PyRef& value, int line) {
    PyRef cur = globals_;
    Accessor first{root, nullptr};
    for (size_t k = 0; k <= path.size(); ++k) {
      const Accessor& a = k == 0 ? first : path[k - 1];
      const bool last = k == path.size();
      if (cur->kind == K::kList) {
        if (!a.key || !py_is_intlike(*a.key)) return;
        int64_t idx = py_as_int(*a.key);
        const int64_t n = static_cast<int64_t>(cur->items.size());
        if (idx < 0) idx += n;
        if (idx < 0 || idx >= n) return;
        if (last) {
          cur->items[static_cast<size_t>(idx)] = value;
          return;
        }
        cur = cur->items[static_cast<size_t>(idx)];
        continue;
      }
      if (cur->kind != K::kDict && cur->kind != K::kObject) return;
      PyRef key = a.key ? a.key : py_make_str(a.attr, line);
      if (last) {
        py_set(*cur, key, value);
        return;
      }
      PyRef* slot = py_lookup(*cur, *key);
      if (!slot) {
        PyRef child = cur->kind == K::kObject && k > 0 ? py_make_object(cur->s, line)
                      : k == 0                         ? py_make_object("the name " + root + ", which this file does not define", line)
                                                       : py_make(K::kDict, line);
        py_set(*cur, key, child);
        cur = child;
        continue;
      }
      if ((*slot)->kind == K::kOpaque) *slot = py_make_object((*slot)->s, line);  // gains attributes from here on
      cur = *slot;
    }
  }

  // `x.update(...)`, `x.append(...)`, `x.extend(...)` as a statement change x; other calls are
  // skipped (their effects are unknown and, for the configs Stagecraft reads, irrelevant).
  void mutation(const std::vector<PyToken>& t, size_t b, size_t e, Mode mode, const std::string& why) {
    if (e - b < 4 || !t[e - 1].is_op(")")) return;
    int depth = 0;
    size_t open = e;
    for (size_t k = e; k-- > b;) {
      if (t[k].is_op(")") || t[k].is_op("]") || t[k].is_op("}")) ++depth;
      else if (t[k].is_op("(") || t[k].is_op("[") || t[k].is_op("{")) {
        if (--depth == 0) {
          open = k;
          break;
        }
      }
    }
    if (open >= e || open < b + 3 || !t[open - 2].is_op(".")) return;
    const std::string method = t[open - 1].text;
    if (method != "update" && method != "append" && method != "extend") return;
    PyRef self = py_eval(t, b, open - 2, *globals_, budget_);
    if (mode == Mode::kOpaque) {
      if (self->kind == K::kDict || self->kind == K::kObject) {
        py_clear(*self);
        self->kind = K::kOpaque;
        self->s = why;
      }
      return;
    }
    if (method == "update" && (self->kind == K::kDict || self->kind == K::kObject)) {
      // Evaluate the arguments as dict(<arguments>).
      std::vector<PyToken> call;
      PyToken name;
      name.kind = PyToken::Kind::kName;
      name.text = "dict";
      name.line = t[open].line;
      call.push_back(name);
      call.insert(call.end(), t.begin() + static_cast<long>(open), t.begin() + static_cast<long>(e));
      PyRef args = py_eval(call, 0, call.size(), *globals_, budget_);
      if (args->kind != K::kDict) return;
      for (const auto& [k, v] : args->entries) py_set(*self, k, v);
      return;
    }
    if (self->kind == K::kList && (method == "append" || method == "extend")) {
      PyRef arg = py_eval(t, open + 1, e - 1, *globals_, budget_);
      if (method == "append") {
        if (py_spend(budget_, 1, self->items.size() + 1)) self->items.push_back(arg);
      } else if (arg->is_container() && py_spend(budget_, arg->items.size(), self->items.size() + arg->items.size())) {
        const auto items = arg->items;  // arg may be self
        self->items.insert(self->items.end(), items.begin(), items.end());
      }
    }
  }

  std::string origin_;
  PyBudget budget_;
  PyRef globals_;
  std::vector<std::weak_ptr<PyValue>> created_;
  bool handed_over_ = false;  // module() gave the globals to a PyModule
};

Result<PyModule> run_python_config(std::string_view text, std::string_view origin, const PyLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return Status::invalid_input(std::string(origin) + ": the file is " + std::to_string(text.size()) + " bytes, more than the " +
                                 std::to_string(limits.max_bytes) + " a configuration may have");
  }
  auto lines = py_tokenize(text, origin);
  if (!lines.ok()) return lines.status();
  PyRunner runner(origin, limits);
  Status st = runner.run(lines.value());
  if (!st.ok()) return st;
  return runner.module();
}

}  // namespace stagecraft::interop
