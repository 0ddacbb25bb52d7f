// RendezvousServer: the rendezvous store's server (protocol in stagecraft/comm/rendezvous.h).
//
// One thread runs a poll(2) loop over the listening socket, a wake-up pipe and every
// connection; all key-value state belongs to that thread, so nothing but the statistics needs a
// lock. A connection has at most one request in progress: while it waits for keys or has reply
// bytes unsent, its input is not read (backpressure), so a connection never buffers more than
// one frame in and one reply out. Blocking requests (GET with a wait, WAIT) park the connection
// on the first missing key; a SET or ADD of that key re-checks it, and the loop's poll timeout
// is the nearest deadline, so every wait ends on time.
//
// Not here: persistence, replication, authentication beyond the shared run token.
#include "stagecraft/comm/rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <limits>
#include <thread>
#include <unordered_map>

#include "comm/socket.h"
#include "comm/rendezvous_protocol.h"

namespace stagecraft::comm {

namespace {

using net::Clock;
using proto::ErrorKind;
using proto::Op;
using proto::Reply;
constexpr Clock::time_point kNever = Clock::time_point::max();
constexpr size_t kReadChunk = 64 * 1024;
constexpr auto kAcceptPause = std::chrono::milliseconds(100);  // after EMFILE: let fds free up

bool equal_constant_time(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// "a, b, c and 12 more", kept short for a reply.
std::string list_keys(const std::vector<std::string>& keys) {
  std::string s;
  size_t shown = 0;
  for (const auto& k : keys) {
    if (s.size() + k.size() > 512) break;
    if (!s.empty()) s += ", ";
    s += "'" + k + "'";
    ++shown;
  }
  if (shown < keys.size()) s += " and " + std::to_string(keys.size() - shown) + " more";
  return s;
}

struct Conn {
  net::Fd fd;
  bool authed = false;
  Clock::time_point hello_deadline = kNever;

  std::string in;  // bytes of the frame being received (never more than one frame)
  Clock::time_point frame_deadline = kNever;  // to finish it

  std::string out;  // reply bytes not yet sent
  size_t out_off = 0;
  Clock::time_point out_deadline = kNever;  // for the peer to take it

  // A request parked until keys exist.
  enum class Pending { kNone, kGet, kWait } pending = Pending::kNone;
  std::vector<std::string> keys;
  std::string parked_on;  // the missing key whose waiter list holds this connection
  Clock::time_point wait_deadline = kNever;

  bool busy() const { return pending != Pending::kNone || out_off < out.size(); }
  Clock::time_point deadline() const {
    Clock::time_point d = authed ? kNever : hello_deadline;
    if (frame_deadline != kNever) d = std::min(d, frame_deadline);
    if (out_deadline != kNever) d = std::min(d, out_deadline);
    return d;
  }
};

}  // namespace

struct RendezvousServer::Impl {
  RendezvousServerOptions opt;
  int port = 0;
  net::Fd listener;
  net::Fd wake_read, wake_write;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::mutex stop_mu;  // serializes stop() callers

  mutable std::mutex stats_mu;
  RendezvousServerStats stats;

  // Loop-thread state.
  std::unordered_map<std::string, std::string> data;
  size_t stored_bytes = 0;
  std::unordered_map<uint64_t, Conn> conns;
  std::unordered_map<std::string, std::vector<uint64_t>> parked;  // missing key -> connections
  uint64_t next_id = 1;
  Clock::time_point accept_paused_until{};

  template <typename F>
  void count(F f) {
    std::lock_guard<std::mutex> lock(stats_mu);
    f(stats);
  }

