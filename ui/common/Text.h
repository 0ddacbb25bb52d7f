// Text helpers every view shares: the one conversion of engine text (UTF-8 std::string /
// std::string_view) to QString, and how a fraction is shown.
#pragma once

#include <QString>

#include <string_view>

inline QString qs(std::string_view s) { return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())); }

// 0.123 -> "12.3%".
inline QString percentText(double fraction) { return QString::number(100.0 * fraction, 'f', 1) + QLatin1Char('%'); }
