// Small text utilities shared by the engine's subsystems: edit distance for "did you mean"
// suggestions, UTF-8 encoding of a code point, shell-like splitting of an argument line. Pure,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft {

// Levenshtein distance (insertions, deletions, substitutions of bytes).
size_t edit_distance(std::string_view a, std::string_view b);

// Appends the UTF-8 encoding of code point cp (<= 0x10FFFF) to out.
void append_utf8(std::string& out, uint32_t cp);

// Appends ch as a person reads it in a one-line message: \n and \t for newline and tab, \xNN
// for the other control bytes, any other byte (UTF-8 included) as itself.
void append_visible(std::string& out, char ch);

// Splits `line` into words the way a POSIX shell splits a simple command, without expanding
// anything: blanks (space, tab, newline) separate words; '...' keeps everything inside as is;
// "..." keeps everything but \" \\ \$ \` and backslash-newline, which lose their backslash;
// outside quotes a backslash keeps the next character (backslash-newline joins lines). Quotes
// join with what touches them (a'b c'd is one word "ab cd"); "" is an empty word.
//   split_words("--data-path 'my data/x' --lr=1e-4")  ->  {"--data-path", "my data/x", "--lr=1e-4"}
// Fails (invalid_input, naming the column) on an unclosed quote or a trailing backslash.
Result<std::vector<std::string>> split_words(std::string_view line);

// The pieces of `s` between occurrences of `sep`, empty ones kept (n separators give n + 1
// pieces; "" gives one empty piece). Views into `s`.
//   split_fields("a|b||c", '|')  ->  {"a", "b", "", "c"}
std::vector<std::string_view> split_fields(std::string_view s, char sep);

}  // namespace stagecraft
