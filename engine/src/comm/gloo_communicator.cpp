// GlooCommunicator: Communicator over Gloo's TCP transport (see stagecraft/comm/gloo_communicator.h).
//
// Gloo throws; every Gloo call here runs inside GLOO_CALL, which catches at this boundary, turns
// the exception into a Status carrying the operation, the group, the peer when known and the
// file:line of the call, and marks the communicator broken (Gloo's docs: after an IoException
// the pairs are in an unknown state).
//
// Collectives use Gloo's own algorithms (allreduce, allgather, broadcast, barrier) with a tag
// that counts the collectives of this communicator, so ranks that disagree on how many they
// issued time out instead of mixing data. This Gloo (0.5.0, 2022-05) has reduce-scatter only as
// an old-style bound-buffer algorithm with no per-call timeout, so reduce_scatter is a ring over
// unbound buffers here: N-1 steps, each sending one chunk right and reducing one from the left.
// Point-to-point transfers use unbound buffers; Gloo's TCP send completes only once the peer
// posted the matching recv, hence send_recv.
#include "stagecraft/comm/gloo_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <mutex>
#include <cstdlib>
#include <cstring>

#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/background_lane.h"
#include "comm/gloo_store.h"

namespace stagecraft::comm {

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Slot prefixes of our own, beside Gloo's 0x01..0x08 (gloo/types.h).
constexpr uint8_t kP2pSlotPrefix = 0x40;
constexpr uint8_t kReduceScatterSlotPrefix = 0x41;

// Gloo's TCP transport writes with writev(2), which raises SIGPIPE when the peer has gone
// (tst_comm's "peer killed during large all_reduces" lost the surviving rank to it about one
// run in twelve). Python ignores SIGPIPE at startup, which is why PyTorch never meets this; a C++
// process must do the same. Only the default disposition is replaced; a handler stays.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
}

// Gloo reads a zero timeout as "none", so a spent deadline is rounded up to 1 ms, never down.
Millis remaining(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
  return std::max(left, Millis(1));
}

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

bool mentions_timeout(const std::string& s) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::kMin: return static_cast<ReduceFn>(&gloo::min<T>);
    case ReduceOp::kSum:
    case ReduceOp::kAvg: break;
  }
  return static_cast<ReduceFn>(&gloo::sum<T>);
}

template <typename T>
void divide(T* data, size_t n, int size) {
  const T d = static_cast<T>(size);
  for (size_t i = 0; i < n; ++i) data[i] /= d;
}

}  // namespace

// ---- device ---------------------------------------------------------------------------------

struct GlooDevice::Impl {
  std::shared_ptr<gloo::transport::Device> device;
  std::string description;
};

GlooDevice::GlooDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooDevice::~GlooDevice() = default;
const std::string& GlooDevice::description() const { return impl_->description; }

Result<std::shared_ptr<GlooDevice>> GlooDevice::create(const GlooDeviceOptions& options) {
  gloo::transport::tcp::attr attr;
  std::string what;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
    what = "interface '" + options.iface + "'";
  } else if (!options.hostname.empty()) {
    attr.hostname = options.hostname;
    what = "address '" + options.hostname + "'";
  } else {
    return Status::invalid_input("gloo device: neither an interface nor a hostname to listen on");
  }
  ignore_sigpipe();
  auto impl = std::make_unique<Impl>();
  try {
    impl->device = gloo::transport::tcp::CreateDevice(attr);
    impl->description = impl->device->str();
  } catch (const std::exception& e) {
    return Status::unavailable("gloo device on " + what + ": " + e.what() + " [" + base_name(__FILE__) + ":" +
                               std::to_string(__LINE__) + "] (set STAGECRAFT_GLOO_IFNAME or STAGECRAFT_GLOO_HOSTNAME)");
  }
  return std::shared_ptr<GlooDevice>(new GlooDevice(std::move(impl)));
}

GlooDeviceOptions gloo_device_options_from_env(const RendezvousClient& store,
                                               const std::function<const char*(const char*)>& get) {
  auto env = [&](const char* name) -> std::string {
    const char* v = get ? get(name) : std::getenv(name);
    return v ? v : "";
  };
  GlooDeviceOptions o;
  o.iface = env("STAGECRAFT_GLOO_IFNAME");
  if (o.iface.empty()) o.iface = env("GLOO_SOCKET_IFNAME");
  o.hostname = env("STAGECRAFT_GLOO_HOSTNAME");
  if (o.iface.empty() && o.hostname.empty()) o.hostname = store.local_address();
  if (o.iface.empty() && o.hostname.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) o.hostname = host;
  }
  return o;
}

