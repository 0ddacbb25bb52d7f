// Status and Result<T>: how every engine call reports failure.
//
// No exception crosses the engine's public API. A call that can fail returns a Status (no value)
// or a Result<T> (a value or an error), shaped like std::expected. The message is one line a
// person can act on: it names what to fix ("parallel.tp=3: 8 GPUs are not divisible by ...").
// The code groups errors so that front ends can map them, e.g. the CLI's exit status 2 for
// kInvalidInput and 1 for everything else.
//
// Naming as leveldb's: Status::OK() makes a success, ok() asks whether it is one. Both types are
// [[nodiscard]]: dropping one unread is a compiler warning; a call whose failure truly does not
// matter says so with `(void)` and a comment.
//
// Programmer errors (calling value() on an error) are asserts, not Statuses.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace stagecraft {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidInput,  // a config, file, option or value that the person must fix
    kNotFound,      // a file, host or key that does not exist
    kIoError,       // the operating system refused a read or write
    kUnavailable,   // a peer, host or service cannot be reached right now
    kTimeout,       // a wait ran out of time
    kInternal,      // a broken invariant inside the engine
  };

  Status() = default;  // ok

  static Status OK() { return Status(); }
  static Status invalid_input(std::string msg) { return Status(Code::kInvalidInput, std::move(msg)); }
  static Status not_found(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status io_error(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status timeout(std::string msg) { return Status(Code::kTimeout, std::move(msg)); }
  static Status internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", for adding where an error happened as it travels up.
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

// A value of T or a non-ok Status. Construct from either; test with ok() before value().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}  // NOLINT: implicit by design, like expected
  Result(Status status) : data_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(data_).ok() && "Result built from an ok Status holds no value");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  const T& value() const& {
    assert(ok());
    return std::get<T>(data_);
  }
  T& value() & {
    assert(ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(data_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // The error; an ok Status when a value is held.
  Status status() const { return ok() ? Status::OK() : std::get<Status>(data_); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace stagecraft
