// The NCCL backend of Communicator: collectives and point-to-point transfers of GPU memory over
// NCCL, ordered on the stream of the rank's CUDA device (docs/ARCHITECTURE.md §6). Built only
// with STAGECRAFT_WITH_CUDA; a build without it answers every call here with one line saying so.
//
// What it is: one NCCL communicator per group (world, tp, dp, pp, embedding), each made by its
// own ncclCommInitRankConfig. Group rank 0 makes the NCCL unique id and publishes it in the run's
// rendezvous store under "nccl/<group_key(ranks)>/<generation>/id"; the other members read it
// there (generations count creations of the same group, as Gloo's keys do). A group of one needs
// no NCCL and no store traffic: its reduce_scatter and all_gather are device copies.
//
// Buffers are device pointers of the GPU `device` drives (device_memory() is true). Every call
// enqueues its NCCL work on the device's stream, after the kernels issued before it, and waits
// for it to finish before it returns, polling the stream and ncclCommGetAsyncError: so a call
// either completes, or ends with a Status within the timeout (the communicators are nonblocking,
// ncclConfig_t blocking = 0), and the host may use the result at once. An error or a timeout
// aborts the NCCL communicator (ncclCommAbort), names the operation, the group and the NCCL
// error, and breaks the communicator: every later call returns that first error.
//
// Point-to-point: NCCL matches the messages between two ranks by order, not by tag (the tag only
// names the message in errors), and a send blocks the GPU until the peer receives. isend()
// therefore only queues its send; the queued sends are issued together with the next recv (one
// ncclGroupStart/End), or by wait_sends(), send() or send_recv(), so that two neighbours that
// both send before they receive do not deadlock, as with Gloo. The buffer of a queued send must
// stay untouched until wait_sends() (Communicator's contract).
//
// kAvg is NCCL's ncclAvg (the sum scaled by 1 / size, within rounding of sum / size).
//
// NCCL does not run two ranks of one communicator on the same GPU: ranks that share a GPU use
// comm gloo (the worker refuses nccl there with one line).
//
// Thread safety: as Communicator; the device must outlive every communicator made on it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "stagecraft/comm/communicator.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/core/status.h"
#include "stagecraft/runtime/device.h"

namespace stagecraft::comm {

// Whether this build has NCCL (it comes with the CUDA backend).
bool nccl_built();

struct NcclOptions {
  std::string name;  // how errors name the group, e.g. "tp"; the ranks are appended: "tp[2,3]"
  // Bounds the creation (the id in the store, every member's init) and every operation, from
  // its start to its completion on the GPU. Set it from the run's hang timeout.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Creates this rank's communicator for `ranks` (global ranks; order defines group ranks) on
// `device`, a CUDA device (runtime::make_device). Blocks until every member has joined, or fails:
// kInvalidInput (a malformed group, `global_rank` not in it, a device that is not a GPU, or a
// build without NCCL), kTimeout (the id or a member did not arrive in time; the NCCL
// communicator is aborted), kUnavailable or kInternal (NCCL or CUDA failed, naming the call).
// The store is used only during this call.
Result<std::unique_ptr<Communicator>> create_nccl_communicator(RendezvousClient& store, runtime::Device& device,
                                                               int global_rank, const std::vector<int>& ranks,
                                                               const NcclOptions& options = {});

// The CommunicatorFactory of `global_rank` over NCCL, for build_process_groups: each group is
// created with create_nccl_communicator and `options`, its name set to the group's label. The
// store and the device must outlive the factory, the device also the communicators.
CommunicatorFactory nccl_communicator_factory(RendezvousClient& store, runtime::Device& device, int global_rank,
                                              NcclOptions options = {});

}  // namespace stagecraft::comm
