// A rendezvous store on 127.0.0.1 with one client connected to it, for suites that need a store
// (a communicator's creation, the Gloo device's address) without a launcher.
#pragma once

#include <memory>

#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/core/status.h"

namespace stagecraft::testing {

struct LocalStore {
  std::unique_ptr<comm::RendezvousServer> server;
  std::unique_ptr<comm::RendezvousClient> client;  // declared after the server: closed first
};

inline Result<LocalStore> start_local_store() {
  comm::RendezvousServerOptions so;
  so.host = "127.0.0.1";
  so.token = "t";
  auto server = comm::RendezvousServer::start(so);
  if (!server.ok()) return server.status();
  comm::RendezvousClientOptions co;
  co.port = server.value()->port();
  co.token = "t";
  auto client = comm::RendezvousClient::connect(co);
  if (!client.ok()) return client.status();
  return LocalStore{std::move(server).value(), std::move(client).value()};
}

}  // namespace stagecraft::testing
