// NcclCommunicator: Communicator over NCCL on one GPU's stream (see stagecraft/comm/nccl_communicator.h).
// Compiled only with STAGECRAFT_WITH_CUDA (nccl_unavailable.cpp stands in otherwise).
//
// Every NCCL and CUDA call here goes through NCCL_CALL / CUDA_CALL, which turn a failure into a
// Status carrying the call, its file:line and NCCL's last error text. The communicators are
// nonblocking (ncclConfig_t blocking = 0): a call may return ncclInProgress, and then
// ncclCommGetAsyncError is polled until the call has finished enqueueing (NCCL's documented way
// for nonblocking communicators). Then an event recorded behind the work on the stream is polled
// until the GPU has finished it, with ncclCommGetAsyncError checked in between (a peer that
// failed, a network error) and the deadline too; either ends in ncclCommAbort.
#include "stagecraft/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace stagecraft::comm {

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// The most a communicator's destructor waits for ncclCommFinalize.
constexpr Millis kTeardown{10000};

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string where(const char* file, int line) { return std::string(" [") + base_name(file) + ":" + std::to_string(line) + "]"; }

ncclDataType_t nccl_type(DType t) { return t == DType::kF32 ? ncclFloat32 : ncclFloat64; }

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kSum: break;
  }
  return ncclSum;
}

// NCCL's error, with its last error text where it has one.
std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

// A failed call as a Status: a peer or the network (remote, system errors) is kUnavailable,
// anything else kInternal.
Status nccl_status(ncclResult_t r, const std::string& msg) {
  return r == ncclRemoteError || r == ncclSystemError ? Status::unavailable(msg) : Status::internal(msg);
}

// Waits a little between polls: spins first (collectives of small tensors take microseconds),
// then sleeps, so a long wait does not hold a core.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  int polls_ = 0;
};

// Polls a nonblocking communicator until its pending call has finished (ncclSuccess), failed, or
// the deadline passed (kTimeout; the caller aborts).
Status wait_ready(ncclComm_t comm, Clock::time_point deadline, const std::string& what, Millis timeout) {
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return nccl_status(r, what + ": ncclCommGetAsyncError: " + nccl_text(r, comm) + where(__FILE__, __LINE__));
    if (state == ncclSuccess) return Status::OK();
    if (state != ncclInProgress) return nccl_status(state, what + ": " + nccl_text(state, comm) + where(__FILE__, __LINE__));
    if (Clock::now() >= deadline) {
      return Status::timeout(what + ": timed out after " + std::to_string(timeout.count()) + " ms" + where(__FILE__, __LINE__));
    }
    backoff.pause();
  }
}

class NcclCommunicator final : public Communicator {
 public:
  // `comm` is null for a group of one. `event` is an event of the device's GPU.
  NcclCommunicator(std::string name, std::vector<int> ranks, int rank, runtime::Device& device, ncclComm_t comm,
                   cudaEvent_t event, Millis timeout)
      : Communicator(std::move(name), std::move(ranks), rank),
        device_(device),
        stream_(static_cast<cudaStream_t>(device.native_stream())),
        comm_(comm),
        event_(event),
        timeout_(timeout) {}

