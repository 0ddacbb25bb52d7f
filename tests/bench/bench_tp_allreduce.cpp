// bench_tp_allreduce: the per-call time of the Gloo all-reduces a tensor-parallel layer makes on
// the CPU engine, between the ranks of one host, for the activation sizes such a layer sends
// (T x h floats: 256 tokens x 128 hidden is configs/tiny-gpt.yaml's 128 KiB, 512 x 256 is 512 KiB),
// for 2 and 4 processes of one thread each (the CPU engine's ranks on a machine with no more
// cores than ranks).
//
// Two ways per size, each the slowest rank's mean over the iterations:
//   back-to-back   all-reduces in a loop, as bench_comm times them;
//   between work   each all-reduce follows a burst of arithmetic of about one millisecond on every
//                  rank (a layer's GEMM on one core), as in a training step: a rank that finishes
//                  its burst first waits for the others, and the processes wake from their own
//                  work. The burst alone is timed first and subtracted.
// Then a least-squares line time = latency + bytes / bandwidth over the sizes, per way: the
// latency of one call and the bandwidth the cost model's ring formula needs (for the ring's
// 2 (P - 1) steps: latency / (2 (P - 1)) per step). config/device.cpp's cpu entry carries them.
// Usage: bench_tp_allreduce [--procs 2,4] [--burst-us 1000]
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
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace stagecraft;
using namespace stagecraft::comm;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "bench_tp_allreduce: %s\n", msg.c_str());
  std::exit(1);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Arithmetic over a cache-resident array, `passes` times; returns a value so nothing is elided.
float burst(std::vector<float>& a, int passes) {
  float acc = 0;
  for (int p = 0; p < passes; ++p) {
    for (float& x : a) {
      x = x * 0.999999f + 1e-6f;
      acc += x;
    }
  }
  return acc;
}

// time = latency + bytes / bandwidth by least squares; returns {latency s, bandwidth bytes/s}.
std::pair<double, double> fit_line(const std::vector<double>& bytes, const std::vector<double>& secs) {
  const double n = static_cast<double>(bytes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    sx += bytes[i];
    sy += secs[i];
    sxx += bytes[i] * bytes[i];
    sxy += bytes[i] * secs[i];
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double icpt = (sy - slope * sx) / n;
  return {icpt, slope > 0 ? 1.0 / slope : 0.0};
}

int run_worker() {
  const bench::WorldRank w = bench::join_world("bench_tp_allreduce");
  Communicator& c = *w.comm;
  const int P = c.size();
  const char* b = std::getenv("BENCH_BURST_US");
  const double burst_target = (b && *b ? std::atof(b) : 1000.0) * 1e-6;

  // The burst's passes for about burst_target seconds, and its time alone (median of 21).
  std::vector<float> work(16384, 1.0f);
  volatile float sink = 0;
  int passes = 1;
  for (;;) {
    const auto t0 = Clock::now();
    sink = sink + burst(work, passes);
    if (seconds_since(t0) >= burst_target || passes > (1 << 20)) break;
    passes *= 2;
  }
  std::vector<double> alone;
  for (int i = 0; i < 21; ++i) {
    const auto t0 = Clock::now();
    sink = sink + burst(work, passes);
    alone.push_back(seconds_since(t0));
  }
  std::sort(alone.begin(), alone.end());
  const double burst_s = alone[alone.size() / 2];

  const std::vector<size_t> sizes = {size_t{64} << 10, size_t{128} << 10, size_t{256} << 10, size_t{512} << 10, size_t{1} << 20, size_t{2} << 20};
  std::vector<float> data(sizes.back() / sizeof(float));
  if (w.env.rank == 0) {
    std::printf("# all_reduce, sum, f32, Gloo TCP over 127.0.0.1, %d processes of one thread; burst alone %.0f us\n", P, burst_s * 1e6);
    std::printf("#%11s %8s %16s %16s\n", "size", "iters", "back-to-back", "between work");
    std::printf("#%11s %8s %16s %16s\n", "(B)", "", "(us per call)", "(us per call)");
  }
  std::vector<double> xs, plain, between;
  for (size_t bytes : sizes) {
    std::span<float> buf(data.data(), bytes / sizeof(float));
    std::fill(buf.begin(), buf.end(), 0.0f);
    const int iters = 200;
    for (int i = 0; i < 3; ++i) {
      if (Status s = c.all_reduce(buf); !s) die(s.message());
    }
    if (Status s = c.barrier(); !s) die(s.message());
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      if (Status s = c.all_reduce(buf); !s) die(s.message());
    }
    double t_plain = seconds_since(t0) / iters;
    if (Status s = c.barrier(); !s) die(s.message());
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      sink = sink + burst(work, passes);
      if (Status s = c.all_reduce(buf); !s) die(s.message());
    }
    double t_between = seconds_since(t0) / iters - burst_s;
    if (Status s = c.all_reduce(std::span<double>(&t_plain, 1), ReduceOp::kMax); !s) die(s.message());
    if (Status s = c.all_reduce(std::span<double>(&t_between, 1), ReduceOp::kMax); !s) die(s.message());
    xs.push_back(static_cast<double>(bytes));
    plain.push_back(t_plain);
    between.push_back(t_between);
    if (w.env.rank == 0) {
      std::printf(" %11zu %8d %16.1f %16.1f\n", bytes, iters, t_plain * 1e6, t_between * 1e6);
      std::fflush(stdout);
    }
  }
  if (w.env.rank == 0) {
    const auto [l0, bw0] = fit_line(xs, plain);
    const auto [l1, bw1] = fit_line(xs, between);
    std::printf("# fit back-to-back: latency %.1f us per call (%.1f us per ring step), %.3f GB/s algorithm bandwidth\n", l0 * 1e6,
                l0 * 1e6 / (2 * (P - 1)), bw0 / 1e9);
    std::printf("# fit between work: latency %.1f us per call (%.1f us per ring step), %.3f GB/s algorithm bandwidth\n\n", l1 * 1e6,
                l1 * 1e6 / (2 * (P - 1)), bw1 / 1e9);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("BENCH_TP_WORKER")) return run_worker();
  std::vector<int> procs = {2, 4};
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
    } else if (a == "--burst-us" && v) {
      ::setenv("BENCH_BURST_US", v, 1);
      ++i;
    } else {
      std::fprintf(stderr, "usage: bench_tp_allreduce [--procs 2,4] [--burst-us 1000]\n");
      return 2;
    }
  }
  std::printf("# bench_tp_allreduce: %u hardware threads on this machine\n", std::thread::hardware_concurrency());
  for (int P : procs) {
    if (P < 2) die("--procs: each count must be at least 2");
    std::map<std::string, std::string> env = {{"BENCH_TP_WORKER", "1"}};
    if (const char* b = std::getenv("BENCH_BURST_US")) env["BENCH_BURST_US"] = b;
    bench::run_world(P, env);
  }
  return 0;
}
