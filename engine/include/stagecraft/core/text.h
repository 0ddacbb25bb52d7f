// Small text utilities shared by the engine's subsystems: edit distance for "did you mean"
// suggestions, UTF-8 encoding of a code point. Pure, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stagecraft {

// Levenshtein distance (insertions, deletions, substitutions of bytes).
size_t edit_distance(std::string_view a, std::string_view b);

// Appends the UTF-8 encoding of code point cp (<= 0x10FFFF) to out.
void append_utf8(std::string& out, uint32_t cp);

// Appends ch as a person reads it in a one-line message: \n and \t for newline and tab, \xNN
// for the other control bytes, any other byte (UTF-8 included) as itself.
void append_visible(std::string& out, char ch);

}  // namespace stagecraft
