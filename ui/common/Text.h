// The one conversion of engine text (UTF-8 std::string / std::string_view) to QString.
#pragma once

#include <QString>

#include <string_view>

inline QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }
