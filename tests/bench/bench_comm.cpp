// bench_comm: all-reduce latency and bandwidth of the Gloo communicator over TCP on 127.0.0.1,
// printed like nccl-tests' all_reduce_perf, for 2, 4 and 8 processes.
//
// The program starts a store, then runs itself once per rank (BENCH_COMM_WORKER set) with the
// launcher's environment; rank 0 prints the table. Every size is timed in place on zeros (so the
// values stay put across iterations), after warm-up, and the time reported is the slowest
// rank's mean. Then one all-reduce of rank + 1 is checked: #wrong counts elements != P(P+1)/2.
//
//   algbw = size / time                      (GB/s = 1e9 bytes per second)
//   busbw = algbw * 2 (P - 1) / P            (nccl-tests' PERFORMANCE.md: what each link carries
//                                             in a ring all-reduce, comparable across P)
//
// Loopback has no wire: these figures measure Gloo's software path and the memory system, and
// with more processes than cores they measure the scheduler too. Usage:
//   bench_comm [--procs 2,4,8] [--min-bytes 4096] [--max-bytes 67108864]
#include "stagecraft/comm/communicator.h"
#include "stagecraft/comm/gloo_communicator.h"
#include "stagecraft/comm/rendezvous.h"
#include "stagecraft/launch/process.h"
#include "stagecraft/launch/worker_env.h"
#include "bench_world.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace stagecraft;
using namespace stagecraft::comm;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_comm: %s\n", msg.c_str());
  std::exit(1);
}

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

// Iterations for a size: many for small messages (latency-bound), few for large ones.
int iterations_for(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 5, 200));
}

int run_worker() {
  const bench::WorldRank w = bench::join_world("bench_comm");
  Communicator& c = *w.comm;
  const int P = c.size();
  const size_t min_bytes = env_size("BENCH_MIN_BYTES", 4096), max_bytes = env_size("BENCH_MAX_BYTES", size_t{64} << 20);

  std::vector<float> data(max_bytes / sizeof(float));  // (max count)
  if (w.env.rank == 0) {
    std::printf("# all_reduce, sum, f32, in place, Gloo TCP over 127.0.0.1, %d processes (%s)\n", P,
                w.device->description().c_str());
    std::printf("#%11s %13s %6s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "time", "algbw", "busbw",
                "#wrong");
    std::printf("#%11s %13s %6s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  double busbw_sum = 0;
  int rows = 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    std::span<float> buf(data.data(), count);
    std::fill(buf.begin(), buf.end(), 0.0f);
    const int iters = iterations_for(bytes);
    for (int i = 0; i < 3; ++i) {
      if (Status s = c.all_reduce(buf); !s) die(s.message());
    }
    if (Status s = c.barrier(); !s) die(s.message());
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (Status s = c.all_reduce(buf); !s) die(s.message());
    }
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
    if (Status s = c.all_reduce(std::span<double>(&us, 1), ReduceOp::kMax); !s) die(s.message());

    std::fill(buf.begin(), buf.end(), static_cast<float>(w.env.rank + 1));
    if (Status s = c.all_reduce(buf); !s) die(s.message());
    const float want = static_cast<float>(P * (P + 1) / 2);
    double wrong = static_cast<double>(std::count_if(buf.begin(), buf.end(), [&](float x) { return x != want; }));
    if (Status s = c.all_reduce(std::span<double>(&wrong, 1)); !s) die(s.message());

    const double algbw = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (P - 1) / P;
    busbw_sum += busbw;
    ++rows;
    if (w.env.rank == 0) {
      std::printf(" %11zu %13zu %6s %6s %10.1f %8.3f %8.3f %7.0f\n", bytes, count, "float", "sum", us, algbw, busbw, wrong);
      std::fflush(stdout);
    }
  }
  if (w.env.rank == 0) std::printf("# Avg bus bandwidth    : %.3f GB/s\n\n", busbw_sum / rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("BENCH_COMM_WORKER")) return run_worker();
  std::vector<int> procs = {2, 4, 8};
  size_t min_bytes = 4096, max_bytes = size_t{64} << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--procs" && v) {
      procs.clear();
      for (const char* p = v; *p;) {
        procs.push_back(std::atoi(p));
        p = std::strchr(p, ',');
        if (!p) break;
        ++p;
      }
      ++i;
    } else if (a == "--min-bytes" && v) {
      min_bytes = std::strtoull(v, nullptr, 10);
      ++i;
    } else if (a == "--max-bytes" && v) {
      max_bytes = std::strtoull(v, nullptr, 10);
      ++i;
    } else {
      std::fprintf(stderr, "usage: bench_comm [--procs 2,4,8] [--min-bytes 4096] [--max-bytes 67108864]\n");
      return 2;
    }
  }
  if (min_bytes < sizeof(float) || max_bytes < min_bytes) die("need 4 <= --min-bytes <= --max-bytes");
  std::printf("# bench_comm: %u hardware threads on this machine\n", std::thread::hardware_concurrency());
  for (int P : procs) {
    if (P < 2) die("--procs: each count must be at least 2");
    bench::run_world(P, {{"BENCH_COMM_WORKER", "1"}, {"BENCH_MIN_BYTES", std::to_string(min_bytes)}, {"BENCH_MAX_BYTES", std::to_string(max_bytes)}});
  }
  return 0;
}
