// YAML text -> YamlNode tree, over libyaml's event API. See yaml_tree.h.
#include "yaml_tree.h"

#include <cstdio>
#include <cctype>
#include <charconv>
#include <yaml.h>

#include <map>

#include "stagecraft/core/text.h"

namespace stagecraft::config {

const YamlNode* YamlNode::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return v.get();
  }
  return nullptr;
}

std::string one_line(std::string_view text, size_t max_chars) {
  std::string out;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (out.size() >= max_chars && (u & 0xC0) != 0x80) {  // not inside a UTF-8 sequence
      out += "...";
      break;
    }
    append_visible(out, ch);
  }
  return out;
}

namespace {

// Owns a yaml_parser_t and the current event; frees both on every path.
class EventReader {
 public:
  explicit EventReader(std::string_view text) {
    ok_ = yaml_parser_initialize(&parser_) != 0;
    if (ok_) {
      yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
    }
  }
  ~EventReader() {
    if (has_event_) yaml_event_delete(&event_);
    if (ok_) yaml_parser_delete(&parser_);
  }
  EventReader(const EventReader&) = delete;
  EventReader& operator=(const EventReader&) = delete;

  bool initialized() const { return ok_; }

  // Advances to the next event; false with error() set on a syntax error.
  bool next() {
    if (has_event_) {
      yaml_event_delete(&event_);
      has_event_ = false;
    }
    if (!yaml_parser_parse(&parser_, &event_)) return false;
    has_event_ = true;
    return true;
  }
  const yaml_event_t& event() const { return event_; }

  Status error() const {
    std::string problem = parser_.problem ? parser_.problem : "invalid YAML";
    if (parser_.context) problem = std::string(parser_.context) + ": " + problem;
    const auto& mark = parser_.problem_mark;
    return Status::invalid_input("line " + std::to_string(mark.line + 1) + ", column " +
                                 std::to_string(mark.column + 1) + ": " + problem);
  }

 private:
  yaml_parser_t parser_{};
  yaml_event_t event_{};
  bool ok_ = false;
  bool has_event_ = false;
};

std::string at(const yaml_mark_t& mark) {
  return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

class TreeBuilder {
 public:
  explicit TreeBuilder(EventReader& r) : r_(r) {}

  // Builds the node whose first event is the current one.
  Result<YamlNode::Ptr> node(int depth) {
    const yaml_event_t& ev = r_.event();
    const yaml_mark_t mark = ev.start_mark;
    if (depth > kMaxYamlDepth) {
      return Status::invalid_input(at(mark) + ": nested deeper than " + std::to_string(kMaxYamlDepth) + " levels");
    }
    auto n = std::make_shared<YamlNode>();
    n->line = static_cast<int>(mark.line) + 1;
    n->column = static_cast<int>(mark.column) + 1;
    std::string anchor;
    switch (ev.type) {
      case YAML_ALIAS_EVENT: {
        const std::string name = reinterpret_cast<const char*>(ev.data.alias.anchor);
        auto it = anchors_.find(name);
        if (it == anchors_.end()) return Status::invalid_input(at(mark) + ": unknown alias *" + name);
        return it->second;
      }
      case YAML_SCALAR_EVENT: {
        if (ev.data.scalar.anchor) anchor = reinterpret_cast<const char*>(ev.data.scalar.anchor);
        n->kind = YamlNode::Kind::kScalar;
        n->scalar.assign(reinterpret_cast<const char*>(ev.data.scalar.value), ev.data.scalar.length);
        n->quoted = ev.data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                    ev.data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
                    ev.data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                    ev.data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
        break;
      }
      case YAML_SEQUENCE_START_EVENT: {
        if (ev.data.sequence_start.anchor) anchor = reinterpret_cast<const char*>(ev.data.sequence_start.anchor);
        n->kind = YamlNode::Kind::kSequence;
        while (true) {
          if (!r_.next()) return r_.error();
          if (r_.event().type == YAML_SEQUENCE_END_EVENT) break;
          auto item = node(depth + 1);
          if (!item.ok()) return item.status();
          n->items.push_back(std::move(item).value());
        }
        break;
      }
      case YAML_MAPPING_START_EVENT: {
        if (ev.data.mapping_start.anchor) anchor = reinterpret_cast<const char*>(ev.data.mapping_start.anchor);
        n->kind = YamlNode::Kind::kMapping;
        while (true) {
          if (!r_.next()) return r_.error();
          if (r_.event().type == YAML_MAPPING_END_EVENT) break;
          const yaml_mark_t key_mark = r_.event().start_mark;
          auto key = node(depth + 1);
          if (!key.ok()) return key.status();
          if (!key.value()->is_scalar()) return Status::invalid_input(at(key_mark) + ": mapping keys must be plain names");
          const std::string k = key.value()->scalar;
          if (n->find(k)) return Status::invalid_input(at(key_mark) + ": duplicate key '" + one_line(k) + "'");
          if (!r_.next()) return r_.error();
          auto value = node(depth + 1);
          if (!value.ok()) return value.status();
          n->entries.emplace_back(k, std::move(value).value());
        }
        break;
      }
      default:
        return Status::invalid_input(at(mark) + ": unexpected YAML structure");
    }
    if (!anchor.empty()) anchors_[anchor] = n;
    return n;
  }

 private:
  EventReader& r_;
  std::map<std::string, YamlNode::Ptr> anchors_;
};

}  // namespace

Result<YamlNode::Ptr> parse_yaml(std::string_view text) {
  EventReader r(text);
  if (!r.initialized()) return Status::internal("cannot initialise the YAML parser");
  if (!r.next()) return r.error();  // STREAM-START
  if (!r.next()) return r.error();
  if (r.event().type == YAML_STREAM_END_EVENT) {
    auto empty = std::make_shared<YamlNode>();
    empty->kind = YamlNode::Kind::kMapping;
    return empty;
  }
  if (r.event().type != YAML_DOCUMENT_START_EVENT) return Status::invalid_input("not a YAML document");
  if (!r.next()) return r.error();
  TreeBuilder builder(r);
  auto root = builder.node(0);
  if (!root.ok()) return root.status();
  if (!r.next()) return r.error();  // DOCUMENT-END
  if (!r.next()) return r.error();
  if (r.event().type != YAML_STREAM_END_EVENT) {
    return Status::invalid_input(at(r.event().start_mark) + ": more than one YAML document; a run configuration is one document");
  }
  return root;
}

// YAML text for a string: plain when it reads back as the same string, else double-quoted.
std::string yaml_string(const std::string& s) {
  bool plain = !s.empty();
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    plain = plain && (std::isalnum(u) || ch == '-' || ch == '_' || ch == '.' || ch == '/' || u >= 0x80);
  }
  static const char* kReserved[] = {"true", "false", "yes", "no", "on", "off", "null", "True", "False", "Null",
                                    "TRUE", "FALSE", "NULL", "auto", "uniform", "balanced", "~"};
  for (const char* r : kReserved) plain = plain && s != r;
  if (plain) {
    // Anything that parses as a number must be quoted to stay a string.
    double d;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec == std::errc() && p == s.data() + s.size()) plain = false;
    if (s[0] == '-' || s[0] == '.') plain = false;
  }
  if (plain) return s;
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string yaml_double(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace stagecraft::config
