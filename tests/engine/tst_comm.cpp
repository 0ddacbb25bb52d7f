// Gloo communicators over real TCP on 127.0.0.1, between real processes: this binary starts
// copies of itself as workers (STAGECRAFT_COMM_TEST_WORKER names the scenario), each reading
// the launcher's torchrun-style environment, reaching the test's store and building its groups
// from the topology as the worker does (build_process_groups over Gloo). Values are small integers, so every sum is
// exact in float and results are compared exactly. Failure scenarios (a peer that never
// arrives, dies, or skips a collective) must end in a clear error within the timeout.
//
// main() is written out instead of QTEST_APPLESS_MAIN because a worker must not run the suite.
#include "stagecraft/comm/communicator.h"
#include "stagecraft/comm/gloo_communicator.h"
#include "stagecraft/comm/nccl_communicator.h"
#include "stagecraft/comm/process_groups.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/worker_env.h"
#include "stagecraft/plan/topology.h"
#include "local_store.h"

#include <QtTest>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

using namespace stagecraft;
using namespace stagecraft::comm;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr const char* kRoleVar = "STAGECRAFT_COMM_TEST_WORKER";

// ---- worker side ----------------------------------------------------------------------------

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Stops the worker with a message on stderr, which the test shows.
#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "rank %d, line %d: ", g_rank, __LINE__);        \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)
#define EXPECT_OK(status_expr)                                                       \
  do {                                                                               \
    const Status s_ = (status_expr);                                                 \
    EXPECT(s_.ok(), "%s: %s", #status_expr, s_.message().c_str());                \
  } while (0)

int g_rank = -1;

struct Worker {
  launch::WorkerEnv env;
  std::unique_ptr<RendezvousClient> store;
  std::shared_ptr<GlooDevice> device;
  GlooOptions options;
};

Worker start_worker() {
  Worker w;
  auto env = launch::read_worker_env();
  EXPECT(env.ok(), "%s", env.status().message().c_str());
  w.env = env.value();
  g_rank = w.env.rank;
  RendezvousClientOptions so;
  so.host = w.env.master_addr;
  so.port = w.env.master_port;
  so.token = w.env.token;
  so.connect_timeout = milliseconds(10000);
  so.timeout = milliseconds(10000);
  auto store = RendezvousClient::connect(so);
  EXPECT(store.ok(), "%s", store.status().message().c_str());
  w.store = std::move(store).value();
  auto device = GlooDevice::create(gloo_device_options_from_env(*w.store));
  EXPECT(device.ok(), "%s", device.status().message().c_str());
  w.device = device.value();
  w.options.timeout = milliseconds(env_int("COMM_TEST_TIMEOUT_MS", 10000));
  return w;
}

std::unique_ptr<Communicator> join(Worker& w, const std::vector<int>& ranks, const std::string& name) {
  GlooOptions o = w.options;
  o.name = name;
  auto c = create_gloo_communicator(*w.store, w.device, w.env.rank, ranks, o);
  EXPECT(c.ok(), "%s", c.status().message().c_str());
  return std::move(c).value();
}

std::vector<int> iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// Every collective on `c`, with values that sum exactly; `n` elements per rank.
template <typename T>
void check_collectives(Communicator& c, size_t n) {
  const int size = c.size(), g = c.global_rank();
  const auto& ranks = c.ranks();
  T sum_of_ranks = 0;  // S = sum over members of (global rank + 1)
  for (int r : ranks) sum_of_ranks += static_cast<T>(r + 1);
  int max_rank = 0, min_rank = 1 << 30;
  for (int r : ranks) max_rank = std::max(max_rank, r), min_rank = std::min(min_rank, r);
  const char* what = c.name().c_str();

  // v(i) = i mod 1000 + 1 keeps every value and sum an exact float integer for any n.
  auto v = [](size_t i) { return static_cast<T>(i % 1000 + 1); };
  // all_reduce: data[i] = (g + 1) v(i)  ->  sum S v(i), avg S v(i) / size
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    std::vector<T> data(n);  // (n)
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(g + 1) * v(i);
    EXPECT_OK(c.all_reduce(std::span<T>(data), op));
    for (size_t i = 0; i < n; ++i) {
      T want = v(i) * sum_of_ranks;
      if (op == ReduceOp::kAvg) want /= static_cast<T>(size);
      EXPECT(data[i] == want, "%s all_reduce %s [%zu] = %g, want %g", what, to_string(op), i, double(data[i]), double(want));
    }
  }
  // max / min: data[i] = 1000 g + i
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    std::vector<T> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(1000 * g + i);
    EXPECT_OK(c.all_reduce(std::span<T>(data), op));
    const int pick = op == ReduceOp::kMax ? max_rank : min_rank;
    for (size_t i = 0; i < n; ++i) EXPECT(data[i] == static_cast<T>(1000 * pick + i), "%s all_reduce %s [%zu]", what, to_string(op), i);
  }
  // reduce_scatter: in (size * n), in[j] = (g + 1) v(j)  ->  out[k] = S v(rank n + k)
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    std::vector<T> in(size * n), out(n, T(-1));
    for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<T>(g + 1) * v(j);
    EXPECT_OK(c.reduce_scatter(std::span<const T>(in), std::span<T>(out), op));
    for (size_t k = 0; k < n; ++k) {
      T want = sum_of_ranks * v(c.rank() * n + k);
      if (op == ReduceOp::kAvg) want /= static_cast<T>(size);
      EXPECT(out[k] == want, "%s reduce_scatter %s [%zu] = %g, want %g", what, to_string(op), k, double(out[k]), double(want));
    }
  }
  // all_gather: in (n) = 10000 g + k  ->  out (size * n)
  {
    std::vector<T> in(n), out(size * n, T(-1));
    for (size_t k = 0; k < n; ++k) in[k] = static_cast<T>(10000 * g + k);
    EXPECT_OK(c.all_gather(std::span<const T>(in), std::span<T>(out)));
    for (int r = 0; r < size; ++r) {
      for (size_t k = 0; k < n; ++k) {
        EXPECT(out[r * n + k] == static_cast<T>(10000 * ranks[r] + k), "%s all_gather [%d][%zu]", what, r, k);
      }
    }
  }
  // all_to_all: in (size * n), block r = (g size + r) n + k  ->  out block s from group rank s
  {
    std::vector<T> in(size * n), out(size * n, T(-1));
    for (int r = 0; r < size; ++r) {
      for (size_t k = 0; k < n; ++k) in[r * n + k] = static_cast<T>((size_t(g) * size + r) * n + k);
    }
    EXPECT_OK(c.all_to_all(std::span<const T>(in), std::span<T>(out)));
    for (int s = 0; s < size; ++s) {
      for (size_t k = 0; k < n; ++k) {
        const T want = static_cast<T>((size_t(ranks[s]) * size + c.rank()) * n + k);
        EXPECT(out[s * n + k] == want, "%s all_to_all [%d][%zu] = %g, want %g", what, s, k, double(out[s * n + k]), double(want));
      }
    }
  }
  // all_to_all_v: group rank a sends cnt(a, b) = (3 a + b + n) mod 4 elements to b (some none),
  // element k of that block (100 global(a) + b) 16 + k; b receives them block by block in rank order.
  {
    auto cnt = [&](int a, int b) { return static_cast<size_t>((3 * a + b + static_cast<int>(n)) % 4); };
    std::vector<size_t> send(static_cast<size_t>(size)), recv(static_cast<size_t>(size));
    std::vector<T> in, out;
    for (int b = 0; b < size; ++b) {
      send[size_t(b)] = cnt(c.rank(), b);
      recv[size_t(b)] = cnt(b, c.rank());
      for (size_t k = 0; k < send[size_t(b)]; ++k) in.push_back(static_cast<T>((100 * g + b) * 16 + int(k)));
    }
    size_t total = 0;
    for (size_t x : recv) total += x;
    out.assign(total, T(-1));
    const DType dt = sizeof(T) == 4 ? DType::kF32 : DType::kF64;
    EXPECT_OK(c.all_to_all_v(Communicator::ConstBuffer{in.data(), in.size(), dt}, send, Communicator::Buffer{out.data(), out.size(), dt}, recv));
    size_t at = 0;
    for (int a = 0; a < size; ++a) {
      for (size_t k = 0; k < recv[size_t(a)]; ++k, ++at) {
        const T want = static_cast<T>((100 * ranks[a] + c.rank()) * 16 + int(k));
        EXPECT(out[at] == want, "%s all_to_all_v from %d [%zu] = %g, want %g", what, a, k, double(out[at]), double(want));
      }
    }
  }
  // broadcast from every root in turn
  for (int root = 0; root < size; ++root) {
    std::vector<T> data(n);
    for (size_t k = 0; k < n; ++k) data[k] = c.rank() == root ? static_cast<T>(7 * g + k) : T(-1);
    EXPECT_OK(c.broadcast(std::span<T>(data), root));
    for (size_t k = 0; k < n; ++k) EXPECT(data[k] == static_cast<T>(7 * ranks[root] + k), "%s broadcast from %d [%zu]", what, root, k);
  }
  EXPECT_OK(c.barrier());
}

