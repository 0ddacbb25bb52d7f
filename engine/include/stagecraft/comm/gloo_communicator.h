// The Gloo backend of Communicator: CPU collectives over Gloo's TCP transport, rendezvousing
// through the run's store (docs/ARCHITECTURE.md §6).
//
// One GlooDevice per process (it owns Gloo's I/O thread and is shared by every group's
// communicator); one communicator per group the rank belongs to. Creation publishes this
// rank's addresses under a key prefix of its own for the group, waits for every member's, and
// connects to each: the keys are "gloo/<size>-<hash of the ranks>/<generation>/<group rank>",
// the generation counting how often that group was created so far (so a group may be created
// again; after a creation failed on some member the generations are out of step, and the run
// should fail, as the supervisor makes it). Every operation, the rendezvous included, ends
// within the timeout. Creation may return on one member while another is still connecting, so
// a member that leaves right after creating can fail the others' creation.
//
// Usage, in a worker (error handling shortened):
//   auto env = launch::read_worker_env().value();
//   auto store = comm::RendezvousClient::connect({env.master_addr, env.master_port, env.token}).value();
//   auto device = comm::GlooDevice::create(comm::gloo_device_options_from_env(*store)).value();
//   comm::GlooOptions opt{.timeout = std::chrono::seconds(hang_timeout_s)};
//   auto world = comm::create_gloo_communicator(*store, device, env.rank, all_ranks, opt).value();
//   // or every group of the rank at once (process_groups.h):
//   auto groups = comm::build_process_groups(topo, env.rank, tied,
//                                            comm::gloo_communicator_factory(*store, device, env.rank, opt)).value();
//   std::vector<float> grad(n);
//   if (Status s = groups.tp().all_reduce(grad); !s) return fail(s);  // "all_reduce of ... on tp[2,3] ..."
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/comm/communicator.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/core/status.h"

namespace stagecraft::comm {

struct GlooDeviceOptions {
  std::string iface;     // network interface to bind, e.g. "eth0"; wins over hostname
  std::string hostname;  // address or name of this machine that the peers can reach
};

// Environment variables that choose the device's address, first found wins:
//   STAGECRAFT_GLOO_IFNAME, GLOO_SOCKET_IFNAME (PyTorch's name)  -> iface
//   STAGECRAFT_GLOO_HOSTNAME                                     -> hostname
// With none set: the local address of the store connection (an address of this machine that
// reaches the store, and so, on one network, the peers). `get` defaults to std::getenv.
GlooDeviceOptions gloo_device_options_from_env(const RendezvousClient& store,
                                               const std::function<const char*(const char*)>& get = nullptr);

// Gloo's TCP device: an I/O thread and the address every pair of this process listens on.
// Opaque so that the engine's users need no Gloo headers. Thread-safe.
// Side effect: the first create() sets SIGPIPE to ignored when it has its default action
// (Gloo writes with writev(2), and a peer dying mid-transfer would otherwise kill this process;
// Python-based stacks get the same from the interpreter). Children started later inherit it.
class GlooDevice {
 public:
  // kInvalidInput when neither iface nor hostname is set; kUnavailable when the interface or
  // name does not resolve to an address of this machine (naming it).
  static Result<std::shared_ptr<GlooDevice>> create(const GlooDeviceOptions& options);
  ~GlooDevice();
  const std::string& description() const;  // "tcp, hostname=10.0.0.1" as Gloo describes it

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit GlooDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct GlooOptions {
  std::string name;  // how errors name the group, e.g. "tp"; the ranks are appended: "tp[2,3]"
  // Bounds the rendezvous (waiting for the members' addresses, connecting) and every operation.
  // Set it from the run's hang timeout.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Creates this rank's communicator for `ranks` (global ranks; order defines group ranks).
// Blocks until every member has joined, or fails: kInvalidInput (a malformed group, or
// `global_rank` not in it), kTimeout naming the members that did not arrive, kUnavailable when a
// member cannot be connected to. A group of one needs no store traffic.
// The store is used only during this call; it may be shared with other callers (see RendezvousClient).
Result<std::unique_ptr<Communicator>> create_gloo_communicator(RendezvousClient& store,
                                                               const std::shared_ptr<GlooDevice>& device,
                                                               int global_rank, const std::vector<int>& ranks,
                                                               const GlooOptions& options = {});

// The CommunicatorFactory of `global_rank` over Gloo, for build_process_groups: each group is
// created with create_gloo_communicator and `options`, its name set to the group's label. The
// store must outlive the factory.
CommunicatorFactory gloo_communicator_factory(RendezvousClient& store, std::shared_ptr<GlooDevice> device, int global_rank,
                                              GlooOptions options = {});

}  // namespace stagecraft::comm