  void loop();
  void accept_all();
  void on_readable(uint64_t id, Conn& c);
  bool handle_frame(uint64_t id, Conn& c, std::string_view body);  // false: close
  bool handle_hello(Conn& c, std::string_view body);
  void reply(Conn& c, const proto::Writer& w);
  void flush(Conn& c);
  void fail(Conn& c, ErrorKind kind, const std::string& message);
  void close(uint64_t id);
  void park(uint64_t id, Conn& c);
  void unpark(uint64_t id, Conn& c);
  bool try_complete(uint64_t id, Conn& c);  // true when the parked request was answered
  void key_changed(const std::string& key);
  void time_out(uint64_t id, Conn& c);  // answers a parked request with TIMEOUT
  void expire(Clock::time_point now);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
};

// ---- lifetime -------------------------------------------------------------------------------

Result<std::unique_ptr<RendezvousServer>> RendezvousServer::start(const RendezvousServerOptions& options) {
  if (options.token.empty()) return Status::invalid_input("store server: the run token is empty");
  if (options.token.size() > kMaxTokenBytes) {
    return Status::invalid_input("store server: the run token is longer than " + std::to_string(kMaxTokenBytes) + " bytes");
  }
  if (options.port < 0 || options.port > 65535) {
    return Status::invalid_input("store server: port " + std::to_string(options.port) + " is outside 0..65535");
  }
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  const std::string where = net::format_address(options.host, options.port);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const std::string service = std::to_string(options.port);
  const int gai = ::getaddrinfo(options.host.empty() ? nullptr : options.host.c_str(), service.c_str(), &hints, &list);
  if (gai != 0) return Status::io_error("store server: cannot resolve " + where + ": " + ::gai_strerror(gai));
  std::string why = "no address";
  for (addrinfo* ai = list; ai != nullptr && !impl->listener.valid(); ai = ai->ai_next) {
    net::Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      why = "socket: " + net::errno_text(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      why = "bind: " + net::errno_text(errno);
      continue;
    }
    if (::listen(fd.get(), 1024) != 0) {
      why = "listen: " + net::errno_text(errno);
      continue;
    }
    impl->listener = std::move(fd);
  }
  ::freeaddrinfo(list);
  if (!impl->listener.valid()) return Status::io_error("store server: cannot listen on " + where + ": " + why);

  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(impl->listener.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  impl->port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) != 0) return Status::io_error("store server: pipe: " + net::errno_text(errno));
  impl->wake_read.reset(pipefd[0]);
  impl->wake_write.reset(pipefd[1]);

  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() { stop(); }

void RendezvousServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (!impl_->thread.joinable()) return;
  impl_->stopping = true;
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake_write.get(), &b, 1);
  impl_->thread.join();
  impl_->conns.clear();
  impl_->listener.reset();
}

int RendezvousServer::port() const { return impl_->port; }
const std::string& RendezvousServer::host() const { return impl_->opt.host; }

RendezvousServerStats RendezvousServer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mu);
  return impl_->stats;
}

// ---- the loop -------------------------------------------------------------------------------

void RendezvousServer::Impl::loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stopping) {
    const Clock::time_point now = Clock::now();
    expire(now);

    fds.clear();
    ids.clear();
    fds.push_back({wake_read.get(), POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    fds.push_back({listener.get(), static_cast<short>(accepting ? POLLIN : 0), 0});
    Clock::time_point next = accepting ? kNever : accept_paused_until;
    for (auto& [id, c] : conns) {
      short ev = POLLRDHUP;
      if (!c.busy()) ev |= POLLIN;
      if (c.out_off < c.out.size()) ev |= POLLOUT;
      fds.push_back({c.fd.get(), ev, 0});
      ids.push_back(id);
      next = std::min({next, c.deadline(), c.wait_deadline});
    }
    int timeout_ms = -1;
    if (next != kNever) timeout_ms = std::max(1, net::remaining_ms(next) + 1);
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // ENOMEM: try again shortly
      continue;
    }
    if (fds[0].revents != 0) {
      char buf[64];
      while (::read(wake_read.get(), buf, sizeof buf) > 0) {
      }
    }
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short re = fds[i + 2].revents;
      if (re == 0) continue;
      auto it = conns.find(ids[i]);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      if (re & (POLLERR | POLLNVAL)) {
        close(ids[i]);
        continue;
      }
      if (re & POLLOUT) flush(c);
      if ((re & (POLLIN | POLLHUP | POLLRDHUP)) && !c.busy()) {
        on_readable(ids[i], c);
      } else if (re & (POLLHUP | POLLRDHUP)) {
        close(ids[i]);  // gone while a request was parked or a reply was pending
      }
    }
  }
}