// Gloo's allreduce cuts large buffers into 1 MiB segments; an odd count leaves a ragged one.
void check_large_all_reduce(Communicator& c, size_t n) {
  float sum_of_ranks = 0;
  for (int r : c.ranks()) sum_of_ranks += static_cast<float>(r + 1);
  std::vector<float> data(n);  // (n)
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>((c.global_rank() + 1) * (i % 1000 + 1));
  EXPECT_OK(c.all_reduce(std::span<float>(data)));
  for (size_t i = 0; i < n; ++i) {
    EXPECT(data[i] == sum_of_ranks * static_cast<float>(i % 1000 + 1), "large all_reduce [%zu] = %g", i, double(data[i]));
  }
}

void check_argument_errors(Communicator& c) {
  std::vector<float> in(3), out(2);
  if (c.size() != 1) {
    const Status s = c.reduce_scatter(std::span<const float>(in), std::span<float>(out));
    EXPECT(s.code() == Status::Code::kInvalidInput && s.message().find(c.name()) != std::string::npos,
           "mis-sized reduce_scatter: %s", s.message().c_str());
  }
  if (c.size() != 1) {
    std::vector<float> a2a(static_cast<size_t>(c.size()) + 1);  // not size equal blocks
    const Status s = c.all_to_all(std::span<const float>(a2a), std::span<float>(a2a));
    EXPECT(s.code() == Status::Code::kInvalidInput && s.message().find("all_to_all") != std::string::npos,
           "mis-sized all_to_all: %s", s.message().c_str());
  }
  {
    std::vector<size_t> short_counts(static_cast<size_t>(c.size()) + 1, 0);  // one count too many
    const Status s = c.all_to_all_v(std::span<const float>(in), short_counts, std::span<float>(out), short_counts);
    EXPECT(s.code() == Status::Code::kInvalidInput && s.message().find("all_to_all_v") != std::string::npos,
           "mis-counted all_to_all_v: %s", s.message().c_str());
  }
  const Status b = c.broadcast(std::span<float>(out), c.size());
  EXPECT(b.code() == Status::Code::kInvalidInput, "broadcast from a root outside the group: %s", b.message().c_str());
  const Status self = c.send(std::span<const float>(in), c.rank());
  EXPECT(self.code() == Status::Code::kInvalidInput, "send to self: %s", self.message().c_str());
  EXPECT_OK(c.barrier());  // still usable after argument errors
}

// all_reduce_async on `background` while `foreground` runs its collectives, as the trainer
// reduces DP buckets during the backward's TP all-reduces: several started before one wait, of
// sizes from one element to several of Gloo's segments, each summed exactly; waiting with
// nothing started is a no-op.
void check_async_all_reduce(Communicator& background, Communicator& foreground) {
  const std::vector<size_t> sizes = {1, 33, 4099, 300001};
  float sum_of_ranks = 0;
  for (int r : background.ranks()) sum_of_ranks += static_cast<float>(r + 1);
  std::vector<std::vector<float>> data;
  for (size_t n : sizes) {
    std::vector<float> d(n);  // (n)
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<float>((background.global_rank() + 1) * (i % 1000 + 1));
    data.push_back(std::move(d));
  }
  for (auto& d : data) EXPECT_OK(background.all_reduce_async(std::span<float>(d)));
  check_collectives<float>(foreground, 17);
  EXPECT_OK(background.wait_async());
  for (size_t k = 0; k < data.size(); ++k) {
    for (size_t i = 0; i < data[k].size(); ++i) {
      EXPECT(data[k][i] == sum_of_ranks * static_cast<float>(i % 1000 + 1), "async all_reduce %zu [%zu] = %g", k, i, double(data[k][i]));
    }
  }
  EXPECT_OK(background.wait_async());
  check_collectives<float>(background, 5);  // usable in the foreground again
}

// reduce_scatter_async and all_gather_async on `background`, queued with an all_reduce_async, while
// `foreground` runs its collectives, as ZeRO reduces buckets and gathers the next layer during the
// backward (runtime/zero_shards.h): every block and every gathered piece exact after one wait.
void check_async_reduce_scatter_all_gather(Communicator& background, Communicator& foreground) {
  const int size = background.size(), me = background.rank();
  float sum_of_ranks = 0;
  for (int r : background.ranks()) sum_of_ranks += static_cast<float>(r + 1);
  auto v = [](size_t i) { return static_cast<float>(i % 1000 + 1); };
  const std::vector<size_t> sizes = {1, 4099, 100003};  // per rank
  std::vector<std::vector<float>> rs_in, rs_out, ag_in, ag_out;
  for (size_t n : sizes) {
    std::vector<float> in(n * static_cast<size_t>(size)), gin(n);  // (size x n), (n)
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(background.global_rank() + 1) * v(i);
    for (size_t i = 0; i < n; ++i) gin[i] = static_cast<float>(me * 1000) + v(i);
    rs_in.push_back(std::move(in));
    rs_out.emplace_back(n);
    ag_in.push_back(std::move(gin));
    ag_out.emplace_back(n * static_cast<size_t>(size));
  }
  std::vector<float> reduced(777, static_cast<float>(background.global_rank() + 1));
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_OK(background.reduce_scatter_async(std::span<const float>(rs_in[k]), std::span<float>(rs_out[k])));
    EXPECT_OK(background.all_gather_async(std::span<const float>(ag_in[k]), std::span<float>(ag_out[k])));
  }
  EXPECT_OK(background.all_reduce_async(std::span<float>(reduced)));
  check_collectives<float>(foreground, 17);
  EXPECT_OK(background.wait_async());
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t n = sizes[k];
    for (size_t i = 0; i < n; ++i) {
      const float want = sum_of_ranks * v(static_cast<size_t>(me) * n + i);
      EXPECT(rs_out[k][i] == want, "async reduce_scatter %zu [%zu] = %g, want %g", k, i, double(rs_out[k][i]), double(want));
    }
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < n; ++i) {
        const float want = static_cast<float>(r * 1000) + v(i);
        const float got = ag_out[k][static_cast<size_t>(r) * n + i];
        EXPECT(got == want, "async all_gather %zu rank %d [%zu] = %g, want %g", k, r, i, double(got), double(want));
      }
    }
  }
  for (float x : reduced) EXPECT(x == sum_of_ranks, "async all_reduce beside them = %g", double(x));
  check_collectives<float>(background, 5);  // usable in the foreground again
}

// Every group of this rank, as the worker builds them (build_process_groups over Gloo), for the
// topology in COMM_TEST_DP/TP/PP.
comm::ProcessGroups build_groups(Worker& w) {
  plan::TopologySpec spec;
  spec.nodes = 1;
  spec.gpus_per_node = w.env.world_size;
  spec.dp = env_int("COMM_TEST_DP", 1);
  spec.tp = env_int("COMM_TEST_TP", 1);
  spec.pp = env_int("COMM_TEST_PP", 1);
  auto topo = plan::Topology::create(spec);
  EXPECT(topo.ok(), "%s", topo.status().message().c_str());
  auto groups = build_process_groups(topo.value(), w.env.rank, true, gloo_communicator_factory(*w.store, w.device, w.env.rank, w.options));
  EXPECT(groups.ok(), "%s", groups.status().message().c_str());
  EXPECT(groups->tp().size() == spec.tp && groups->dp().size() == spec.dp && groups->pp().size() == spec.pp,
         "groups of %d, %d, %d ranks", groups->tp().size(), groups->dp().size(), groups->pp().size());
  return std::move(groups).value();
}