  ~NcclCommunicator() override {
    if (comm_) {
      // Finalize flushes what the proxy may still be sending; a peer that is gone must not hold
      // up teardown (a failing rank exits through here), so it gets kTeardown at most and then
      // the communicator is aborted.
      bool clean = broken_.ok() && pending_.empty() && side_pending_ == 0;
      if (clean) {
        const Millis limit = std::min(timeout_, kTeardown);
        const ncclResult_t r = ncclCommFinalize(comm_);
        clean = (r == ncclSuccess || r == ncclInProgress) && wait_ready(comm_, Clock::now() + limit, "finalize", limit).ok();
      }
      if (clean) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (event_) cudaEventDestroy(event_);
    if (issued_) cudaEventDestroy(issued_);
    if (side_done_) cudaEventDestroy(side_done_);
    if (side_stream_) cudaStreamDestroy(side_stream_);
    if (scratch_) device_.release(scratch_);
  }

  bool device_memory() const override { return true; }

 private:
#define NCCL_CALL(what, call)                                                                          \
  do {                                                                                                 \
    const ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                                   \
      return fail(nccl_status(r_, (what) + ": " #call ": " + nccl_text(r_, comm_) + where(__FILE__, __LINE__))); \
    }                                                                                                  \
  } while (0)
#define CUDA_CALL(what, call)                                                                          \
  do {                                                                                                 \
    const cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                           \
      return fail(Status::internal((what) + ": " #call ": " + cudaGetErrorString(e_) + where(__FILE__, __LINE__))); \
    }                                                                                                  \
  } while (0)

  // Records the first failure, aborts the NCCL communicator (its state is unknown after an
  // error or a timeout; an abort also ends this rank's part of any collective still running)
  // and returns the failure.
  Status fail(Status s) {
    if (broken_.ok()) {
      broken_ = s;
      if (comm_) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
      }
      pending_.clear();
      side_pending_ = 0;
    }
    return s;
  }

  Status usable(const std::string& what) const {
    if (broken_.ok()) return Status::OK();
    return Status(broken_).with_context(what + ": unusable after an earlier failure");
  }

  // After the NCCL calls of one operation were issued: waits until they are enqueued, then
  // until the GPU has run them, within the timeout from `start`.
  Status finish(const std::string& what, Clock::time_point start) {
    const Clock::time_point deadline = start + timeout_;
    if (Status s = wait_ready(comm_, deadline, what, timeout_); !s) return fail(s);
    CUDA_CALL(what, cudaEventRecord(event_, stream_));
    return await(event_, what, deadline);
  }

  // Polls `event` until the GPU has passed it, checking NCCL's asynchronous error and the
  // deadline in between; either failure aborts.
  Status await(cudaEvent_t event, const std::string& what, Clock::time_point deadline) {
    Backoff backoff;
    for (;;) {
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return Status::OK();
      if (e != cudaErrorNotReady) {
        return fail(Status::internal(what + ": cudaEventQuery: " + cudaGetErrorString(e) + where(__FILE__, __LINE__)));
      }
      // "Not ready" is an answer, not a failure: keep it out of this thread's last error, where
      // the device's launch checks (cuda_context.h) would read it as one.
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      ncclResult_t state = ncclSuccess;
      NCCL_CALL(what, ncclCommGetAsyncError(comm_, &state));
      if (state != ncclSuccess && state != ncclInProgress) {
        return fail(nccl_status(state, what + ": " + nccl_text(state, comm_) + where(__FILE__, __LINE__)));
      }
      if (Clock::now() >= deadline) {
        return fail(Status::timeout(what + ": timed out after " + std::to_string(timeout_.count()) +
                                    " ms (a member did not take part, or the GPU did not finish); NCCL communicator aborted" +
                                    where(__FILE__, __LINE__)));
      }
      backoff.pause();
    }
  }

  // Background all-reduces run on a second stream of the GPU (made at the first), each ordered
  // after everything issued on the device's stream so far (an event recorded there, waited for
  // on the second stream), so the gradients a backward kernel wrote are final when NCCL reads
  // them while the device's stream goes on with the next layer.
  Status do_all_reduce_async(Buffer data, ReduceOp op) override {
    const std::string what = describe("all_reduce_async", data.count, data.dtype);
    return on_side_stream(what, [&] {
      return ncclAllReduce(data.data, data.data, data.count, nccl_type(data.dtype), nccl_op(op), comm_, side_stream_);
    });
  }
  Status do_reduce_scatter_async(ConstBuffer in, Buffer out, ReduceOp op) override {
    const std::string what = describe("reduce_scatter_async", out.count, out.dtype);
    return on_side_stream(what, [&] {
      return ncclReduceScatter(in.data, out.data, out.count, nccl_type(out.dtype), nccl_op(op), comm_, side_stream_);
    });
  }
  Status do_all_gather_async(ConstBuffer in, Buffer out) override {
    const std::string what = describe("all_gather_async", in.count, in.dtype);
    return on_side_stream(what, [&] { return ncclAllGather(in.data, out.data, in.count, nccl_type(in.dtype), comm_, side_stream_); });
  }
  // Enqueues `call` (an NCCL collective on side_stream_) after everything issued on the device's
  // stream so far.
  template <typename Call>
  Status on_side_stream(const std::string& what, Call&& call) {
    if (Status s = usable(what); !s) return s;
    if (!side_stream_) {
      CUDA_CALL(what, cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
      CUDA_CALL(what, cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming));
      CUDA_CALL(what, cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
    }
    const Clock::time_point start = Clock::now();
    CUDA_CALL(what, cudaEventRecord(issued_, stream_));
    CUDA_CALL(what, cudaStreamWaitEvent(side_stream_, issued_, 0));
    NCCL_CALL(what, call());
    if (Status s = wait_ready(comm_, start + timeout_, what, timeout_); !s) return fail(s);
    ++side_pending_;
    return Status::OK();
  }

  Status do_wait_async() override {
    const std::string what = "waiting for " + std::to_string(side_pending_) + " background collective(s) on " + name();
    if (Status s = usable(what); !s) return s;
    if (side_pending_ == 0) return Status::OK();
    CUDA_CALL(what, cudaEventRecord(side_done_, side_stream_));
    if (Status s = await(side_done_, what, Clock::now() + timeout_); !s) return s;
    side_pending_ = 0;
    return Status::OK();
  }

  Status do_all_reduce(Buffer data, ReduceOp op) override {
    const std::string what = describe("all_reduce", data.count, data.dtype);
    if (Status s = usable(what); !s) return s;
    const Clock::time_point start = Clock::now();
    NCCL_CALL(what, ncclAllReduce(data.data, data.data, data.count, nccl_type(data.dtype), nccl_op(op), comm_, stream_));
    return finish(what, start);
  }

  Status do_reduce_scatter(ConstBuffer in, Buffer out, ReduceOp op) override {
    const std::string what = describe("reduce_scatter", out.count, out.dtype);
    if (Status s = usable(what); !s) return s;
    const Clock::time_point start = Clock::now();
    NCCL_CALL(what, ncclReduceScatter(in.data, out.data, out.count, nccl_type(out.dtype), nccl_op(op), comm_, stream_));
    return finish(what, start);
  }

  Status do_all_gather(ConstBuffer in, Buffer out) override {
    const std::string what = describe("all_gather", in.count, in.dtype);
    if (Status s = usable(what); !s) return s;
    const Clock::time_point start = Clock::now();
    NCCL_CALL(what, ncclAllGather(in.data, out.data, in.count, nccl_type(in.dtype), comm_, stream_));
    return finish(what, start);
  }

  Status do_broadcast(Buffer data, int root) override {
    const std::string what = describe("broadcast", data.count, data.dtype) + " from group rank " + std::to_string(root);
    if (Status s = usable(what); !s) return s;
    const Clock::time_point start = Clock::now();
    NCCL_CALL(what, ncclBroadcast(data.data, data.data, data.count, nccl_type(data.dtype), root, comm_, stream_));
    return finish(what, start);
  }

  // Equal blocks to and from every rank: one NCCL group of a send and a recv per peer (and the
  // queued sends, which NCCL would otherwise hold until the next recv), and this rank's own block
  // copied on the stream.
  Status do_all_to_all(ConstBuffer in, Buffer out) override {
    const std::string what = describe("all_to_all", in.count, in.dtype);
    if (Status s = usable(what); !s) return s;
    const size_t n = in.count / static_cast<size_t>(size()), bytes = n * size_of(in.dtype);
    const Clock::time_point start = Clock::now();
    CUDA_CALL(what, cudaMemcpyAsync(static_cast<char*>(out.data) + bytes * static_cast<size_t>(rank()),
                                    static_cast<const char*>(in.data) + bytes * static_cast<size_t>(rank()), bytes,
                                    cudaMemcpyDeviceToDevice, stream_));
    return nccl_group(what, start, [&](auto& issue) {
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) continue;
        issue(ncclSend(static_cast<const char*>(in.data) + bytes * static_cast<size_t>(r), n, nccl_type(in.dtype), r, comm_, stream_));
        issue(ncclRecv(static_cast<char*>(out.data) + bytes * static_cast<size_t>(r), n, nccl_type(in.dtype), r, comm_, stream_));
      }
    });
  }

  // A count per rank: as do_all_to_all, each peer's block at the offset of the counts before it.
  Status do_all_to_all_v(ConstBuffer in, std::span<const size_t> send_counts, Buffer out, std::span<const size_t> recv_counts) override {
    const std::string what = describe("all_to_all_v", in.count, in.dtype);
    if (Status s = usable(what); !s) return s;
    const size_t el = size_of(in.dtype);
    std::vector<size_t> in_at(static_cast<size_t>(size()), 0), out_at(static_cast<size_t>(size()), 0);
    for (int r = 1; r < size(); ++r) {
      in_at[r] = in_at[r - 1] + send_counts[r - 1];
      out_at[r] = out_at[r - 1] + recv_counts[r - 1];
    }
    const Clock::time_point start = Clock::now();
    const size_t me = static_cast<size_t>(rank());
    if (send_counts[me] > 0) {
      CUDA_CALL(what, cudaMemcpyAsync(static_cast<char*>(out.data) + out_at[me] * el, static_cast<const char*>(in.data) + in_at[me] * el,
                                      send_counts[me] * el, cudaMemcpyDeviceToDevice, stream_));
    }
    return nccl_group(what, start, [&](auto& issue) {
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) continue;
        if (send_counts[r] > 0) {
          issue(ncclSend(static_cast<const char*>(in.data) + in_at[r] * el, send_counts[r], nccl_type(in.dtype), r, comm_, stream_));
        }
        if (recv_counts[r] > 0) {
          issue(ncclRecv(static_cast<char*>(out.data) + out_at[r] * el, recv_counts[r], nccl_type(in.dtype), r, comm_, stream_));
        }
      }
    });
  }

  // NCCL has no barrier: an all-reduce of one float in a scratch buffer of the device.
  Status do_barrier() override {
    const std::string what = describe("barrier", 0, DType::kF32);
    if (Status s = usable(what); !s) return s;
    if (!scratch_) {
      auto p = device_.allocate(sizeof(float));
      if (!p.ok()) return p.status().with_context(what);
      scratch_ = p.value();
      CUDA_CALL(what, cudaMemsetAsync(scratch_, 0, sizeof(float), stream_));
    }
    const Clock::time_point start = Clock::now();
    NCCL_CALL(what, ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
    return finish(what, start);
  }

  // A group of one: a copy on the device's stream, ordered like the rest.
  Status do_copy(void* dst, const void* src, size_t bytes) override {
    const std::string what = name() + ": local copy of " + std::to_string(bytes) + " bytes";
    if (Status s = usable(what); !s) return s;
    if (dst == src || bytes == 0) return Status::OK();
    CUDA_CALL(what, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    return Status::OK();
  }

  static std::string tag_text(uint32_t tag) { return tag == 0 ? "" : " (tag " + std::to_string(tag) + ")"; }

  struct PendingSend {
    ConstBuffer data;
    int peer;
  };

  // One NCCL group of every queued send (which NCCL would otherwise hold until the next recv) and
  // what `add` issues through the `issue` it is given; closed whatever happened inside it, so
  // NCCL's group state stays balanced, and failing with the first error.
  template <typename Add>
  Status nccl_group(const std::string& what, Clock::time_point start, Add add) {
    NCCL_CALL(what, ncclGroupStart());
    ncclResult_t first = ncclSuccess;
    auto issue = [&](ncclResult_t r) {
      if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
    };
    for (const PendingSend& p : pending_) issue(ncclSend(p.data.data, p.data.count, nccl_type(p.data.dtype), p.peer, comm_, stream_));
    add(issue);
    const ncclResult_t end = ncclGroupEnd();
    pending_.clear();
    if (first != ncclSuccess) {
      return fail(nccl_status(first, what + ": ncclSend/ncclRecv: " + nccl_text(first, comm_) + where(__FILE__, __LINE__)));
    }
    NCCL_CALL(what, end);
    return finish(what, start);
  }

  // One NCCL group of every queued send plus, where given, a send and a recv of this call.
  Status p2p(const std::string& what, const ConstBuffer* send, int to, const Buffer* recv, int from) {
    if (Status s = usable(what); !s) return s;
    const Clock::time_point start = Clock::now();
    return nccl_group(what, start, [&](auto& issue) {
      if (send) issue(ncclSend(send->data, send->count, nccl_type(send->dtype), to, comm_, stream_));
      if (recv) issue(ncclRecv(recv->data, recv->count, nccl_type(recv->dtype), from, comm_, stream_));
    });
  }

  Status do_isend(ConstBuffer data, int peer, uint32_t tag) override {
    const std::string what = describe("isend", data.count, data.dtype) + " to " + describe_peer(peer) + tag_text(tag);
    if (Status s = usable(what); !s) return s;
    pending_.push_back({data, peer});
    return Status::OK();
  }

  Status do_send(ConstBuffer data, int peer, uint32_t tag) override {
    return p2p(describe("send", data.count, data.dtype) + " to " + describe_peer(peer) + tag_text(tag), &data, peer, nullptr, -1);
  }

  Status do_wait_sends() override {
    if (pending_.empty()) return usable(describe("wait_sends", 0, DType::kF32));
    return p2p(describe("wait_sends", 0, DType::kF32) + " (" + std::to_string(pending_.size()) + " sends)", nullptr, -1, nullptr, -1);
  }

  Status do_recv(Buffer data, int peer, uint32_t tag) override {
    std::string what = describe("recv", data.count, data.dtype) + " from " + describe_peer(peer) + tag_text(tag);
    if (!pending_.empty()) what += " with " + std::to_string(pending_.size()) + " queued sends";
    return p2p(what, nullptr, -1, &data, peer);
  }

  Status do_send_recv(ConstBuffer out, int to, Buffer in, int from, uint32_t tag) override {
    const std::string what = describe("send_recv", out.count, out.dtype) + " to " + describe_peer(to) + ", from " +
                             describe_peer(from) + tag_text(tag);
    return p2p(what, &out, to, &in, from);
  }
#undef NCCL_CALL
#undef CUDA_CALL

  runtime::Device& device_;
  cudaStream_t stream_;
  ncclComm_t comm_;
  cudaEvent_t event_;
  Millis timeout_;
  void* scratch_ = nullptr;            // device: one float for barrier()
  std::vector<PendingSend> pending_;   // isends not yet issued
  cudaStream_t side_stream_ = nullptr;  // all_reduce_async's stream
  cudaEvent_t issued_ = nullptr;        // the device stream's work so far, for the side stream
  cudaEvent_t side_done_ = nullptr;     // the side stream's work, for wait_async
  int side_pending_ = 0;                // all_reduce_async calls not yet waited for
  Status broken_;
};

// Frees what creation made when it fails half-way.
struct Made {
  ncclComm_t comm = nullptr;
  cudaEvent_t event = nullptr;
  ~Made() {
    if (comm) ncclCommAbort(comm);
    if (event) cudaEventDestroy(event);
  }
};

}  // namespace

