// POSIX TCP helpers for the store (see socket.h).
#include "comm/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace stagecraft::comm::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message, which may or may not be buf.
  return strerror_r(err, buf, sizeof buf);
}

std::string format_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  if (left > INT_MAX) return INT_MAX;
  return static_cast<int>(left);
}

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

namespace {

bool set_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error (errno set).
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n;
    return 1;
  }
}

bool is_connection_lost(int err) {
  return err == ECONNRESET || err == EPIPE || err == ECONNABORTED || err == ENOTCONN ||
         err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == ENETDOWN;
}

}  // namespace

Result<Fd> connect_tcp(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(port);
  const int gai = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
  if (gai != 0) {
    const std::string why = ::gai_strerror(gai);
    if (gai == EAI_AGAIN) return Status::unavailable("cannot resolve '" + host + "': " + why);
    return Status::not_found("cannot resolve '" + host + "': " + why);
  }
  Status last = Status::unavailable("no address");
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last = Status::io_error("socket: " + errno_text(errno));
      continue;
    }
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const int w = wait_fd(fd.get(), POLLOUT, deadline);
      if (w == 0) {
        last = Status::timeout("connect timed out");
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      if (w < 0) err = errno;
      else if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      last = Status::unavailable("connect: " + errno_text(errno));
      continue;
    }
    if (!set_blocking(fd.get())) {
      last = Status::io_error("fcntl: " + errno_text(errno));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::freeaddrinfo(list);
    return fd;
  }
  ::freeaddrinfo(list);
  return last;
}

Status write_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const int w = wait_fd(fd, POLLOUT, deadline);
    if (w == 0) return Status::timeout("send timed out");
    if (w < 0) return Status::io_error("poll: " + errno_text(errno));
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (is_connection_lost(errno)) return Status::unavailable("connection lost: " + errno_text(errno));
      return Status::io_error("send: " + errno_text(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

Status read_exact(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const int w = wait_fd(fd, POLLIN, deadline);
    if (w == 0) return Status::timeout("no reply in time");
    if (w < 0) return Status::io_error("poll: " + errno_text(errno));
    const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k == 0) return Status::unavailable("connection closed by the server");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (is_connection_lost(errno)) return Status::unavailable("connection lost: " + errno_text(errno));
      return Status::io_error("recv: " + errno_text(errno));
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Status::OK();
}

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  return host;
}

}  // namespace stagecraft::comm::net