// World, then the TP, DP and PP groups of this rank (built in that order on every rank), each
// doing every collective in f32 (and the world also in f64 and with a multi-segment size).
int run_collectives(Worker& w) {
  comm::ProcessGroups groups = build_groups(w);
  Communicator& world = groups.world();
  check_collectives<float>(world, 33);
  check_collectives<double>(world, 5);
  check_large_all_reduce(world, 300001);  // 1.2 MB: several of Gloo's 1 MiB segments
  check_argument_errors(world);
  // The same group created again rendezvouses afresh (a new generation of its keys), and both
  // communicators work side by side.
  auto again = join(w, iota(w.env.world_size), "world");
  check_collectives<float>(*again, 3);
  EXPECT_OK(world.barrier());
  for (Communicator* group : {&groups.tp(), &groups.dp(), &groups.pp()}) {
    check_collectives<float>(*group, 17);
    check_argument_errors(*group);
  }
  if (Communicator* embedding = groups.embedding()) check_collectives<float>(*embedding, 9);
  check_async_all_reduce(groups.dp(), groups.tp());
  check_async_reduce_scatter_all_gather(groups.dp(), groups.tp());
  return 0;
}

// Pipeline traffic along each PP group: a token goes from stage 0 to the last stage, each stage
// adding its stage number, and back (ping-pong); then every stage exchanges with both
// neighbours at once with isend and with send_recv (which blocking sends alone would deadlock).
int run_p2p(Worker& w) {
  comm::ProcessGroups groups = build_groups(w);
  Communicator* pp = &groups.pp();
  const int stage = pp->rank(), stages = pp->size();
  const int rounds = 10;
  const size_t n = 4099;
  for (int round = 0; round < rounds; ++round) {
    std::vector<float> act(n);  // (n) activations going forward
    if (stage == 0) {
      for (size_t i = 0; i < n; ++i) act[i] = static_cast<float>(round * 100 + i % 50);
    } else {
      EXPECT_OK(pp->recv(std::span<float>(act), stage - 1));
    }
    for (auto& x : act) x += static_cast<float>(stage);
    if (stage + 1 < stages) {
      EXPECT_OK(pp->send(std::span<const float>(act), stage + 1));
      EXPECT_OK(pp->recv(std::span<float>(act), stage + 1));  // the gradient coming back
    }
    // Forward added 0 + 1 + ... + (stages - 1) in all; each stage checks what it holds now.
    const float added = static_cast<float>(stages * (stages - 1) / 2);
    for (size_t i = 0; i < n; ++i) {
      EXPECT(act[i] == static_cast<float>(round * 100 + i % 50) + added, "stage %d round %d [%zu] = %g", stage, round,
             i, double(act[i]));
    }
    if (stage > 0) EXPECT_OK(pp->send(std::span<const float>(act), stage - 1));
  }
  // Both neighbours send first, as in 1F1B's steady state: isend does not wait for the peer.
  // Tags keep the two directions apart (with 2 stages left and right are the same rank), and
  // the recvs are posted in the other order than the sends.
  if (stages > 1) {
    const int right = (stage + 1) % stages, left = (stage + stages - 1) % stages;
    std::vector<float> to_right(n, float(stage)), to_left(n, float(100 + stage)), from_left(n, -1), from_right(n, -1);
    EXPECT_OK(pp->isend(std::span<const float>(to_right), right, 1));
    EXPECT_OK(pp->isend(std::span<const float>(to_left), left, 2));
    EXPECT_OK(pp->recv(std::span<float>(from_right), right, 2));
    EXPECT_OK(pp->recv(std::span<float>(from_left), left, 1));
    EXPECT_OK(pp->wait_sends());
    for (size_t i = 0; i < n; ++i) {
      EXPECT(from_left[i] == float(left) && from_right[i] == float(100 + right), "isend exchange [%zu]: %g %g", i,
             double(from_left[i]), double(from_right[i]));
    }
  }
  // The context-parallel ring's pattern: every rank posts a send right and a receive from the
  // left, both in the background, then waits (the receives after a computation), three rounds in
  // flight at once with their own buffers.
  if (stages > 1) {
    const int right = (stage + 1) % stages, left = (stage + stages - 1) % stages;
    std::vector<std::vector<float>> out(3), in(3);
    for (int k = 0; k < 3; ++k) {
      out[k].assign(n, float(1000 * k + stage));
      in[k].assign(n, -1.0f);
      EXPECT_OK(pp->isend(std::span<const float>(out[k]), right, 7));
      EXPECT_OK(pp->irecv(std::span<float>(in[k]), left, 7));
    }
    EXPECT_OK(pp->wait_recvs());
    EXPECT_OK(pp->wait_sends());
    for (int k = 0; k < 3; ++k) {
      for (size_t i = 0; i < n; ++i) EXPECT(in[k][i] == float(1000 * k + left), "irecv round %d [%zu] = %g", k, i, double(in[k][i]));
    }
  }
  // Ring exchange: everyone sends right and receives from the left at the same time.
  if (stages > 1) {
    const int right = (stage + 1) % stages, left = (stage + stages - 1) % stages;
    std::vector<double> out(257, static_cast<double>(pp->global_rank())), in(257, -1);
    EXPECT_OK(pp->send_recv(std::span<const double>(out), right, std::span<double>(in), left));
    for (double x : in) EXPECT(x == pp->ranks()[left], "send_recv got %g from the left", x);
  }
  EXPECT_OK(pp->barrier());
  return 0;
}

