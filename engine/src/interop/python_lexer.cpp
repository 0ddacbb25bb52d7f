// Python tokenizer for the config evaluator. See python_lexer.h.
#include "python_lexer.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "stagecraft/core/text.h"

namespace stagecraft::interop {

namespace {

bool is_name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool is_name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }


int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view text, std::string_view origin) : t_(text), origin_(origin) {}

  Result<std::vector<PyLine>> run() {
    while (true) {
      if (at_line_start_ && brackets_.empty()) {
        if (!start_line()) break;  // end of input
        continue;
      }
      if (pos_ >= t_.size()) break;
      const char c = t_[pos_];
      if (c == '\0') return fail("the file contains a NUL byte; is it a text file?");
      if (c == '\n') {
        ++pos_;
        ++line_;
        if (brackets_.empty()) end_logical_line();
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f') {
        ++pos_;
        continue;
      }
      if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
        continue;
      }
      if (c == '\\') {
        size_t p = pos_ + 1;
        if (p < t_.size() && t_[p] == '\r') ++p;
        if (p < t_.size() && t_[p] == '\n') {
          pos_ = p + 1;
          ++line_;
          continue;
        }
        return fail("unexpected character after line continuation '\\'");
      }
      Status st = token();
      if (!st.ok()) return st;
    }
    if (!brackets_.empty()) {
      return fail_at(brackets_.back().line, std::string("'") + brackets_.back().open + "' is never closed");
    }
    end_logical_line();
    return std::move(lines_);
  }

 private:
  struct Open {
    char open;
    int line;
  };

  Status fail(const std::string& msg) const { return fail_at(line_, msg); }
  Status fail_at(int line, const std::string& msg) const {
    return Status::invalid_input(std::string(origin_) + ":" + std::to_string(line) + ": " + msg);
  }

  // Measures the indentation of a new physical line; skips blank and comment-only lines.
  // Returns false at the end of the input.
  bool start_line() {
    while (pos_ < t_.size()) {
      int col = 0;
      size_t p = pos_;
      while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\f')) {
        if (t_[p] == ' ') ++col;
        else if (t_[p] == '\t') col = (col / 8 + 1) * 8;
        else col = 0;
        ++p;
      }
      if (p < t_.size() && t_[p] == '\r') ++p;
      if (p >= t_.size()) {
        pos_ = p;
        return false;
      }
      if (t_[p] == '\n' || t_[p] == '#') {
        while (p < t_.size() && t_[p] != '\n') ++p;
        if (p < t_.size()) ++p;
        ++line_;
        pos_ = p;
        continue;
      }
      pos_ = p;
      cur_.indent = col;
      cur_.line = line_;
      at_line_start_ = false;
      return true;
    }
    return false;
  }

  void end_logical_line() {
    if (!cur_.tokens.empty()) lines_.push_back(std::move(cur_));
    cur_ = PyLine{};
    at_line_start_ = true;
  }

  void push(PyToken tok) {
    tok.line = tok.line ? tok.line : line_;
    cur_.tokens.push_back(std::move(tok));
  }

  Status token() {
    const auto c = static_cast<unsigned char>(t_[pos_]);
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < t_.size() && is_name_char(static_cast<unsigned char>(t_[end]))) ++end;
      const std::string_view word = t_.substr(pos_, end - pos_);
      if (end < t_.size() && (t_[end] == '\'' || t_[end] == '"') && word.size() <= 2 && is_string_prefix(word)) {
        pos_ = end;
        return string(word);
      }
      PyToken tok;
      tok.kind = PyToken::Kind::kName;
      tok.text = std::string(word);
      pos_ = end;
      push(std::move(tok));
      return Status::OK();
    }
    if (std::isdigit(c) || (c == '.' && pos_ + 1 < t_.size() && std::isdigit(static_cast<unsigned char>(t_[pos_ + 1])))) {
      return number();
    }
    if (c == '\'' || c == '"') return string("");
    return op();
  }

  static bool is_string_prefix(std::string_view w) {
    std::string lower;
    for (char ch : w) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return lower == "r" || lower == "u" || lower == "b" || lower == "f" || lower == "rb" || lower == "br" || lower == "fr" ||
           lower == "rf";
  }

  Status number() {
    const size_t start = pos_;
    const int line = line_;
    size_t end = pos_;
    auto digits = [&](auto pred) {
      while (end < t_.size() && (pred(static_cast<unsigned char>(t_[end])) || t_[end] == '_')) ++end;
    };
    bool is_float = false;
    int base = 10;
    if (t_[end] == '0' && end + 1 < t_.size() && std::strchr("xXoObB", t_[end + 1]) && t_[end + 1] != '\0') {
      const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(t_[end + 1])));
      base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
      end += 2;
      digits([](unsigned char ch) { return std::isxdigit(ch) != 0; });
    } else {
      digits([](unsigned char ch) { return std::isdigit(ch) != 0; });
      if (end < t_.size() && t_[end] == '.') {
        is_float = true;
        ++end;
        digits([](unsigned char ch) { return std::isdigit(ch) != 0; });
      }
      if (end < t_.size() && (t_[end] == 'e' || t_[end] == 'E')) {
        size_t e = end + 1;
        if (e < t_.size() && (t_[e] == '+' || t_[e] == '-')) ++e;
        if (e < t_.size() && std::isdigit(static_cast<unsigned char>(t_[e]))) {
          is_float = true;
          end = e;
          digits([](unsigned char ch) { return std::isdigit(ch) != 0; });
        }
      }
    }
    bool imaginary = false;
    if (end < t_.size() && (t_[end] == 'j' || t_[end] == 'J')) {
      imaginary = true;
      ++end;
    }
    if (end < t_.size() && is_name_char(static_cast<unsigned char>(t_[end]))) {
      return fail("invalid number '" + std::string(t_.substr(start, end - start + 1)) + "'");
    }
    std::string clean;
    for (size_t k = start + (base == 10 ? 0 : 2); k < end - (imaginary ? 1 : 0); ++k) {
      if (t_[k] != '_') clean += t_[k];
    }
    pos_ = end;
    PyToken tok;
    tok.line = line;
    if (imaginary) {
      tok.kind = PyToken::Kind::kFloat;
      tok.opaque = "complex number " + std::string(t_.substr(start, end - start));
      push(std::move(tok));
      return Status::OK();
    }
    if (is_float) {
      tok.kind = PyToken::Kind::kFloat;
      if (clean[0] == '.') clean.insert(0, "0");
      double v = 0;
      auto [p, ec] = std::from_chars(clean.data(), clean.data() + clean.size(), v);
      if (ec == std::errc::result_out_of_range) v = std::numeric_limits<double>::infinity();
      else if (ec != std::errc() || p != clean.data() + clean.size()) return fail("invalid number '" + std::string(t_.substr(start, end - start)) + "'");
      tok.f = v;
    } else {
      tok.kind = PyToken::Kind::kInt;
      if (clean.empty()) return fail("invalid number '" + std::string(t_.substr(start, end - start)) + "'");
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(clean.data(), clean.data() + clean.size(), v, base);
      if (ec == std::errc::result_out_of_range || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        tok.opaque = "the integer " + std::string(t_.substr(start, std::min<size_t>(end - start, 40))) + " is larger than 64 bits";
      } else if (ec != std::errc() || p != clean.data() + clean.size()) {
        return fail("invalid number '" + std::string(t_.substr(start, end - start)) + "'");
      }
      tok.i = static_cast<int64_t>(v);
    }
    push(std::move(tok));
    return Status::OK();
  }

  Status string(std::string_view prefix) {
    bool raw = false, fstring = false, bytes = false;
    for (char ch : prefix) {
      const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      raw = raw || l == 'r';
      fstring = fstring || l == 'f';
      bytes = bytes || l == 'b';
    }
    const int line = line_;
    const char q = t_[pos_];
    const bool triple = pos_ + 2 < t_.size() && t_[pos_ + 1] == q && t_[pos_ + 2] == q;
    pos_ += triple ? 3 : 1;
    std::string value;
    while (true) {
      if (pos_ >= t_.size()) return fail_at(line, "unterminated string");
      const char ch = t_[pos_];
      if (ch == '\0') return fail("the file contains a NUL byte; is it a text file?");
      if (ch == q) {
        if (!triple) {
          ++pos_;
          break;
        }
        if (pos_ + 2 < t_.size() && t_[pos_ + 1] == q && t_[pos_ + 2] == q) {
          pos_ += 3;
          break;
        }
      }
      if (ch == '\n') {
        if (!triple) return fail_at(line, "unterminated string");
        ++line_;
        value += '\n';
        ++pos_;
        continue;
      }
      if (ch == '\\' && pos_ + 1 < t_.size()) {
        const char e = t_[pos_ + 1];
        if (e == '\n') ++line_;
        if (raw) {
          value += ch;
          value += e;
          pos_ += 2;
          continue;
        }
        pos_ += 2;
        switch (e) {
          case '\n': break;  // line continuation inside the string
          case '\\': value += '\\'; break;
          case '\'': value += '\''; break;
          case '"': value += '"'; break;
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case 'a': value += '\a'; break;
          case 'b': value += '\b'; break;
          case 'f': value += '\f'; break;
          case 'v': value += '\v'; break;
          case 'x': case 'u': case 'U': {
            const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < n; ++k) {
              const int h = pos_ < t_.size() ? hex_value(t_[pos_]) : -1;
              if (h < 0) return fail(std::string("invalid \\") + e + " escape in a string");
              cp = cp * 16 + static_cast<uint32_t>(h);
              ++pos_;
            }
            if (cp > 0x10FFFF) return fail("invalid \\U escape in a string");
            append_utf8(value, cp);
            break;
          }
          default:
            if (e >= '0' && e <= '7') {
              uint32_t cp = static_cast<uint32_t>(e - '0');
              for (int k = 0; k < 2 && pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '7'; ++k) cp = cp * 8 + static_cast<uint32_t>(t_[pos_++] - '0');
              append_utf8(value, cp);
            } else {
              value += '\\';  // Python keeps unknown escapes (\N{...} included) as written
              value += e;
            }
        }
        continue;
      }
      value += ch;
      ++pos_;
    }
    PyToken tok;
    tok.kind = PyToken::Kind::kString;
    tok.text = std::move(value);
    tok.line = line;
    if (fstring) tok.opaque = "an f-string is formatted at run time";
    else if (bytes) tok.opaque = "a bytes literal";
    push(std::move(tok));
    return Status::OK();
  }

  Status op() {
    static const char* kOps[] = {"**=", "//=", ">>=", "<<=", "...", "->", ":=", "**", "//", ">>", "<<", "<=", ">=", "==", "!=",
                                 "+=",  "-=",  "*=",  "/=",  "%=",  "&=", "|=", "^=", "@=", "+",  "-",  "*",  "/",  "%",  "@",
                                 "&",   "|",   "^",   "~",   "<",   ">",  "(",  ")",  "[",  "]",  "{",  "}",  ",",  ":",  ".",
                                 ";",   "="};
    for (const char* o : kOps) {
      const std::string_view sv(o);
      if (t_.substr(pos_, sv.size()) != sv) continue;
      if (sv == "(" || sv == "[" || sv == "{") {
        brackets_.push_back({o[0], line_});
      } else if (sv == ")" || sv == "]" || sv == "}") {
        const char want = sv == ")" ? '(' : sv == "]" ? '[' : '{';
        if (brackets_.empty()) return fail("unmatched '" + std::string(sv) + "'");
        if (brackets_.back().open != want) {
          return fail("closing '" + std::string(sv) + "' does not match '" + std::string(1, brackets_.back().open) + "' on line " +
                      std::to_string(brackets_.back().line));
        }
        brackets_.pop_back();
      }
      PyToken tok;
      tok.kind = PyToken::Kind::kOp;
      tok.text = std::string(sv);
      push(std::move(tok));
      pos_ += sv.size();
      return Status::OK();
    }
    const auto c = static_cast<unsigned char>(t_[pos_]);
    char shown[8];
    if (std::isprint(c)) std::snprintf(shown, sizeof shown, "%c", c);
    else std::snprintf(shown, sizeof shown, "\\x%02x", c);
    return fail(std::string("invalid character '") + shown + "' in Python source");
  }

  std::string_view t_;
  std::string_view origin_;
  size_t pos_ = 0;
  int line_ = 1;
  bool at_line_start_ = true;
  std::vector<Open> brackets_;
  PyLine cur_;
  std::vector<PyLine> lines_;
};

}  // namespace

Result<std::vector<PyLine>> py_tokenize(std::string_view text, std::string_view origin) {
  // A UTF-8 byte order mark is allowed at the start, as Python allows it.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  return Lexer(text, origin).run();
}

}  // namespace stagecraft::interop
