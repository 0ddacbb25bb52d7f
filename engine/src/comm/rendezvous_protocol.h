// The store's wire format (documented in stagecraft/comm/rendezvous.h): opcodes, reply codes, and a
// writer and a bounds-checked reader for frame bodies. Private to comm/; header-only so that
// server and client share one definition.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace stagecraft::comm::proto {

inline constexpr char kMagic[4] = {'S', 'C', 'S', 'T'};
inline constexpr uint16_t kVersion = 1;

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kAdd = 5,
  kDelete = 6,
  kCheck = 7,
};

enum class Reply : uint8_t {
  kOk = 0,
  kTimeout = 1,  // body: a string naming the missing keys
  kRefused = 2,  // body: a string; this request failed, the connection stays (store full, ...)
  kError = 3,    // body: an ErrorKind byte and a string; the server closes the connection
};

enum class ErrorKind : uint8_t {
  kProtocol = 0,  // malformed, oversize or unexpected frame
  kToken = 1,     // HELLO with a wrong token
  kVersion = 2,   // HELLO with another magic or version
  kBusy = 3,      // the server holds its maximum of connections; worth retrying
};

// Appends big-endian fields to a frame body.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& u16(uint16_t v) { return put(v, 2); }
  Writer& u32(uint32_t v) { return put(v, 4); }
  Writer& i64(int64_t v) { return put(static_cast<uint64_t>(v), 8); }
  Writer& str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  Writer& raw(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  // The body with its 4-byte length in front: a complete frame.
  std::string frame() const {
    std::string f;
    f.reserve(4 + out_.size());
    const uint32_t n = static_cast<uint32_t>(out_.size());
    for (int i = 3; i >= 0; --i) f.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    f += out_;
    return f;
  }
  const std::string& body() const { return out_; }

 private:
  Writer& put(uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

// Reads fields from a frame body. Every read checks the bytes left; after a failed read ok()
// is false and further reads return zeros. Strings are views into the body.
class Reader {
 public:
  explicit Reader(std::string_view body) : in_(body) {}

  bool ok() const { return ok_; }
  bool at_end() const { return in_.empty(); }

  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  int64_t i64() { return static_cast<int64_t>(get(8)); }
  // A length-prefixed string of at most `max` bytes.
  std::string_view str(size_t max) {
    const uint32_t n = u32();
    if (!ok_ || n > max || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string_view s = in_.substr(0, n);
    in_.remove_prefix(n);
    return s;
  }
  std::string_view raw(size_t n) {
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string_view s = in_.substr(0, n);
    in_.remove_prefix(n);
    return s;
  }

 private:
  uint64_t get(int bytes) {
    if (!ok_ || in_.size() < static_cast<size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(in_[i]);
    in_.remove_prefix(bytes);
    return v;
  }
  std::string_view in_;
  bool ok_ = true;
};

inline uint32_t read_be32(const char* p) {
  return (uint32_t{static_cast<uint8_t>(p[0])} << 24) | (uint32_t{static_cast<uint8_t>(p[1])} << 16) |
         (uint32_t{static_cast<uint8_t>(p[2])} << 8) | uint32_t{static_cast<uint8_t>(p[3])};
}

}  // namespace stagecraft::comm::proto