// Prints the Status of the call under test as "STATUS <code> <ms> <message>" for the test.
void report(const Status& s, Clock::time_point t0) {
  const long ms = static_cast<long>(std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count());
  std::printf("STATUS %d %ld %s\n", static_cast<int>(s.code()), ms, s.message().c_str());
  std::fflush(stdout);
}

// Failure scenarios, seen from rank 0 (the other ranks misbehave as the scenario says).
int run_failure(Worker& w, const std::string& scenario) {
  const std::vector<int> world = iota(w.env.world_size);
  if (scenario == "absent") {  // only rank 0 was started
    const auto t0 = Clock::now();
    GlooOptions o = w.options;
    o.name = "world";
    auto c = create_gloo_communicator(*w.store, w.device, w.env.rank, world, o);
    report(c.status(), t0);
    return 0;
  }
  auto c = join(w, world, "world");
  std::vector<float> data(1000, 1.0f);
  EXPECT_OK(c->barrier());
  if (scenario == "killed_midway") {
    // Rank 1 dies while large all-reduces are streaming; rank 0 keeps issuing them until one fails.
    std::vector<float> big(4 << 20, 1.0f);  // 16 MB
    std::thread killer;
    if (w.env.rank != 0) {
      killer = std::thread([] {
        std::this_thread::sleep_for(milliseconds(300));
        std::raise(SIGKILL);
      });
    }
    const auto t0 = Clock::now();
    Status s;
    while (s.ok() && Clock::now() - t0 < milliseconds(10000)) s = c->all_reduce(std::span<float>(big), ReduceOp::kAvg);
    report(s, t0);
    if (killer.joinable()) killer.join();
    return 0;
  }
  // Everyone is connected before anyone misbehaves: Gloo's creation can return on one rank
  // while another still completes its connections, so a rank leaving right after creation
  // would fail the other's creation instead (as clearly, but not the case under test).
  EXPECT_OK(c->barrier());
  if (w.env.rank != 0) {
    if (scenario == "exits") std::_Exit(0);
    if (scenario == "killed" || scenario == "killed_async") std::raise(SIGKILL);
    if (scenario == "silent") std::this_thread::sleep_for(milliseconds(900));
    return 0;
  }
  const auto t0 = Clock::now();
  Status s;
  if (scenario == "silent") s = c->all_reduce(std::span<float>(data));
  else if (scenario == "exits") s = c->recv(std::span<float>(data), 1);
  else if (scenario == "killed_async") {
    s = c->all_reduce_async(std::span<float>(data));
    if (s.ok()) s = c->wait_async();
  }
  else s = c->all_reduce(std::span<float>(data));
  report(s, t0);
  // The communicator stays broken: a later call returns the first error at once.
  const auto t1 = Clock::now();
  const Status again = c->barrier();
  EXPECT(!again.ok() && again.message().find("earlier failure") != std::string::npos, "after a failure: %s",
         again.message().c_str());
  EXPECT(Clock::now() - t1 < milliseconds(100), "a broken communicator must answer at once");
  return 0;
}

// Both ranks join dp[0,1]; then rank 0 leaves itself no address space for a thread's stack and
// posts a background all-reduce, whose lane cannot start its thread: the call must fail at once,
// naming the group, in one line, and the wait after it must return OK (nothing was queued). It
// prints "refused: MESSAGE" and ends with _exit, since nothing may be allocated past the limit.
int run_lane_without_thread(Worker& w) {
  auto c = join(w, {0, 1}, "dp");
  EXPECT_OK(c->barrier());
  if (w.env.rank != 0) return 0;
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  EXPECT(pages > 0, "cannot read /proc/self/statm");
  const rlim_t room = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(1) << 20);  // 1 MiB more: no stack fits
  const rlimit limit{room, room};
  EXPECT(setrlimit(RLIMIT_AS, &limit) == 0, "setrlimit(RLIMIT_AS) failed");
  std::vector<float> data = {1, 2, 3};
  const Status s = c->all_reduce_async(std::span<float>(data), ReduceOp::kSum);
  const std::string m = s.message();
  EXPECT(!s.ok(), "all_reduce_async started its thread within the limit");
  EXPECT(m.find("dp[0,1]") != std::string::npos && m.find("background thread") != std::string::npos && m.find('\n') == std::string::npos,
         "all_reduce_async: %s", m.c_str());
  EXPECT_OK(c->wait_async());
  std::printf("refused: %s\n", m.c_str());
  std::fflush(stdout);
  _exit(0);
}

int worker_main(const std::string& role) {
  Worker w = start_worker();
  if (role == "lane_without_thread") return run_lane_without_thread(w);
  if (role == "collectives") return run_collectives(w);
  if (role == "p2p") return run_p2p(w);
  return run_failure(w, role);
}

// ---- test side ------------------------------------------------------------------------------

