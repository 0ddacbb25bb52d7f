// Json: a small JSON value with a strict parser and a writer.
//
// Used for the CLI's --json output, DeepSpeed configs, and later the workers' metric events.
// Objects keep their keys in insertion order so that output is stable and diffable.
// Numbers keep whether they were written as integers, so 1024 prints as 1024, not 1024.0.
//
// parse() accepts RFC 8259 JSON only (no comments, no trailing commas), nests at most
// kMaxDepth levels, and reports the first error with its line and column. It never throws.
// A Json is a plain value: copyable, not thread-safe to mutate concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft {

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  static constexpr int kMaxDepth = 256;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  Json(int v) : type_(Type::kInt), int_(v) {}
  Json(long v) : type_(Type::kInt), int_(v) {}
  Json(long long v) : type_(Type::kInt), int_(v) {}
  Json(unsigned v) : type_(Type::kInt), int_(v) {}
  Json(unsigned long v) : type_(Type::kInt), int_(static_cast<int64_t>(v)) {}
  Json(unsigned long long v) : type_(Type::kInt), int_(static_cast<int64_t>(v)) {}
  Json(double v) : type_(Type::kDouble), double_(v) {}
  Json(const char* s) : type_(Type::kString), string_(s) {}
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}
  Json(std::string_view s) : type_(Type::kString), string_(s) {}
  Json(Array a) : type_(Type::kArray), array_(std::move(a)) {}

  static Json array() { return Json(Array{}); }
  static Json object() {
    Json j;
    j.type_ = Type::kObject;
    return j;
  }
  // An object from its members, in order; the caller keeps keys unique. Cheaper than set() per
  // key when building many objects (a plan's thousands of ranks).
  static Json object(Object members) {
    Json j = object();
    j.object_ = std::move(members);
    return j;
  }
  template <typename T>
  static Json array_of(const std::vector<T>& values) {
    Array a;
    a.reserve(values.size());
    for (const auto& v : values) a.emplace_back(v);
    return Json(std::move(a));
  }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kDouble; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return type_ == Type::kDouble ? static_cast<int64_t>(double_) : int_; }
  double as_double() const { return type_ == Type::kInt ? static_cast<double>(int_) : double_; }
  const std::string& as_string() const { return string_; }
  const Array& as_array() const { return array_; }
  Array& as_array() { return array_; }
  const Object& as_object() const { return object_; }

  // Arrays.
  void push_back(Json v) { array_.push_back(std::move(v)); }
  size_t size() const { return type_ == Type::kObject ? object_.size() : array_.size(); }
  const Json& operator[](size_t i) const { return array_[i]; }

  // Objects: set() replaces an existing key in place, else appends.
  Json& set(const std::string& key, Json v);
  const Json* find(std::string_view key) const;  // nullptr when absent or not an object
  bool contains(std::string_view key) const { return find(key) != nullptr; }

  // Compact when indent < 0, else pretty-printed with that many spaces per level.
  std::string dump(int indent = -1) const;

  static Result<Json> parse(std::string_view text);

  friend bool operator==(const Json& a, const Json& b);

 private:
  void dump_to(std::string& out, int indent, int level) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0.0;
  std::string string_;
  Array array_;
  Object object_;
};

// JSON string literal for s, with quotes; escapes control characters and invalid UTF-8 bytes
// are replaced by U+FFFD so that output is always valid JSON.
std::string json_quote(std::string_view s);

}  // namespace stagecraft
