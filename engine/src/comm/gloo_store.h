// GlooStore: gloo::rendezvous::Store over a RendezvousClient, with every key under a prefix, so that
// Gloo contexts rendezvous through the run's store. Private to comm/.
//
// Gloo's interface reports failure by throwing; this adapter throws gloo::IoException with the
// client's message and keeps the Status, so the code that catches it (gloo_communicator.cpp)
// returns the original error and code (kTimeout stays kTimeout). Waits use the adapter's own
// timeout, not the one Gloo passes (Gloo passes its context timeout, which the communicator
// shortens during the connect so that a pair's connect stays within the same budget).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/core/status.h"

namespace stagecraft::comm {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(RendezvousClient& client, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // The error behind the last exception this adapter threw; ok when it threw none.
  const Status& error() const { return error_; }
  std::string full_key(const std::string& key) const { return prefix_ + key; }

 private:
  [[noreturn]] void raise(Status status);

  RendezvousClient& client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  Status error_;
};

}  // namespace stagecraft::comm