struct RankOutput {
  launch::ExitInfo exit;
  std::string out, err;
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) qFatal("cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

// Starts `spawn` ranks (0..spawn-1) of a `world`-rank run of `role` against a fresh store, and
// collects their output and exits; kills them all past `limit`.
std::vector<RankOutput> run_ranks(const std::string& role, int world, int spawn,
                                  const std::map<std::string, std::string>& extra, milliseconds limit) {
  RendezvousServerOptions so;
  so.host = "127.0.0.1";
  so.token = launch::random_token();
  auto server = RendezvousServer::start(so);
  if (!server.ok()) qFatal("%s", server.status().message().c_str());

  std::vector<std::unique_ptr<launch::LocalProcess>> procs;
  for (int r = 0; r < spawn; ++r) {
    launch::WorkerEnv e;
    e.rank = r;
    e.local_rank = r;
    e.world_size = world;
    e.local_world_size = world;
    e.master_addr = "127.0.0.1";
    e.master_port = server.value()->port();
    e.token = so.token;
    launch::ProcessSpec spec;
    spec.argv = {self_exe()};
    spec.env = launch::to_environment(e);
    spec.env[kRoleVar] = role;
    for (const auto& [k, v] : extra) spec.env[k] = v;
    spec.rank = r;
    auto p = launch::LocalProcess::start(spec);
    if (!p.ok()) qFatal("%s", p.status().message().c_str());
    procs.push_back(std::move(p).value());
  }
  std::vector<RankOutput> outs(spawn);
  std::vector<bool> done(spawn, false);
  const auto deadline = Clock::now() + limit;
  for (int left = spawn; left > 0;) {
    for (int r = 0; r < spawn; ++r) {
      if (done[r]) continue;
      procs[r]->read_available(outs[r].out, outs[r].err);
      if (auto e = procs[r]->poll_exit()) {
        while (procs[r]->read_available(outs[r].out, outs[r].err)) {
        }
        outs[r].exit = *e;
        done[r] = true;
        --left;
      }
    }
    if (Clock::now() > deadline) {
      for (int r = 0; r < spawn; ++r) {
        if (!done[r]) procs[r]->kill();
      }
      qWarning("ranks still running after %lld ms; killed", static_cast<long long>(limit.count()));
      for (int r = 0; r < spawn; ++r) outs[r].exit = launch::ExitInfo{-1, 9};
      break;
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
  return outs;
}

QString describe(const std::vector<RankOutput>& outs) {
  QString s;
  for (size_t r = 0; r < outs.size(); ++r) {
    s += QString("rank %1: %2\n%3%4").arg(r).arg(QString::fromStdString(outs[r].exit.describe()),
                                               QString::fromStdString(outs[r].out), QString::fromStdString(outs[r].err));
  }
  return s;
}

}  // namespace

class TestComm : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Every rank's groups built by build_process_groups over Gloo, then either every collective
  // over the world and each TP, DP, PP (and embedding) group ("collectives"), or pipeline
  // traffic along each PP group ("p2p").
  void groupsOverGloo_data() {
    QTest::addColumn<QString>("role");
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::newRow("collectives: 2 ranks, dp=2") << "collectives" << 2 << 1 << 1;
    QTest::newRow("collectives: 3 ranks, tp=3 (not a power of two)") << "collectives" << 1 << 3 << 1;
    QTest::newRow("collectives: 4 ranks, dp=2 tp=2") << "collectives" << 2 << 2 << 1;
    QTest::newRow("collectives: 6 ranks, dp=3 pp=2") << "collectives" << 3 << 1 << 2;
    QTest::newRow("collectives: 8 ranks, dp=tp=pp=2 (docs/ARCHITECTURE.md §4)") << "collectives" << 2 << 2 << 2;
    QTest::newRow("p2p: 2 stages") << "p2p" << 1 << 1 << 2;
    QTest::newRow("p2p: 4 stages") << "p2p" << 1 << 1 << 4;
    QTest::newRow("p2p: 8 ranks, dp=tp=pp=2: PP groups [0,4] [1,5] [2,6] [3,7]") << "p2p" << 2 << 2 << 2;
  }
  void groupsOverGloo() {
    QFETCH(QString, role);
    QFETCH(int, dp);
    QFETCH(int, tp);
    QFETCH(int, pp);
    const int world = dp * tp * pp;
    const auto outs = run_ranks(role.toStdString(), world, world,
                                {{"COMM_TEST_DP", std::to_string(dp)}, {"COMM_TEST_TP", std::to_string(tp)},
                                 {"COMM_TEST_PP", std::to_string(pp)}},
                                milliseconds(60000));
    for (const auto& o : outs) QVERIFY2(o.exit.ok(), qPrintable(describe(outs)));
  }

  // A peer that never arrives, exits, is killed, or does not take part: rank 0 gets an error
  // naming what it was doing, within its timeout, and never hangs.
  void failingPeersEndInClearErrors_data() {
    QTest::addColumn<QString>("scenario");
    QTest::addColumn<int>("spawn");
    QTest::addColumn<int>("timeout_ms");
    QTest::addColumn<QStringList>("codes");  // acceptable Status codes
    QTest::addColumn<QStringList>("mentions");
    const QString timeout = QString::number(int(Status::Code::kTimeout));
    const QString unavailable = QString::number(int(Status::Code::kUnavailable));
    QTest::newRow("peer never arrives") << "absent" << 1 << 600 << QStringList{timeout}
                                        << QStringList{"world[0,1]", "rank(s) 1 did not join", "600 ms"};
    QTest::newRow("peer exits before a recv") << "exits" << 2 << 3000 << QStringList{timeout, unavailable}
                                              << QStringList{"recv of 1000 f32", "world[0,1]", "rank 1 (group rank 1)"};
    QTest::newRow("peer killed before an all_reduce") << "killed" << 2 << 3000 << QStringList{timeout, unavailable}
                                                      << QStringList{"all_reduce of 1000 f32", "world[0,1]"};
    QTest::newRow("peer killed before a background all_reduce") << "killed_async" << 2 << 3000 << QStringList{timeout, unavailable}
                                                                << QStringList{"all_reduce of 1000 f32", "world[0,1]"};
    QTest::newRow("peer killed during large all_reduces") << "killed_midway" << 2 << 3000 << QStringList{timeout, unavailable}
                                                          << QStringList{"all_reduce of 4194304 f32", "world[0,1]"};
    QTest::newRow("peer alive but skips the all_reduce")
        << "silent" << 2 << 500 << QStringList{timeout} << QStringList{"all_reduce", "world[0,1]", "timed out after 500 ms"};
  }
  void failingPeersEndInClearErrors() {
    QFETCH(QString, scenario);
    QFETCH(int, spawn);
    QFETCH(int, timeout_ms);
    QFETCH(QStringList, codes);
    QFETCH(QStringList, mentions);
    const auto outs = run_ranks(scenario.toStdString(), 2, spawn, {{"COMM_TEST_TIMEOUT_MS", std::to_string(timeout_ms)}},
                                milliseconds(20000));
    QVERIFY2(outs[0].exit.ok(), qPrintable(describe(outs)));
    const QString out = QString::fromStdString(outs[0].out);
    const int at = out.indexOf("STATUS ");
    QVERIFY2(at >= 0, qPrintable(describe(outs)));
    const QStringList parts = out.mid(at).section('\n', 0, 0).split(' ');
    const QString code = parts.value(1);
    const int ms = parts.value(2).toInt();
    const QString message = parts.mid(3).join(' ');
    qInfo("%d ms: %s", ms, qPrintable(message));  // what a person would read
    QVERIFY2(codes.contains(code), qPrintable("code " + code + ": " + message));
    for (const QString& m : mentions) QVERIFY2(message.contains(m), qPrintable("no '" + m + "' in: " + message));
    // Within the timeout (plus process and connect slack), never a hang.
    QVERIFY2(ms < timeout_ms + 2000, qPrintable(QString::number(ms) + " ms: " + message));
  }

  // A background all-reduce whose thread cannot start (here: an address-space limit that leaves
  // no room for its stack) fails at once, naming its group, and queues nothing, so the wait that
  // follows (a GradReducer's, even in a destructor) returns instead of waiting forever. In fresh
  // processes, with glibc's cache of thread stacks off, so that no stack is there to reuse.
  void backgroundAllReduceWithoutAThread() {
    const auto outs = run_ranks("lane_without_thread", 2, 2, {{"GLIBC_TUNABLES", "glibc.pthread.stack_cache_size=0"}}, milliseconds(30000));
    for (const auto& o : outs) QVERIFY2(o.exit.ok(), qPrintable(describe(outs)));
    QVERIFY2(outs[0].out.find("refused: ") != std::string::npos, qPrintable(describe(outs)));
  }

  // Groups of one rank need no transport: collectives are local, p2p has no peer.
  void singleRankGroup() {
    auto c = make_single_rank_communicator(5, "tp[5]");
    QVERIFY(c.ok());
    Communicator& comm = *c.value();
    std::vector<float> data = {1, 2, 3}, out(3);
    QVERIFY(comm.all_reduce(std::span<float>(data), ReduceOp::kAvg).ok());
    QCOMPARE(data, (std::vector<float>{1, 2, 3}));
    QVERIFY(comm.reduce_scatter(std::span<const float>(data), std::span<float>(out)).ok());
    QCOMPARE(out, data);
    QVERIFY(comm.all_gather(std::span<const float>(data), std::span<float>(out)).ok());
    QVERIFY(comm.broadcast(std::span<float>(data), 0).ok());
    std::fill(out.begin(), out.end(), 0.0f);
    QVERIFY(comm.all_to_all(std::span<const float>(data), std::span<float>(out)).ok());
    QCOMPARE(out, data);
    const std::vector<size_t> three = {3};
    std::fill(out.begin(), out.end(), 0.0f);
    QVERIFY(comm.all_to_all_v(std::span<const float>(data), three, std::span<float>(out), three).ok());
    QCOMPARE(out, data);
    QVERIFY(comm.barrier().ok());
    QCOMPARE(comm.send(std::span<const float>(data), 0).code(), Status::Code::kInvalidInput);
    QCOMPARE(comm.global_rank(), 5);
    QCOMPARE(comm.group_rank_of(5), 0);
    QCOMPARE(comm.group_rank_of(4), -1);
  }

  // What NCCL refuses before it touches a GPU, so the CPU suites check it: a device that is not
  // a GPU (in a CUDA build), or any call in a build without NCCL, each with one line; and the
  // refusal comes before any store traffic, so nothing waits.
  void ncclRefusesWithoutAGpu() {
    auto local = testing::start_local_store();
    QVERIFY2(local.ok(), local.ok() ? "" : local.status().message().c_str());
    RendezvousClient* store = local->client.get();
    NcclOptions o;
    o.name = "dp";
    o.timeout = std::chrono::milliseconds(200);
    auto c = create_nccl_communicator(*store, stagecraft::runtime::host_device(), 1, {0, 1}, o);
    QVERIFY(!c.ok());
    QCOMPARE(c.status().code(), Status::Code::kInvalidInput);
    const QString msg = QString::fromStdString(c.status().message());
    QVERIFY2(!msg.contains('\n'), qPrintable(msg));
    if (nccl_built()) {
      QVERIFY2(msg.contains("dp[0,1]") && msg.contains("NCCL needs a CUDA device") && msg.contains("comm: gloo"), qPrintable(msg));
    } else {
      QVERIFY2(msg.contains("comm=nccl: this build has no NCCL"), qPrintable(msg));
    }
    auto keys = store->check({"nccl/" + group_key({0, 1}) + "/joined"});
    QVERIFY(keys.ok());
    QVERIFY2(!keys.value(), "a refused creation must not join the group in the store");
    // A member outside its group is refused like Gloo's.
    auto outside = create_nccl_communicator(*store, stagecraft::runtime::host_device(), 3, {0, 1}, o);
    QCOMPARE(outside.status().code(), Status::Code::kInvalidInput);
  }

  // Store keys name a group by its size and a hash of its ranks: equal for equal lists, different
  // for another order or another member.
  void groupKeys() {
    QCOMPARE(QString::fromStdString(group_key({0, 1})).left(2), QString("2-"));
    QCOMPARE(group_key({0, 1}).size(), size_t(2 + 16));
    QCOMPARE(group_key({4, 5, 6}), group_key({4, 5, 6}));
    QVERIFY(group_key({0, 1}) != group_key({1, 0}));
    QVERIFY(group_key({0, 1}) != group_key({0, 2}));
  }

  void malformedGroupsRefused_data() {
    QTest::addColumn<QList<int>>("ranks");
    QTest::addColumn<int>("me");
    QTest::addColumn<QString>("mentions");
    QTest::newRow("empty") << QList<int>{} << 0 << "tp: a communicator needs at least one rank";
    QTest::newRow("duplicate rank") << QList<int>{0, 2, 2} << 0 << "tp[0,2,2]: rank 2 appears twice";
    QTest::newRow("negative rank") << QList<int>{0, -1} << 0 << "tp[0,-1]: rank -1 is negative";
    QTest::newRow("not a member") << QList<int>{2, 3} << 0 << "tp[2,3] does not contain rank 0";
  }
  void malformedGroupsRefused() {
    QFETCH(QList<int>, ranks);
    QFETCH(int, me);
    QFETCH(QString, mentions);
    auto local = testing::start_local_store();
    QVERIFY2(local.ok(), local.ok() ? "" : local.status().message().c_str());
    RendezvousClient* store = local->client.get();
    auto device = GlooDevice::create(gloo_device_options_from_env(*store));
    QVERIFY2(device.ok(), device.status().message().c_str());
    GlooOptions o;
    o.name = "tp";  // the group's label names it in the error
    auto c = create_gloo_communicator(*store, device.value(), me, std::vector<int>(ranks.begin(), ranks.end()), o);
    QVERIFY(!c.ok());
    QCOMPARE(c.status().code(), Status::Code::kInvalidInput);
    QVERIFY2(QString::fromStdString(c.status().message()).contains(mentions), c.status().message().c_str());
  }

  void deviceOptionsFromEnvironment_data() {
    QTest::addColumn<QString>("ifname");
    QTest::addColumn<QString>("gloo_ifname");
    QTest::addColumn<QString>("hostname");
    QTest::addColumn<QString>("want_iface");
    QTest::addColumn<QString>("want_host");
    QTest::newRow("nothing set: the store connection's address") << "" << "" << "" << "" << "127.0.0.1";
    QTest::newRow("STAGECRAFT_GLOO_IFNAME") << "lo" << "eth9" << "" << "lo" << "";
    QTest::newRow("GLOO_SOCKET_IFNAME (PyTorch's)") << "" << "lo" << "" << "lo" << "";
    QTest::newRow("STAGECRAFT_GLOO_HOSTNAME") << "" << "" << "localhost" << "" << "localhost";
  }
  void deviceOptionsFromEnvironment() {
    QFETCH(QString, ifname);
    QFETCH(QString, gloo_ifname);
    QFETCH(QString, hostname);
    QFETCH(QString, want_iface);
    QFETCH(QString, want_host);
    auto local = testing::start_local_store();
    QVERIFY2(local.ok(), local.ok() ? "" : local.status().message().c_str());
    RendezvousClient* store = local->client.get();
    const std::map<std::string, std::string> env = {{"STAGECRAFT_GLOO_IFNAME", ifname.toStdString()},
                                                     {"GLOO_SOCKET_IFNAME", gloo_ifname.toStdString()},
                                                     {"STAGECRAFT_GLOO_HOSTNAME", hostname.toStdString()}};
    const auto o = gloo_device_options_from_env(*store, [&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() || it->second.empty() ? nullptr : it->second.c_str();
    });
    QCOMPARE(QString::fromStdString(o.iface), want_iface);
    QCOMPARE(QString::fromStdString(o.hostname), want_host);
    auto device = GlooDevice::create(o);
    QVERIFY2(device.ok(), device.status().message().c_str());
  }

  void unknownInterfaceIsAClearError() {
    GlooDeviceOptions o;
    o.iface = "no-such-if0";
    auto d = GlooDevice::create(o);
    QVERIFY(!d.ok());
    QCOMPARE(d.status().code(), Status::Code::kUnavailable);
    QVERIFY2(d.status().message().find("no-such-if0") != std::string::npos, d.status().message().c_str());
  }
};

int main(int argc, char** argv) {
  if (const char* role = std::getenv(kRoleVar)) return worker_main(role);
  TestComm test;
  return QTest::qExec(&test, argc, argv);
}

#include "tst_comm.moc"
