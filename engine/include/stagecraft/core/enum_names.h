// EnumName tables: one {value, name} array per enum, and the to_string / parse pair that every
// enum's spelling needs, written once instead of a switch and an if-chain per enum.
//
// A table lists every value exactly once, in the order choices are shown ("gpipe, 1f1b or
// interleaved"); names are unique. Lookups are linear (tables are a handful of entries).
// Everything here is constexpr, pure and thread-safe. Example:
//   inline constexpr EnumName<Backend> kBackendNames[] = {{Backend::kCpu, "cpu"}, {Backend::kCuda, "cuda"}};
//   enum_to_string(kBackendNames, Backend::kCuda)  == "cuda"
//   enum_parse(kBackendNames, "cpu")               == Backend::kCpu
//   enum_parse(kBackendNames, "tpu")               == std::nullopt
//   enum_choices(kBackendNames)                    == "cpu or cuda"
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace stagecraft {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `v`; "" for a value the table does not list (a cast from a bad integer).
template <typename E>
constexpr std::string_view enum_to_string(std::span<const EnumName<E>> table, E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return {};
}
template <typename E, size_t N>
constexpr std::string_view enum_to_string(const EnumName<E> (&table)[N], E v) {
  return enum_to_string(std::span<const EnumName<E>>(table), v);
}

// The value named exactly `s` (case-sensitive), or nullopt.
template <typename E>
constexpr std::optional<E> enum_parse(std::span<const EnumName<E>> table, std::string_view s) {
  for (const auto& e : table) {
    if (e.name == s) return e.value;
  }
  return std::nullopt;
}
template <typename E, size_t N>
constexpr std::optional<E> enum_parse(const EnumName<E> (&table)[N], std::string_view s) {
  return enum_parse(std::span<const EnumName<E>>(table), s);
}

// The names as a person reads a choice: "a", "a or b", "a, b or c".
template <typename E>
std::string enum_choices(std::span<const EnumName<E>> table) {
  std::string out;
  for (size_t i = 0; i < table.size(); ++i) {
    if (i > 0) out += i + 1 == table.size() ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}
template <typename E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  return enum_choices(std::span<const EnumName<E>>(table));
}

}  // namespace stagecraft