void RendezvousServer::Impl::accept_all() {
  for (int i = 0; i < 256; ++i) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        accept_paused_until = Clock::now() + kAcceptPause;
      }
      return;  // EAGAIN: none left; ECONNABORTED and the like: the peer went away
    }
    net::Fd owned(fd);
    if (conns.size() >= opt.max_connections) {
      count([](RendezvousServerStats& s) { ++s.accepted, ++s.over_capacity; });
      proto::Writer w;
      w.u8(static_cast<uint8_t>(Reply::kError)).u8(static_cast<uint8_t>(ErrorKind::kBusy));
      w.str("the store holds its maximum of " + std::to_string(opt.max_connections) + " connections");
      const std::string f = w.frame();
      [[maybe_unused]] ssize_t k = ::send(fd, f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn c;
    c.fd = std::move(owned);
    c.hello_deadline = Clock::now() + opt.hello_timeout;
    conns.emplace(next_id++, std::move(c));
    count([this](RendezvousServerStats& s) { ++s.accepted, s.open_connections = conns.size(); });
  }
}

void RendezvousServer::Impl::on_readable(uint64_t id, Conn& c) {
  // Reads only what the current frame still needs, so the buffer never holds more than one
  // frame and its size follows the bytes that arrived, not the length a peer claims.
  for (int round = 0; round < 64 && !c.busy(); ++round) {
    size_t want;
    if (c.in.size() < 4) {
      want = 4 - c.in.size();
    } else {
      const size_t len = proto::read_be32(c.in.data());
      want = std::min(kReadChunk, 4 + len - c.in.size());
    }
    const size_t old = c.in.size();
    c.in.resize(old + want);
    const ssize_t k = ::recv(c.fd.get(), c.in.data() + old, want, MSG_DONTWAIT);
    if (k <= 0) {
      c.in.resize(old);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      close(id);  // orderly close, or a reset: a peer gone mid-frame is simply forgotten
      return;
    }
    c.in.resize(old + static_cast<size_t>(k));
    if (c.frame_deadline == kNever) c.frame_deadline = Clock::now() + opt.frame_timeout;
    if (c.in.size() < 4) continue;
    const size_t len = proto::read_be32(c.in.data());
    const size_t limit = c.authed ? kMaxFrameBytes : kMaxHelloFrameBytes;
    if (len == 0 || len > limit) {
      fail(c, ErrorKind::kProtocol,
           "frame of " + std::to_string(len) + " bytes is outside 1.." + std::to_string(limit));
      close(id);
      return;
    }
    if (c.in.size() < 4 + len) continue;
    std::string frame = std::move(c.in);
    c.in.clear();
    c.frame_deadline = kNever;
    if (!handle_frame(id, c, std::string_view(frame).substr(4))) {
      close(id);
      return;
    }
  }
}

void RendezvousServer::Impl::reply(Conn& c, const proto::Writer& w) {
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
  }
  c.out += w.frame();
  flush(c);
}

void RendezvousServer::Impl::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t k = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (c.out_deadline == kNever) c.out_deadline = Clock::now() + opt.frame_timeout;
        return;
      }
      c.out_off = c.out.size();  // the peer is gone; POLLERR/POLLHUP will close it
      break;
    }
    c.out_off += static_cast<size_t>(k);
  }
  c.out.clear();
  c.out_off = 0;
  c.out_deadline = kNever;
}