// ---- communicator ---------------------------------------------------------------------------

namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::string name, std::vector<int> ranks, int rank, std::shared_ptr<gloo::Context> context,
                   Millis timeout)
      : Communicator(std::move(name), std::move(ranks), rank),
        ctx_(std::move(context)),
        timeout_(timeout) {}

  ~GlooCommunicator() override {
    lane_.stop();  // background all-reduces end (within the timeout) before the context goes
    try {
      pending_.clear();
      ctx_.reset();
    } catch (...) {  // closing pairs of a broken context may throw; nothing to report to
    }
  }

 private:
  // Runs `body` (Gloo calls). `peer` is read after a failure: the body sets it to the group
  // rank it is waiting on, when there is one.
  template <typename F>
  Status call(const char* file, int line, const std::string& what, const int& peer, F&& body) {
    if (!broken_.ok()) {
      return Status(broken_).with_context(what + ": unusable after an earlier failure");
    }
    std::string reason;
    Status::Code code = Status::Code::kInternal;
    try {
      body();
      return Status::OK();
    } catch (const gloo::IoException& e) {
      reason = e.what();
      code = mentions_timeout(reason) ? Status::Code::kTimeout : Status::Code::kUnavailable;
    } catch (const gloo::EnforceNotMet& e) {
      reason = e.what();
    } catch (const std::exception& e) {
      reason = e.what();
      if (mentions_timeout(reason)) code = Status::Code::kTimeout;
    }
    std::string msg = what;
    if (peer >= 0) msg += code == Status::Code::kTimeout ? ", waiting on " + describe_peer(peer) : ", with " + describe_peer(peer);
    if (code == Status::Code::kTimeout) msg += ": timed out after " + std::to_string(timeout_.count()) + " ms";
    msg += ": " + reason + " [" + base_name(file) + ":" + std::to_string(line) + "]";
    switch (code) {
      case Status::Code::kTimeout: broken_ = Status::timeout(msg); break;
      case Status::Code::kUnavailable: broken_ = Status::unavailable(msg); break;
      default: broken_ = Status::internal(msg); break;
    }
    return broken_;
  }
