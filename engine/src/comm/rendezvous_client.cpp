// RendezvousClient: a worker's connection to the rendezvous store (protocol in stagecraft/comm/rendezvous.h).
//
// Every call sends one frame and reads one reply under a deadline; any failure on the wire
// drops the connection (its byte stream can no longer be trusted) and the next call opens a new
// one. The messages name the operation, the keys and the server's address.
#include "stagecraft/comm/rendezvous.h"

#include <algorithm>
#include <limits>
#include <thread>

#include "comm/socket.h"
#include "comm/rendezvous_protocol.h"

namespace stagecraft::comm {

namespace {

using net::Clock;
using proto::ErrorKind;
using proto::Op;
using proto::Reply;

// How long past a deliberate server-side wait a reply may take to arrive.
constexpr Milliseconds kReplyGrace{5000};
constexpr Milliseconds kFirstBackoff{10};
constexpr Milliseconds kMaxBackoff{500};

std::string quote(const std::string& key) {
  if (key.size() <= 200) return "'" + key + "'";
  return "'" + key.substr(0, 200) + "...'";
}

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 3) return s + " and " + std::to_string(keys.size() - 3) + " more";
    if (i) s += ", ";
    s += quote(keys[i]);
  }
  return s;
}

uint32_t clamp_ms(Milliseconds ms) {
  return static_cast<uint32_t>(std::clamp<int64_t>(ms.count(), 0, std::numeric_limits<uint32_t>::max()));
}

Status check_key(const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    return Status::invalid_input("key " + quote(key) + " is longer than the store's limit of " + std::to_string(kMaxKeyBytes) + " bytes");
  }
  return Status::OK();
}

Status check_keys(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxKeysPerRequest) {
    return Status::invalid_input(std::to_string(keys.size()) + " keys in one request, over the store's limit of " +
                                 std::to_string(kMaxKeysPerRequest));
  }
  for (const auto& k : keys) {
    if (Status s = check_key(k); !s) return s;
  }
  return Status::OK();
}

std::string ms_text(Milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

}  // namespace

RendezvousClient::RendezvousClient(RendezvousClientOptions options)
    : options_(std::move(options)), address_(net::format_address(options_.host, options_.port)) {}

RendezvousClient::~RendezvousClient() { drop(); }

void RendezvousClient::drop() {
  if (fd_ >= 0) net::Fd(fd_).reset();
  fd_ = -1;
}

std::string RendezvousClient::local_address() const {
  std::lock_guard<std::mutex> lock(local_mu_);
  return local_address_;
}

Result<std::unique_ptr<RendezvousClient>> RendezvousClient::connect(const RendezvousClientOptions& options) {
  const std::string where = net::format_address(options.host, options.port);
  if (options.port <= 0 || options.port > 65535) {
    return Status::invalid_input("store address " + where + ": the port must be in 1..65535");
  }
  if (options.token.size() > kMaxTokenBytes) {
    return Status::invalid_input("store token is longer than " + std::to_string(kMaxTokenBytes) + " bytes");
  }
  std::unique_ptr<RendezvousClient> client(new RendezvousClient(options));
  std::lock_guard<std::mutex> lock(client->mu_);
  if (Status s = client->open(Clock::now() + options.connect_timeout); !s) return s;
  return client;
}

