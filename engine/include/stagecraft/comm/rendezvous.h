// The rendezvous store: a small TCP key-value service the launcher runs for one training run,
// and the client every worker uses to reach it (docs/ARCHITECTURE.md §6).
//
// Workers meet through it: gloo publishes each rank's transport addresses under a key, rank 0 of
// an NCCL group publishes the group's unique id, counters hand out generations. It is not a
// database: values live in memory for the life of the server, nothing is persisted.
//
// Protocol (version 1), both directions: frames of a 4-byte big-endian length and that many
// bytes of body. A body is an opcode byte and fields: u32/i64 big-endian, strings as a u32 length
// and bytes. The first request of a connection must be HELLO with the magic, the version and the
// run's token; anything else, a wrong token or a malformed frame gets one ERROR reply and the
// connection is closed. Requests are answered in order; a connection has one request in flight.
//
//   HELLO  magic "SCST", u16 version, token   -> OK
//   SET    key, value                          -> OK
//   GET    key, u32 wait_ms                    -> OK value | TIMEOUT (key absent after wait_ms)
//   WAIT   u32 n, n keys, u32 wait_ms          -> OK | TIMEOUT missing keys
//   ADD    key, i64 delta                      -> OK i64 new value (stored as decimal text)
//   DELETE key                                 -> OK u8 existed
//   CHECK  u32 n, n keys                       -> OK u8 all exist
//
// A reply starts with a code: OK, TIMEOUT (string: the missing keys), REFUSED (string: this
// request failed, e.g. the store is full; the connection stays), ERROR (a kind byte: protocol,
// token, version or busy, and a string; the server then closes the connection).
//
// Limits (kMax* below) bound every field; the server also bounds the bytes it stores, the
// connections it holds and how long a peer may take to authenticate or to finish a frame. A
// peer that breaks any of them is disconnected; the server never allocates more than one frame
// per connection on a peer's word and keeps serving everyone else.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stagecraft/core/status.h"

namespace stagecraft::comm {

using Milliseconds = std::chrono::milliseconds;

// Protocol limits, shared by server and client (the client refuses to send what the server
// would refuse to take).
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{16} << 20;  // a gloo address blob for 65k ranks
inline constexpr size_t kMaxKeysPerRequest = 4096;
inline constexpr size_t kMaxTokenBytes = 256;
inline constexpr size_t kMaxFrameBytes = kMaxValueBytes + 2 * kMaxKeyBytes + 64;
// Before HELLO succeeds a frame may be at most this long.
inline constexpr size_t kMaxHelloFrameBytes = 16 + kMaxTokenBytes;

struct RendezvousServerOptions {
  std::string host = "0.0.0.0";  // address to listen on; a name is resolved
  int port = 0;                   // 0: the system picks a free port; see RendezvousServer::port()
  std::string token;              // clients must present it; empty refuses to start
  size_t max_connections = 4096;  // further connections are closed at once
  size_t max_stored_bytes = size_t{1} << 30;  // keys + values; a SET beyond fails
  Milliseconds hello_timeout{10000};  // to send a valid HELLO after connecting
  Milliseconds frame_timeout{30000};  // to finish a frame once begun, or to read our reply
};

// Counters for tests and for the launcher's diagnostics.
struct RendezvousServerStats {
  size_t open_connections = 0;
  size_t accepted = 0;           // connections accepted in total
  size_t authenticated = 0;      // connections that passed HELLO
  size_t refused_token = 0;      // HELLO with a wrong token
  size_t protocol_errors = 0;    // malformed, oversize or unexpected frames
  size_t timed_out = 0;          // closed for hello_timeout or frame_timeout
  size_t over_capacity = 0;      // closed because max_connections were open
  size_t keys = 0;
  size_t stored_bytes = 0;
};

// Serves one run's keys on a background thread (one poll loop for all connections).
// Thread-safe: port(), stats() and stop() may be called from any thread.
class RendezvousServer {
 public:
  // Binds and listens, then starts serving. Fails (kInvalidInput) on an empty or oversize token,
  // (kIoError) when the address cannot be bound, naming it.
  static Result<std::unique_ptr<RendezvousServer>> start(const RendezvousServerOptions& options);
  ~RendezvousServer();  // stops and closes every connection
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const;                 // the port actually bound
  const std::string& host() const;  // as given in the options
  RendezvousServerStats stats() const;
  void stop();                      // idempotent; pending waits end with their connections

  struct Impl;

 private:
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct RendezvousClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  // connect() retries refused or unreachable addresses (the server may start after the
  // workers) until this runs out. A wrong token is not retried.
  Milliseconds connect_timeout{60000};
  // Default for every call; wait() and get() wait this long for absent keys unless given one.
  Milliseconds timeout{300000};
};

// One connection to the store. Every call returns within its timeout (plus a short grace for a
// reply in transit) with a Status whose message names the operation, the key and the address:
//   "store wait at 10.0.0.1:29500 for 'gloo/...' timed out after 5000 ms (missing: ...)"
// Codes: kTimeout (keys absent, or no reply in time), kUnavailable (connection lost, refused),
// kInvalidInput (a key, value or token over the limits), kNotFound (get of an absent key with
// a zero wait), kInternal (a reply that breaks the protocol).
// After an I/O error or a timeout the connection is dropped and the next call reconnects.
// Thread-safe: calls are serialized on the one connection, so a thread blocked in wait() holds
// up the others; threads that must rendezvous with each other need clients of their own.
class RendezvousClient {
 public:
  static Result<std::unique_ptr<RendezvousClient>> connect(const RendezvousClientOptions& options);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  Status set(const std::string& key, const std::string& value);
  // The value of `key`, waiting for it up to options.timeout.
  Result<std::string> get(const std::string& key);
  // The same with an explicit wait; 0 answers at once (kNotFound when absent).
  Result<std::string> get(const std::string& key, Milliseconds wait);
  // Blocks until every key exists (ok) or `timeout` passes (kTimeout naming the missing keys).
  Status wait(const std::vector<std::string>& keys);
  Status wait(const std::vector<std::string>& keys, Milliseconds timeout);
  // Adds `delta` to the counter at `key` (absent counts as 0) and returns the new value.
  Result<int64_t> add(const std::string& key, int64_t delta);
  // Deletes `key`; true when it existed.
  Result<bool> remove(const std::string& key);
  // True when every key exists, without waiting.
  Result<bool> check(const std::vector<std::string>& keys);

  // "host:port" of the server, as the messages name it.
  const std::string& address() const { return address_; }
  // The local IP address of the latest connection: an address of this machine that reaches
  // the server, and so a sensible default for peers to reach this process on.
  std::string local_address() const;
  const RendezvousClientOptions& options() const { return options_; }

 private:
  explicit RendezvousClient(RendezvousClientOptions options);
  Status open(std::chrono::steady_clock::time_point deadline);
  void drop();
  // One request and its reply; `reply_wait` is how long the server may take on purpose (a wait).
  Result<std::string> call(const char* op, const std::string& what, const std::string& request,
                           Milliseconds reply_wait);

  RendezvousClientOptions options_;
  std::string address_;
  mutable std::mutex mu_;  // the connection: one call at a time
  int fd_ = -1;
  mutable std::mutex local_mu_;  // local_address_, readable while a call blocks
  std::string local_address_;
};

}  // namespace stagecraft::comm
