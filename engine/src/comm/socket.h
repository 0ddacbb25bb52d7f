// POSIX TCP helpers for the store: an owning descriptor, connect and exact reads/writes with a
// deadline, address formatting. Private to comm/. Errors are Statuses naming the system call and
// errno's text; callers add which peer and which operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "stagecraft/core/status.h"

namespace stagecraft::comm::net {

using Clock = std::chrono::steady_clock;

// Owns one file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

std::string errno_text(int err);

// "host:port", with brackets around an IPv6 literal.
std::string format_address(const std::string& host, int port);

// Milliseconds left until `deadline`, at least 0 and at most INT_MAX (for poll()).
int remaining_ms(Clock::time_point deadline);

bool set_nonblocking(int fd);

// One attempt to connect to host:port (every resolved address in turn) before `deadline`.
// The descriptor is blocking, close-on-exec, TCP_NODELAY. kUnavailable when refused or
// unreachable (worth retrying), kTimeout at the deadline, kNotFound when the name does not resolve.
Result<Fd> connect_tcp(const std::string& host, int port, Clock::time_point deadline);

// Writes or reads exactly n bytes before `deadline`. kTimeout, kUnavailable when the peer
// closed or reset the connection, kIoError otherwise.
Status write_all(int fd, const void* data, size_t n, Clock::time_point deadline);
Status read_exact(int fd, void* data, size_t n, Clock::time_point deadline);

// Numeric address of the local end of a connected socket ("" when unknown).
std::string local_address(int fd);

}  // namespace stagecraft::comm::net