Status RendezvousClient::open(Clock::time_point deadline) {
  proto::Writer hello;
  hello.u8(static_cast<uint8_t>(Op::kHello)).raw(proto::kMagic, 4).u16(proto::kVersion).str(options_.token);
  const std::string frame = hello.frame();

  Milliseconds backoff = kFirstBackoff;
  Status last;
  Status busy;  // the server's own word, if it ever said it was full: the better explanation
  for (;;) {
    auto fd = net::connect_tcp(options_.host, options_.port, deadline);
    if (fd.ok()) {
      Status s = net::write_all(fd->get(), frame.data(), frame.size(), deadline);
      char head[4];
      if (s) s = net::read_exact(fd->get(), head, 4, deadline);
      std::string body;
      if (s) {
        const uint32_t len = proto::read_be32(head);
        if (len == 0 || len > kMaxHelloFrameBytes + 1024) {
          return Status::internal("store at " + address_ + " answered HELLO with a frame of " + std::to_string(len) +
                                  " bytes: is that port a Stagecraft store?");
        }
        body.resize(len);
        s = net::read_exact(fd->get(), body.data(), len, deadline);
      }
      if (s) {
        proto::Reader r(body);
        const auto reply = static_cast<Reply>(r.u8());
        if (reply == Reply::kOk) {
          fd_ = fd->release();
          std::lock_guard<std::mutex> lock(local_mu_);
          local_address_ = net::local_address(fd_);
          return Status::OK();
        }
        const auto kind = static_cast<ErrorKind>(r.u8());
        const std::string msg(r.str(kMaxHelloFrameBytes));
        if (reply != Reply::kError) {
          return Status::internal("store at " + address_ + " answered HELLO with reply " + std::to_string(int(reply)));
        }
        if (kind == ErrorKind::kToken) {
          return Status::invalid_input("store at " + address_ +
                                       " refused this client: wrong run token (the token given, e.g. "
                                       "STAGECRAFT_RUN_TOKEN, is not the one of the run serving there)");
        }
        if (kind != ErrorKind::kBusy) return Status::internal("store at " + address_ + " refused HELLO: " + msg);
        last = busy = Status::unavailable(msg);
      } else {
        last = s;
      }
    } else if (fd.status().code() == Status::Code::kNotFound) {
      return fd.status().with_context("store at " + address_);
    } else {
      last = fd.status();
    }
    const int left = net::remaining_ms(deadline);
    if (left <= 0) {
      const Status& why = busy.ok() ? last : busy;
      return Status::unavailable("cannot reach the store at " + address_ + " (gave up after retrying: " +
                                 why.message() + ")");
    }
    std::this_thread::sleep_for(std::min<Milliseconds>(backoff, Milliseconds(left)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

Result<std::string> RendezvousClient::call(const char* op, const std::string& what, const std::string& request,
                                      Milliseconds reply_wait) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string context = std::string("store ") + op + " " + what + " at " + address_;
  const Clock::time_point start = Clock::now();
  if (fd_ < 0) {
    const Clock::time_point reconnect_by = start + std::min(options_.connect_timeout, options_.timeout);
    if (Status s = open(reconnect_by); !s) return s.with_context(context);
  }
  const Clock::time_point deadline =
      reply_wait.count() > 0 ? Clock::now() + reply_wait + kReplyGrace : Clock::now() + options_.timeout;
  auto lost = [&](const Status& s) -> Status {
    drop();
    if (s.code() == Status::Code::kTimeout) {
      const auto waited = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
      return Status::timeout(context + ": no reply after " + ms_text(waited));
    }
    return s.with_context(context);
  };
  if (Status s = net::write_all(fd_, request.data(), request.size(), deadline); !s) return lost(s);
  char head[4];
  if (Status s = net::read_exact(fd_, head, 4, deadline); !s) return lost(s);
  const uint32_t len = proto::read_be32(head);
  if (len == 0 || len > kMaxFrameBytes) {
    drop();
    return Status::internal(context + ": reply frame of " + std::to_string(len) + " bytes breaks the protocol");
  }
  std::string body(len, '\0');
  if (Status s = net::read_exact(fd_, body.data(), len, deadline); !s) return lost(s);
  const auto reply = static_cast<Reply>(static_cast<uint8_t>(body[0]));
  proto::Reader r(std::string_view(body).substr(1));
  switch (reply) {
    case Reply::kOk:
      return body;
    case Reply::kTimeout: {
      const std::string missing(r.str(kMaxFrameBytes));
      return Status::timeout(context + ": timed out after " + ms_text(reply_wait) + " (missing: " + missing + ")");
    }
    case Reply::kRefused:
      return Status::invalid_input(context + ": " + std::string(r.str(kMaxFrameBytes)));
    case Reply::kError: {
      r.u8();
      const std::string msg(r.str(kMaxFrameBytes));
      drop();
      return Status::internal(context + ": the server closed the connection: " + msg);
    }
  }
  drop();
  return Status::internal(context + ": unknown reply " + std::to_string(static_cast<int>(reply)));
}

Status RendezvousClient::set(const std::string& key, const std::string& value) {
  if (Status s = check_key(key); !s) return s.with_context("store set");
  if (value.size() > kMaxValueBytes) {
    return Status::invalid_input("store set " + quote(key) + ": value of " + std::to_string(value.size()) +
                                 " bytes is over the store's limit of " + std::to_string(kMaxValueBytes));
  }
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::kSet)).str(key).str(value);
  auto r = call("set", quote(key), w.frame(), Milliseconds(0));
  return r.status();
}

Result<std::string> RendezvousClient::get(const std::string& key) { return get(key, options_.timeout); }

Result<std::string> RendezvousClient::get(const std::string& key, Milliseconds wait) {
  if (Status s = check_key(key); !s) return s.with_context("store get");
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::kGet)).str(key).u32(clamp_ms(wait));
  auto r = call("get", quote(key), w.frame(), wait);
  if (!r.ok()) {
    if (wait.count() == 0 && r.status().code() == Status::Code::kTimeout) {
      return Status::not_found("store get " + quote(key) + " at " + address_ + ": no such key");
    }
    return r.status();
  }
  proto::Reader rd(std::string_view(r.value()).substr(1));
  const std::string_view value = rd.str(kMaxValueBytes);
  if (!rd.ok()) return Status::internal("store get " + quote(key) + " at " + address_ + ": malformed reply");
  return std::string(value);
}

