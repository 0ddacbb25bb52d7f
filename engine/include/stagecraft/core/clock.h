// Time as the engine measures it: seconds on the monotonic clock (timeouts, intervals) and on
// the wall clock (timestamps kept in the run history). Thread-safe.
#pragma once

#include <chrono>

namespace stagecraft {

inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since the Unix epoch.
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace stagecraft
