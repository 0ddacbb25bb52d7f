// Json parser and writer. See json.h for the contract.
#include "stagecraft/core/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "stagecraft/core/text.h"

namespace stagecraft {

Json& Json::set(const std::string& key, Json v) {
  if (type_ != Type::kObject) {
    *this = object();
  }
  for (auto& [k, existing] : object_) {
    if (k == key) {
      existing = std::move(v);
      return existing;
    }
  }
  object_.emplace_back(key, std::move(v));
  return object_.back().second;
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool operator==(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.int_ == b.int_;
    return a.as_double() == b.as_double();
  }
  if (a.type_ != b.type_) return false;
  switch (a.type_) {
    case Json::Type::kNull: return true;
    case Json::Type::kBool: return a.bool_ == b.bool_;
    case Json::Type::kString: return a.string_ == b.string_;
    case Json::Type::kArray: return a.array_ == b.array_;
    case Json::Type::kObject: return a.object_ == b.object_;
    default: return false;
  }
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  if (cp > 0x10FFFF) return 0;
  return n;
}


void format_double(std::string& out, double v) {
  if (!std::isfinite(v)) {  // JSON has no NaN or infinity
    out += "null";
    return;
  }
  char buf[32];
  // Shortest representation that reads back to the same double.
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string_view text(buf, static_cast<size_t>(end - buf));
  out += text;
  if (ec == std::errc() && text.find_first_of(".eEn") == std::string_view::npos) out += ".0";
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<Json> run() {
    Json value;
    if (Status st = parse_value(value, 0); !st) return st;
    skip_ws();
    if (pos_ != s_.size()) return error("unexpected text after the JSON value");
    return value;
  }

 private:
  Status error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return Status::invalid_input("JSON line " + std::to_string(line) + ", column " +
                                 std::to_string(col) + ": " + what);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return true;
    }
    return false;
  }

  Status parse_value(Json& out, int depth) {
    if (depth > Json::kMaxDepth) return error("nested deeper than " + std::to_string(Json::kMaxDepth) + " levels");
    skip_ws();
    if (pos_ >= s_.size()) return error("unexpected end of input, expected a value");
    const char c = s_[pos_];
    if (c == '{') return parse_object(out, depth);
    if (c == '[') return parse_array(out, depth);
    if (c == '"') {
      std::string str;
      if (Status st = parse_string(str); !st) return st;
      out = Json(std::move(str));
      return Status::OK();
    }
    if (consume("true")) { out = Json(true); return Status::OK(); }
    if (consume("false")) { out = Json(false); return Status::OK(); }
    if (consume("null")) { out = Json(); return Status::OK(); }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
    return error(std::string("unexpected character '") + (c >= 32 && c < 127 ? std::string(1, c) : "?") + "'");
  }

  Status parse_object(Json& out, int depth) {
    ++pos_;  // {
    out = Json::object();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return Status::OK(); }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a string key");
      std::string key;
      if (Status st = parse_string(key); !st) return st;
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':' after key \"" + key + "\"");
      ++pos_;
      Json value;
      if (Status st = parse_value(value, depth + 1); !st) return st;
      out.set(key, std::move(value));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return Status::OK(); }
      return error("expected ',' or '}' in object");
    }
  }

  Status parse_array(Json& out, int depth) {
    ++pos_;  // [
    out = Json::array();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return Status::OK(); }
    while (true) {
      Json value;
      if (Status st = parse_value(value, depth + 1); !st) return st;
      out.push_back(std::move(value));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return Status::OK(); }
      return error("expected ',' or ']' in array");
    }
  }

  Status parse_hex4(uint32_t& cp) {
    if (pos_ + 4 > s_.size()) return error("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
      else return error("invalid hex digit in \\u escape");
    }
    return Status::OK();
  }

  Status parse_string(std::string& out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= s_.size()) return error("unterminated string");
      const char c = s_[pos_];
      if (c == '"') { ++pos_; return Status::OK(); }
      if (static_cast<unsigned char>(c) < 0x20) return error("control character inside a string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) return error("unterminated escape");
        const char e = s_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = 0;
            if (Status st = parse_hex4(cp); !st) return st;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              uint32_t low = 0;
              if (!consume("\\u")) return error("unpaired surrogate in \\u escape");
              if (Status st = parse_hex4(low); !st) return st;
              if (low < 0xDC00 || low > 0xDFFF) return error("invalid low surrogate in \\u escape");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              return error("unpaired surrogate in \\u escape");
            }
            append_utf8(out, cp);
            break;
          }
          default: return error(std::string("invalid escape '\\") + (e >= 32 && e < 127 ? std::string(1, e) : "?") + "'");
        }
        continue;
      }
      const size_t n = utf8_sequence_length(s_, pos_);
      if (n == 0) return error("invalid UTF-8 in string");
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  Status parse_number(Json& out) {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return error("invalid number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    bool is_integer = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_integer = false;
      ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return error("invalid number: digits expected after '.'");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      is_integer = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !(s_[pos_] >= '0' && s_[pos_] <= '9')) return error("invalid number: digits expected in exponent");
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    }
    const std::string_view text = s_.substr(start, pos_ - start);
    if (is_integer) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc() && p == text.data() + text.size()) {
        out = Json(static_cast<long long>(v));
        return Status::OK();
      }
      // Too large for int64: fall through to double.
    }
    double d = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (ec != std::errc() || p != text.data() + text.size()) {
      if (ec == std::errc::result_out_of_range) return error("number out of range");
      return error("invalid number");
    }
    out = Json(d);
    return Status::OK();
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out += '"';
  return out;
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

void Json::dump_to(std::string& out, int indent, int level) const {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (type_) {
    case Type::kNull: out += "null"; break;
    case Type::kBool: out += bool_ ? "true" : "false"; break;
    case Type::kInt: {
      char buf[24];  // no allocation per number: a plan holds tens of thousands
      out.append(buf, std::to_chars(buf, buf + sizeof buf, int_).ptr);
      break;
    }
    case Type::kDouble: format_double(out, double_); break;
    case Type::kString: out += json_quote(string_); break;
    case Type::kArray: {
      if (array_.empty()) { out += "[]"; break; }
      // Arrays of scalars stay on one line: rank lists read better that way.
      bool scalars = true;
      for (const auto& v : array_) scalars = scalars && !v.is_array() && !v.is_object();
      out += '[';
      for (size_t i = 0; i < array_.size(); ++i) {
        if (i) out += indent >= 0 && scalars ? ", " : ",";
        if (!scalars) newline(level + 1);
        array_[i].dump_to(out, indent, level + 1);
      }
      if (!scalars) newline(level);
      out += ']';
      break;
    }
    case Type::kObject: {
      if (object_.empty()) { out += "{}"; break; }
      out += '{';
      for (size_t i = 0; i < object_.size(); ++i) {
        if (i) out += ',';
        newline(level + 1);
        out += json_quote(object_[i].first);
        out += indent >= 0 ? ": " : ":";
        object_[i].second.dump_to(out, indent, level + 1);
      }
      newline(level);
      out += '}';
      break;
    }
  }
}

Result<Json> Json::parse(std::string_view text) { return Parser(text).run(); }

}  // namespace stagecraft