Status RendezvousClient::wait(const std::vector<std::string>& keys) { return wait(keys, options_.timeout); }

Status RendezvousClient::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  if (Status s = check_keys(keys); !s) return s.with_context("store wait");
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::kWait)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.u32(clamp_ms(timeout));
  return call("wait", "for " + quote_keys(keys), w.frame(), timeout).status();
}

Result<int64_t> RendezvousClient::add(const std::string& key, int64_t delta) {
  if (Status s = check_key(key); !s) return s.with_context("store add");
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::kAdd)).str(key).i64(delta);
  auto r = call("add", "to " + quote(key), w.frame(), Milliseconds(0));
  if (!r.ok()) return r.status();
  proto::Reader rd(std::string_view(r.value()).substr(1));
  const int64_t v = rd.i64();
  if (!rd.ok()) return Status::internal("store add to " + quote(key) + " at " + address_ + ": malformed reply");
  return v;
}

Result<bool> RendezvousClient::remove(const std::string& key) {
  if (Status s = check_key(key); !s) return s.with_context("store delete");
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::kDelete)).str(key);
  auto r = call("delete", quote(key), w.frame(), Milliseconds(0));
  if (!r.ok()) return r.status();
  proto::Reader rd(std::string_view(r.value()).substr(1));
  const uint8_t existed = rd.u8();
  if (!rd.ok()) return Status::internal("store delete " + quote(key) + " at " + address_ + ": malformed reply");
  return existed != 0;
}

Result<bool> RendezvousClient::check(const std::vector<std::string>& keys) {
  if (Status s = check_keys(keys); !s) return s.with_context("store check");
  proto::Writer w;
  w.u8(static_cast<uint8_t>(Op::kCheck)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  auto r = call("check", "of " + quote_keys(keys), w.frame(), Milliseconds(0));
  if (!r.ok()) return r.status();
  proto::Reader rd(std::string_view(r.value()).substr(1));
  const uint8_t all = rd.u8();
  if (!rd.ok()) return Status::internal("store check at " + address_ + ": malformed reply");
  return all != 0;
}

}  // namespace stagecraft::comm