#define GLOO_CALL(what, peer, ...) call(__FILE__, __LINE__, what, peer, [&] { __VA_ARGS__; })

  uint32_t next_tag() { return tag_++; }

  std::unique_ptr<gloo::transport::UnboundBuffer> buffer(const void* data, size_t bytes) {
    return ctx_->createUnboundBuffer(const_cast<void*>(data), bytes);
  }

  template <typename T>
  void all_reduce_t(T* data, size_t n, ReduceOp op) {
    gloo::AllreduceOptions o(ctx_);
    o.setOutput<T>(data, n);
    o.setReduceFunction(reduce_fn<T>(op));
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    gloo::allreduce(o);
    if (op == ReduceOp::kAvg) divide(data, n, size());
  }

  Status do_all_reduce(Buffer data, ReduceOp op) override {
    const int no_peer = -1;
    return GLOO_CALL(describe("all_reduce", data.count, data.dtype), no_peer, {
      if (data.dtype == DType::kF32) all_reduce_t(static_cast<float*>(data.data), data.count, op);
      else all_reduce_t(static_cast<double*>(data.data), data.count, op);
    });
  }

  // On the lane's thread; the caller makes no other call until do_wait_async (communicator.h),
  // so the context has one user at a time.
  Status do_all_reduce_async(Buffer data, ReduceOp op) override {
    return lane_.post([this, data, op] { return do_all_reduce(data, op); }).with_context(describe("all_reduce", data.count, data.dtype));
  }
  Status do_reduce_scatter_async(ConstBuffer in, Buffer out, ReduceOp op) override {
    return lane_.post([this, in, out, op] { return do_reduce_scatter(in, out, op); })
        .with_context(describe("reduce_scatter", out.count, out.dtype));
  }
  Status do_all_gather_async(ConstBuffer in, Buffer out) override {
    return lane_.post([this, in, out] { return do_all_gather(in, out); }).with_context(describe("all_gather", in.count, in.dtype));
  }
  Status do_wait_async() override { return lane_.wait(); }

  // Ring reduce-scatter. Step s (0..N-2): send chunk (r-s-1) mod N as reduced so far to the
  // right, receive chunk (r-s-2) mod N from the left and reduce our own input's chunk into it.
  // After N-1 steps the last chunk received, (r-N) mod N = r, holds every rank's contribution.
  // Worked example, N = 3, rank 0: step 0 sends in[2], receives rank 2's in[1] -> acc = in[1] +
  // that; step 1 sends acc, receives rank 2's partial chunk 0 (in[0] of ranks 1 and 2) -> out.
  template <typename T>
  void reduce_scatter_t(const T* in, T* out, size_t n, ReduceOp op, int& peer) {
    const int N = size(), r = rank();
    const int right = (r + 1) % N, left = (r + N - 1) % N;
    const size_t bytes = n * sizeof(T);
    const Clock::time_point deadline = Clock::now() + timeout_;
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, next_tag());
    std::vector<T> received(n), acc[2] = {std::vector<T>(n), std::vector<T>(n)};  // each (n)
    auto in_buf = buffer(in, bytes * N);
    auto recv_buf = buffer(received.data(), bytes);
    std::unique_ptr<gloo::transport::UnboundBuffer> acc_buf[2] = {buffer(acc[0].data(), bytes),
                                                                  buffer(acc[1].data(), bytes)};
    const ReduceFn fn = reduce_fn<T>(op);
    gloo::transport::UnboundBuffer* send_buf = in_buf.get();
    size_t send_offset = static_cast<size_t>((r + N - 1) % N) * bytes;
    for (int s = 0; s < N - 1; ++s) {
      const int chunk = (r + 2 * N - s - 2) % N;
      recv_buf->recv(left, slot);
      send_buf->send(right, slot, send_offset, bytes);
      peer = left;
      recv_buf->waitRecv(remaining(deadline));
      fn(acc[s % 2].data(), in + static_cast<size_t>(chunk) * n, received.data(), n);
      peer = right;
      send_buf->waitSend(remaining(deadline));
      send_buf = acc_buf[s % 2].get();
      send_offset = 0;
    }
    peer = -1;
    std::memcpy(out, acc[(N - 2) % 2].data(), bytes);
    if (op == ReduceOp::kAvg) divide(out, n, N);
  }

  Status do_reduce_scatter(ConstBuffer in, Buffer out, ReduceOp op) override {
    int peer = -1;
    return GLOO_CALL(describe("reduce_scatter", out.count, out.dtype), peer, {
      if (out.dtype == DType::kF32) {
        reduce_scatter_t(static_cast<const float*>(in.data), static_cast<float*>(out.data), out.count, op, peer);
      } else {
        reduce_scatter_t(static_cast<const double*>(in.data), static_cast<double*>(out.data), out.count, op, peer);
      }
    });
  }

  template <typename T>
  void all_gather_t(const T* in, T* out, size_t n) {
    gloo::AllgatherOptions o(ctx_);
    o.setInput<T>(const_cast<T*>(in), n);
    o.setOutput<T>(out, n * size());
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    gloo::allgather(o);
  }

  Status do_all_gather(ConstBuffer in, Buffer out) override {
    const int no_peer = -1;
    return GLOO_CALL(describe("all_gather", in.count, in.dtype), no_peer, {
      if (in.dtype == DType::kF32) all_gather_t(static_cast<const float*>(in.data), static_cast<float*>(out.data), in.count);
      else all_gather_t(static_cast<const double*>(in.data), static_cast<double*>(out.data), in.count);
    });
  }

  template <typename T>
  void all_to_all_t(const T* in, T* out, size_t n) {
    gloo::AlltoallOptions o(ctx_);
    o.setInput<T>(const_cast<T*>(in), n);
    o.setOutput<T>(out, n);
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    gloo::alltoall(o);
  }

  Status do_all_to_all(ConstBuffer in, Buffer out) override {
    const int no_peer = -1;
    return GLOO_CALL(describe("all_to_all", in.count, in.dtype), no_peer, {
      if (in.dtype == DType::kF32) all_to_all_t(static_cast<const float*>(in.data), static_cast<float*>(out.data), in.count);
      else all_to_all_t(static_cast<const double*>(in.data), static_cast<double*>(out.data), in.count);
    });
  }

  template <typename T>
  void all_to_all_v_t(const T* in, std::span<const size_t> send_counts, T* out, std::span<const size_t> recv_counts) {
    gloo::AlltoallvOptions o(ctx_);
    o.setInput<T>(const_cast<T*>(in), std::vector<int64_t>(send_counts.begin(), send_counts.end()));
    o.setOutput<T>(out, std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    gloo::alltoallv(o);
  }

  Status do_all_to_all_v(ConstBuffer in, std::span<const size_t> send_counts, Buffer out, std::span<const size_t> recv_counts) override {
    const int no_peer = -1;
    return GLOO_CALL(describe("all_to_all_v", in.count, in.dtype), no_peer, {
      if (in.dtype == DType::kF32) {
        all_to_all_v_t(static_cast<const float*>(in.data), send_counts, static_cast<float*>(out.data), recv_counts);
      } else {
        all_to_all_v_t(static_cast<const double*>(in.data), send_counts, static_cast<double*>(out.data), recv_counts);
      }
    });
  }

  template <typename T>
  void broadcast_t(T* data, size_t n, int root) {
    gloo::BroadcastOptions o(ctx_);
    o.setOutput<T>(data, n);
    o.setRoot(root);
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    gloo::broadcast(o);
  }

  Status do_broadcast(Buffer data, int root) override {
    const int peer = root == rank() ? -1 : root;
    return GLOO_CALL(describe("broadcast", data.count, data.dtype) + " from group rank " + std::to_string(root), peer, {
      if (data.dtype == DType::kF32) broadcast_t(static_cast<float*>(data.data), data.count, root);
      else broadcast_t(static_cast<double*>(data.data), data.count, root);
    });
  }

  Status do_barrier() override {
    const int no_peer = -1;
    return GLOO_CALL(describe("barrier", 0, DType::kF32), no_peer, {
      gloo::BarrierOptions o(ctx_);
      o.setTag(next_tag());
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }

  // Point-to-point: one slot per tag. Gloo matches the sends and recvs of one slot between two
  // ranks in the order they were posted, which gives "same tag, same order". The descriptions
  // name the peer already, so `call` is given none.
  static uint64_t p2p_slot(uint32_t tag) { return gloo::Slot::build(kP2pSlotPrefix, tag); }

  Status do_send(ConstBuffer data, int peer, uint32_t tag) override {
    const int named = -1;
    return GLOO_CALL(describe("send", data.count, data.dtype) + " to " + describe_peer(peer) + tag_text(tag), named, {
      auto buf = buffer(data.data, data.count * size_of(data.dtype));
      buf->send(peer, p2p_slot(tag));
      if (!buf->waitSend(timeout_)) throw gloo::IoException("send aborted");
    });
  }

  Status do_isend(ConstBuffer data, int peer, uint32_t tag) override {
    const int named = -1;
    return GLOO_CALL(describe("isend", data.count, data.dtype) + " to " + describe_peer(peer) + tag_text(tag), named, {
      PendingSend p{buffer(data.data, data.count * size_of(data.dtype)), peer,
                    describe("isend", data.count, data.dtype) + " to " + describe_peer(peer) + tag_text(tag)};
      p.buf->send(peer, p2p_slot(tag));
      pending_.push_back(std::move(p));
    });
  }

  Status do_wait_sends() override {
    // `call` holds `what` by reference: the body points it at the send it is waiting for.
    std::string what = describe("wait_sends", 0, DType::kF32);
    const int named = -1;
    Status s = GLOO_CALL(what, named, {
      const Clock::time_point deadline = Clock::now() + timeout_;
      for (auto& p : pending_) {
        what = p.what;
        if (!p.buf->waitSend(remaining(deadline))) throw gloo::IoException("send aborted");
      }
    });
    pending_.clear();
    return s;
  }

  Status do_recv(Buffer data, int peer, uint32_t tag) override {
    const int named = -1;
    return GLOO_CALL(describe("recv", data.count, data.dtype) + " from " + describe_peer(peer) + tag_text(tag), named, {
      auto buf = buffer(data.data, data.count * size_of(data.dtype));
      buf->recv(peer, p2p_slot(tag));
      if (!buf->waitRecv(timeout_)) throw gloo::IoException("recv aborted");
    });
  }

  Status do_irecv(Buffer data, int peer, uint32_t tag) override {
    const int named = -1;
    return GLOO_CALL(describe("irecv", data.count, data.dtype) + " from " + describe_peer(peer) + tag_text(tag), named, {
      PendingSend p{buffer(data.data, data.count * size_of(data.dtype)), peer,
                    describe("irecv", data.count, data.dtype) + " from " + describe_peer(peer) + tag_text(tag)};
      p.buf->recv(peer, p2p_slot(tag));
      pending_recvs_.push_back(std::move(p));
    });
  }

  Status do_wait_recvs() override {
    std::string what = describe("wait_recvs", 0, DType::kF32);
    const int named = -1;
    Status s = GLOO_CALL(what, named, {
      const Clock::time_point deadline = Clock::now() + timeout_;
      for (auto& p : pending_recvs_) {
        what = p.what;
        if (!p.buf->waitRecv(remaining(deadline))) throw gloo::IoException("recv aborted");
      }
    });
    pending_recvs_.clear();
    return s;
  }

  Status do_send_recv(ConstBuffer out, int to, Buffer in, int from, uint32_t tag) override {
    int peer = -1;
    const std::string what = describe("send_recv", out.count, out.dtype) + " to " + describe_peer(to) + ", from " +
                             describe_peer(from) + tag_text(tag);
    return GLOO_CALL(what, peer, {
      const Clock::time_point deadline = Clock::now() + timeout_;
      auto rbuf = buffer(in.data, in.count * size_of(in.dtype));
      auto sbuf = buffer(out.data, out.count * size_of(out.dtype));
      rbuf->recv(from, p2p_slot(tag));
      sbuf->send(to, p2p_slot(tag));
      peer = from;
      if (!rbuf->waitRecv(remaining(deadline))) throw gloo::IoException("recv aborted");
      peer = to;
      if (!sbuf->waitSend(remaining(deadline))) throw gloo::IoException("send aborted");
      peer = -1;
    });
  }

  static std::string tag_text(uint32_t tag) { return tag == 0 ? "" : " (tag " + std::to_string(tag) + ")"; }

  struct PendingSend {
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    int peer;
    std::string what;
  };
#undef GLOO_CALL

  std::shared_ptr<gloo::Context> ctx_;
  Millis timeout_;
  uint32_t tag_ = 0;                  // collectives issued so far
  std::vector<PendingSend> pending_;  // isends not yet awaited
  std::vector<PendingSend> pending_recvs_;  // irecvs not yet awaited
  Status broken_;
  BackgroundLane lane_;               // all_reduce_async
};

}  // namespace

Result<std::unique_ptr<Communicator>> create_gloo_communicator(RendezvousClient& store,
                                                               const std::shared_ptr<GlooDevice>& device,
                                                               int global_rank, const std::vector<int>& ranks,
                                                               const GlooOptions& options) {
  const std::string label = options.name.empty() ? "group" : options.name;
  auto group_rank = group_rank_in(ranks, global_rank, label);
  if (!group_rank.ok()) return group_rank.status();
  const std::string name = group_name(ranks, label);
  const std::string context = "creating the communicator of " + name + " on rank " + std::to_string(global_rank);
  if (options.timeout.count() <= 0) return Status::invalid_input(context + ": the timeout must be positive");
  const int size = static_cast<int>(ranks.size());
  if (size == 1) return make_single_rank_communicator(global_rank, name);
  if (!device) return Status::invalid_input(context + ": no gloo device");

  // Generation: every member adds 1 per creation, and no member can finish creation k before
  // all have added for it, so the k-th creation sees values in ((k-1)*size, k*size].
  const std::string base = "gloo/" + group_key(ranks);
  auto joined = store.add(base + "/joined", 1);
  if (!joined.ok()) return joined.status().with_context(context);
  const int64_t generation = (joined.value() - 1) / size;
  const std::string prefix = base + "/" + std::to_string(generation) + "/";

  GlooStore adapter(store, prefix, options.timeout);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(group_rank.value(), size);
  // A pair's connect waits 5x the context timeout (gloo/transport/tcp/pair.h), so the
  // rendezvous runs at a fifth of it; the store waits use the full timeout (GlooStore).
  ctx->setTimeout(std::max(Millis(1), options.timeout / 5));
  try {
    ctx->connectFullMesh(adapter, device->impl().device);
  } catch (const std::exception& e) {
    const std::string where = std::string(" [") + base_name(__FILE__) + ":" + std::to_string(__LINE__) + "]";
    const Status& s = adapter.error();
    if (s.ok()) return Status::unavailable(context + ": connecting to the members failed: " + e.what() + where);
    if (s.code() != Status::Code::kTimeout) return s.with_context(context);
    std::string missing;
    for (int i = 0; i < size; ++i) {
      auto present = store.check({adapter.full_key(std::to_string(i))});
      if (present.ok() && !present.value()) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(ranks[i]);
      }
    }
    return Status::timeout(context + ": " + (missing.empty() ? "" : "rank(s) " + missing + " did not join within " +
                                                                        std::to_string(options.timeout.count()) +
                                                                        " ms; ") + s.message());
  }
  ctx->setTimeout(options.timeout);
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(name, ranks, group_rank.value(), std::move(ctx), options.timeout));
}

CommunicatorFactory gloo_communicator_factory(RendezvousClient& store, std::shared_ptr<GlooDevice> device, int global_rank,
                                              GlooOptions options) {
  return [&store, device = std::move(device), global_rank, options](const std::string& name,
                                                                    const std::vector<int>& ranks) {
    GlooOptions o = options;
    o.name = name;
    return create_gloo_communicator(store, device, global_rank, ranks, o);
  };
}

}  // namespace stagecraft::comm