bool nccl_built() { return true; }

Result<std::unique_ptr<Communicator>> create_nccl_communicator(RendezvousClient& store, runtime::Device& device,
                                                               int global_rank, const std::vector<int>& ranks,
                                                               const NcclOptions& options) {
  const std::string label = options.name.empty() ? "group" : options.name;
  auto group_rank = group_rank_in(ranks, global_rank, label);
  if (!group_rank.ok()) return group_rank.status();
  const std::string name = group_name(ranks, label);
  const std::string context = "creating the NCCL communicator of " + name + " on rank " + std::to_string(global_rank);
  if (options.timeout.count() <= 0) return Status::invalid_input(context + ": the timeout must be positive");
  if (device.backend() != runtime::Backend::kCuda || device.native_stream() == nullptr || device.ordinal() < 0) {
    return Status::invalid_input(context + ": NCCL needs a CUDA device, not " + device.name() + "; set comm: gloo");
  }
  const int size = static_cast<int>(ranks.size());
  Made made;
  auto cuda_fail = [&](const char* call, cudaError_t e, int line) {
    return Status::unavailable(context + ": " + call + ": " + cudaGetErrorString(e) + where(__FILE__, line));
  };
  if (cudaError_t e = cudaSetDevice(device.ordinal()); e != cudaSuccess) return cuda_fail("cudaSetDevice", e, __LINE__);
  if (cudaError_t e = cudaEventCreateWithFlags(&made.event, cudaEventDisableTiming); e != cudaSuccess) {
    made.event = nullptr;
    return cuda_fail("cudaEventCreateWithFlags", e, __LINE__);
  }
  if (size == 1) {
    std::unique_ptr<Communicator> c(new NcclCommunicator(name, ranks, 0, device, nullptr, made.event, options.timeout));
    made.event = nullptr;
    return c;
  }

  // Generation: as for Gloo (gloo_communicator.cpp), every member adds 1 per creation.
  const std::string base = "nccl/" + group_key(ranks);
  auto joined = store.add(base + "/joined", 1);
  if (!joined.ok()) return joined.status().with_context(context);
  const std::string id_key = base + "/" + std::to_string((joined.value() - 1) / size) + "/id";
  ncclUniqueId id{};
  if (group_rank.value() == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return nccl_status(r, context + ": ncclGetUniqueId: " + nccl_text(r, nullptr) + where(__FILE__, __LINE__));
    }
    if (Status s = store.set(id_key, std::string(id.internal, sizeof id.internal)); !s) return s.with_context(context);
  } else {
    auto value = store.get(id_key, options.timeout);
    if (!value.ok()) {
      return value.status().with_context(context + ": rank " + std::to_string(ranks[0]) + " (group rank 0) did not publish the NCCL id");
    }
    if (value->size() != sizeof id.internal) {
      return Status::internal(context + ": the NCCL id in the store has " + std::to_string(value->size()) + " bytes, not " +
                              std::to_string(sizeof id.internal));
    }
    std::memcpy(id.internal, value->data(), sizeof id.internal);
  }

  const Clock::time_point start = Clock::now();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&made.comm, size, id, group_rank.value(), &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string text = nccl_text(r, made.comm);
    return nccl_status(r, context + ": ncclCommInitRankConfig: " + text + where(__FILE__, __LINE__));
  }
  if (Status s = wait_ready(made.comm, start + options.timeout, context + " (ncclCommInitRankConfig, waiting for every member)",
                            options.timeout);
      !s) {
    return s;  // `made` aborts the communicator
  }
  std::unique_ptr<Communicator> c(
      new NcclCommunicator(name, ranks, group_rank.value(), device, made.comm, made.event, options.timeout));
  made.comm = nullptr;
  made.event = nullptr;
  return c;
}

CommunicatorFactory nccl_communicator_factory(RendezvousClient& store, runtime::Device& device, int global_rank,
                                              NcclOptions options) {
  return [&store, &device, global_rank, options](const std::string& name, const std::vector<int>& ranks) {
    NcclOptions o = options;
    o.name = name;
    return create_nccl_communicator(store, device, global_rank, ranks, o);
  };
}

}  // namespace stagecraft::comm
