// Benchmarks whose ranks are processes: this program started P times as the ranks of one world
// (a rendezvous on 127.0.0.1, launch/worker_env.h's variables), rank 0's output relayed as it
// comes, and any rank's failure ending the benchmark with that rank's error output; each copy
// joins the world's communicator with join_world.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stagecraft/comm/communicator.h"
#include "stagecraft/comm/gloo_communicator.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/worker_env.h"

namespace stagecraft::bench {

[[noreturn]] inline void world_die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

inline std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) world_die("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

// A rank of the world run_world started: its environment, the rendezvous store, the Gloo device
// and the whole world's communicator (Gloo over TCP, 120 s timeout).
struct WorldRank {
  launch::WorkerEnv env;
  std::unique_ptr<comm::RendezvousClient> store;
  std::shared_ptr<comm::GlooDevice> device;
  std::unique_ptr<comm::Communicator> comm;
};

// Joins the world from a copy run_world started; any failure ends the program with
// "<program>: <error>".
inline WorldRank join_world(const std::string& program) {
  auto die = [&](const std::string& what) { world_die(program + ": " + what); };
  WorldRank w;
  auto env = launch::read_worker_env();
  if (!env.ok()) die(env.status().message());
  w.env = env.value();
  comm::RendezvousClientOptions so;
  so.host = w.env.master_addr;
  so.port = w.env.master_port;
  so.token = w.env.token;
  auto store = comm::RendezvousClient::connect(so);
  if (!store.ok()) die(store.status().message());
  w.store = std::move(store).value();
  auto device = comm::GlooDevice::create(comm::gloo_device_options_from_env(*w.store));
  if (!device.ok()) die(device.status().message());
  w.device = device.value();
  std::vector<int> world(static_cast<size_t>(w.env.world_size));
  for (int r = 0; r < w.env.world_size; ++r) world[static_cast<size_t>(r)] = r;
  comm::GlooOptions go;
  go.name = "world";
  go.timeout = std::chrono::seconds(120);
  auto c = comm::create_gloo_communicator(*w.store, w.device, w.env.rank, world, go);
  if (!c.ok()) die(c.status().message());
  w.comm = std::move(c).value();
  return w;
}

// Runs P copies of this program, each with `env` added to its environment (the worker's flag
// among them), and relays rank 0's standard output; exits on any rank's failure.
inline void run_world(int P, const std::map<std::string, std::string>& env) {
  comm::RendezvousServerOptions so;
  so.host = "127.0.0.1";
  so.token = launch::random_token();
  auto server = comm::RendezvousServer::start(so);
  if (!server.ok()) world_die(server.status().message());
  std::vector<std::unique_ptr<launch::LocalProcess>> procs;
  for (int r = 0; r < P; ++r) {
    launch::WorkerEnv e;
    e.rank = r;
    e.local_rank = r;
    e.world_size = P;
    e.local_world_size = P;
    e.master_addr = "127.0.0.1";
    e.master_port = server.value()->port();
    e.token = so.token;
    e.threads = 1;
    launch::ProcessSpec spec;
    spec.argv = {self_exe()};
    spec.env = launch::to_environment(e);
    for (const auto& [k, v] : env) spec.env[k] = v;
    spec.rank = r;
    auto p = launch::LocalProcess::start(spec);
    if (!p.ok()) world_die(p.status().message());
    procs.push_back(std::move(p).value());
  }
  std::vector<std::string> out(static_cast<size_t>(P)), err(static_cast<size_t>(P));
  std::vector<bool> done(static_cast<size_t>(P), false);
  size_t printed = 0;
  for (int left = P; left > 0;) {
    for (size_t r = 0; r < static_cast<size_t>(P); ++r) {
      if (done[r]) continue;
      procs[r]->read_available(out[r], err[r]);
      if (auto e = procs[r]->poll_exit()) {
        while (procs[r]->read_available(out[r], err[r])) {
        }
        done[r] = true;
        --left;
        if (!e->ok()) {
          std::fprintf(stderr, "rank %zu %s\n%s", r, e->describe().c_str(), err[r].c_str());
          for (auto& q : procs) q->terminate();
          std::exit(1);
        }
      }
    }
    const size_t nl = out[0].rfind('\n');
    if (nl != std::string::npos && nl + 1 > printed) {
      std::fwrite(out[0].data() + printed, 1, nl + 1 - printed, stdout);
      std::fflush(stdout);
      printed = nl + 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fwrite(out[0].data() + printed, 1, out[0].size() - printed, stdout);
}

}  // namespace stagecraft::bench