// Statistics are counted before the reply leaves, so a client that saw the reply sees them.
void RendezvousServer::Impl::fail(Conn& c, ErrorKind kind, const std::string& message) {
  if (kind == ErrorKind::kProtocol) count([](RendezvousServerStats& s) { ++s.protocol_errors; });
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Reply::kError)).u8(static_cast<uint8_t>(kind)).str(message);
  const std::string f = w.frame();
  [[maybe_unused]] ssize_t k = ::send(c.fd.get(), f.data(), f.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void RendezvousServer::Impl::close(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  unpark(id, it->second);
  conns.erase(it);
  count([this](RendezvousServerStats& s) { s.open_connections = conns.size(); });
}

// ---- requests -------------------------------------------------------------------------------

bool RendezvousServer::Impl::handle_hello(Conn& c, std::string_view body) {
  proto::Reader r(body);
  const auto op = static_cast<Op>(r.u8());
  const std::string_view magic = r.raw(4);
  const uint16_t version = r.u16();
  const std::string_view token = r.str(kMaxTokenBytes);
  if (!r.ok() || !r.at_end() || op != Op::kHello) {
    fail(c, ErrorKind::kProtocol, "expected HELLO as the first request");
    return false;
  }
  if (magic != std::string_view(proto::kMagic, 4) || version != proto::kVersion) {
    count([](RendezvousServerStats& s) { ++s.protocol_errors; });
    fail(c, ErrorKind::kVersion, "not a Stagecraft store client of protocol version " + std::to_string(proto::kVersion));
    return false;
  }
  if (!equal_constant_time(token, opt.token)) {
    count([](RendezvousServerStats& s) { ++s.refused_token; });
    fail(c, ErrorKind::kToken, "wrong run token");
    return false;
  }
  c.authed = true;
  count([](RendezvousServerStats& s) { ++s.authenticated; });
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Reply::kOk));
  reply(c, w);
  return true;
}

bool RendezvousServer::Impl::handle_frame(uint64_t id, Conn& c, std::string_view body) {
  if (!c.authed) return handle_hello(c, body);
  proto::Reader r(body);
  const auto op = static_cast<Op>(r.u8());
  proto::Writer w;
  auto malformed = [&](const char* what) {
    fail(c, ErrorKind::kProtocol, std::string("malformed ") + what + " request");
    return false;
  };
  auto refuse = [&](const std::string& why) {
    w.u8(static_cast<uint8_t>(Reply::kRefused)).str(why);
    reply(c, w);
    return true;
  };
  auto read_keys = [&](std::vector<std::string>& keys) {
    const uint32_t n = r.u32();
    if (!r.ok() || n > kMaxKeysPerRequest) return false;
    keys.clear();
    for (uint32_t i = 0; i < n && r.ok(); ++i) keys.emplace_back(r.str(kMaxKeyBytes));
    return r.ok();
  };

  switch (op) {
    case Op::kSet: {
      const std::string_view key = r.str(kMaxKeyBytes);
      const std::string_view value = r.str(kMaxValueBytes);
      if (!r.ok() || !r.at_end()) return malformed("SET");
      auto it = data.find(std::string(key));
      const size_t old = it == data.end() ? 0 : key.size() + it->second.size();
      const size_t after = stored_bytes - old + key.size() + value.size();
      if (after > opt.max_stored_bytes) {
        return refuse("the store is full (" + std::to_string(opt.max_stored_bytes) + " bytes)");
      }
      data[std::string(key)] = std::string(value);
      stored_bytes = after;
      count([this](RendezvousServerStats& s) { s.keys = data.size(), s.stored_bytes = stored_bytes; });
      w.u8(static_cast<uint8_t>(Reply::kOk));
      reply(c, w);
      key_changed(std::string(key));
      return true;
    }
    case Op::kGet:
    case Op::kWait: {
      std::vector<std::string> keys;
      if (op == Op::kGet) {
        keys.emplace_back(r.str(kMaxKeyBytes));
      } else if (!read_keys(keys)) {
        return malformed("WAIT");
      }
      const uint32_t wait_ms = r.u32();
      if (!r.ok() || !r.at_end()) return malformed(op == Op::kGet ? "GET" : "WAIT");
      c.pending = op == Op::kGet ? Conn::Pending::kGet : Conn::Pending::kWait;
      c.keys = std::move(keys);
      c.wait_deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
      if (!try_complete(id, c) && wait_ms == 0) time_out(id, c);
      return true;
    }
    case Op::kAdd: {
      const std::string key(r.str(kMaxKeyBytes));
      const int64_t delta = r.i64();
      if (!r.ok() || !r.at_end()) return malformed("ADD");
      int64_t value = 0;
      auto it = data.find(key);
      if (it != data.end()) {
        const std::string& s = it->second;
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
        if (ec != std::errc() || p != s.data() + s.size()) return refuse("the value of '" + key + "' is not a counter");
      }
      if ((delta > 0 && value > std::numeric_limits<int64_t>::max() - delta) ||
          (delta < 0 && value < std::numeric_limits<int64_t>::min() - delta)) {
        return refuse("the counter '" + key + "' would overflow");
      }
      value += delta;
      std::string text = std::to_string(value);
      const size_t old = it == data.end() ? 0 : key.size() + it->second.size();
      const size_t after = stored_bytes - old + key.size() + text.size();
      if (after > opt.max_stored_bytes) return refuse("the store is full");
      data[key] = std::move(text);
      stored_bytes = after;
      count([this](RendezvousServerStats& s) { s.keys = data.size(), s.stored_bytes = stored_bytes; });
      w.u8(static_cast<uint8_t>(Reply::kOk)).i64(value);
      reply(c, w);
      key_changed(key);
      return true;
    }
    case Op::kDelete: {
      const std::string key(r.str(kMaxKeyBytes));
      if (!r.ok() || !r.at_end()) return malformed("DELETE");
      auto it = data.find(key);
      const bool existed = it != data.end();
      if (existed) {
        stored_bytes -= key.size() + it->second.size();
        data.erase(it);
        count([this](RendezvousServerStats& s) { s.keys = data.size(), s.stored_bytes = stored_bytes; });
      }
      w.u8(static_cast<uint8_t>(Reply::kOk)).u8(existed ? 1 : 0);
      reply(c, w);
      return true;
    }
    case Op::kCheck: {
      std::vector<std::string> keys;
      if (!read_keys(keys) || !r.at_end()) return malformed("CHECK");
      w.u8(static_cast<uint8_t>(Reply::kOk)).u8(missing(keys).empty() ? 1 : 0);
      reply(c, w);
      return true;
    }
    case Op::kHello:
    default:
      fail(c, ErrorKind::kProtocol, "unknown or repeated request " + std::to_string(static_cast<int>(op)));
      return false;
  }
}

