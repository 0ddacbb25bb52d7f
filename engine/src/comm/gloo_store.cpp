// GlooStore: gloo::rendezvous::Store over RendezvousClient (see gloo_store.h).
#include "comm/gloo_store.h"

#include <gloo/common/error.h>

namespace stagecraft::comm {

GlooStore::GlooStore(RendezvousClient& client, std::string prefix, std::chrono::milliseconds timeout)
    : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStore::raise(Status status) {
  error_ = std::move(status);
  throw gloo::IoException(error_.message());
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  if (Status s = client_.set(full_key(key), std::string(data.begin(), data.end())); !s) raise(s);
}

std::vector<char> GlooStore::get(const std::string& key) {
  auto v = client_.get(full_key(key), timeout_);
  if (!v.ok()) raise(v.status());
  return std::vector<char>(v->begin(), v->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& /*gloo's*/) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(full_key(k));
  if (Status s = client_.wait(full, timeout_); !s) raise(s);
}

}  // namespace stagecraft::comm