// ---- parked requests ------------------------------------------------------------------------

std::vector<std::string> RendezvousServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (data.find(k) == data.end()) out.push_back(k);
  }
  return out;
}

void RendezvousServer::Impl::park(uint64_t id, Conn& c) {
  for (const auto& k : c.keys) {
    if (data.find(k) == data.end()) {
      c.parked_on = k;
      parked[k].push_back(id);
      return;
    }
  }
}

void RendezvousServer::Impl::unpark(uint64_t id, Conn& c) {
  if (c.parked_on.empty()) return;
  auto it = parked.find(c.parked_on);
  if (it != parked.end()) {
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), id), v.end());
    if (v.empty()) parked.erase(it);
  }
  c.parked_on.clear();
}

bool RendezvousServer::Impl::try_complete(uint64_t id, Conn& c) {
  unpark(id, c);
  for (const auto& k : c.keys) {
    if (data.find(k) == data.end()) {
      park(id, c);
      return false;
    }
  }
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Reply::kOk));
  if (c.pending == Conn::Pending::kGet) w.str(data.at(c.keys.front()));
  c.pending = Conn::Pending::kNone;
  c.keys.clear();
  c.wait_deadline = kNever;
  reply(c, w);
  return true;
}

void RendezvousServer::Impl::key_changed(const std::string& key) {
  auto it = parked.find(key);
  if (it == parked.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  parked.erase(it);
  for (uint64_t id : ids) {
    auto ct = conns.find(id);
    if (ct == conns.end() || ct->second.pending == Conn::Pending::kNone) continue;
    ct->second.parked_on.clear();  // its list is gone already
    try_complete(id, ct->second);
  }
}

void RendezvousServer::Impl::time_out(uint64_t id, Conn& c) {
  unpark(id, c);
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Reply::kTimeout)).str(list_keys(missing(c.keys)));
  c.pending = Conn::Pending::kNone;
  c.keys.clear();
  c.wait_deadline = kNever;
  reply(c, w);
}

void RendezvousServer::Impl::expire(Clock::time_point now) {
  std::vector<uint64_t> dead;
  for (auto& [id, c] : conns) {
    if (c.pending != Conn::Pending::kNone && c.wait_deadline <= now) time_out(id, c);
    if (c.deadline() <= now) dead.push_back(id);
  }
  for (uint64_t id : dead) {
    count([](RendezvousServerStats& s) { ++s.timed_out; });
    close(id);
  }
}

}  // namespace stagecraft::comm
