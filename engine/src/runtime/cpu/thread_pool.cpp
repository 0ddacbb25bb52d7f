// The CPU backend's thread pool (thread_pool.h, which gives its protocol) and its thread count
// (kernels.h).
#include "runtime/cpu/thread_pool.h"

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr int kSpin = 2000;  // pause instructions (~50 us) before a worker sleeps
constexpr uint32_t kClosed = 0xffffffffu;  // claim_'s index while a job is being published

}  // namespace

namespace detail {

ThreadPool::ThreadPool(void (*on_start)()) : on_start_(on_start) {}

ThreadPool::~ThreadPool() {
  // stop_ before generation_ moves (release): a worker that reads the moved generation sees stop_.
  stop_.store(true);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(int pieces, int threads, PieceFn fn, void* ctx) {
  if (busy_.exchange(true, std::memory_order_acquire)) {
    for (int i = 0; i < pieces; ++i) fn(ctx, i);
    return;
  }
  grow(threads - 1);
  // Sequentially consistent throughout: a worker that read this job's fields and then claims a
  // piece of it cannot have read a later job's fields (the later job closes claim_ first).
  const uint32_t g = generation_.load() + 1;
  claim_.store(uint64_t(g) << 32 | kClosed);  // job g, nothing to claim while it is written
  fn_.store(fn);
  ctx_.store(ctx);
  pieces_.store(pieces);
  helpers_.store(threads - 1);
  done_.store(0);
  claim_.store(uint64_t(g) << 32);
  generation_.store(g);
  if (sleepers_.load() > 0) generation_.notify_all();
  work(g, fn, ctx, pieces);
  for (int spins = 0; done_.load(std::memory_order_acquire) != pieces; ++spins) {
    if (spins < kSpin) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a preempted worker holds a piece: let it run
    }
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::work(uint32_t g, PieceFn fn, void* ctx, int pieces) {
  uint64_t c = claim_.load();
  while (uint32_t(c >> 32) == g && uint32_t(c) < uint32_t(pieces)) {
    if (claim_.compare_exchange_weak(c, c + 1)) {
      fn(ctx, int(uint32_t(c)));
      done_.fetch_add(1);
      c = claim_.load();
    }
  }
}

void ThreadPool::worker(int id) {
  if (on_start_) on_start_();
  uint32_t seen = generation_.load(std::memory_order_acquire);
  // A thread that first runs after the destructor moved generation_ on would otherwise wait for a
  // generation that never comes, and the process would never exit; having read the moved
  // generation, it sees stop_.
  if (stop_.load()) return;
  for (;;) {
    uint32_t g = seen;
    for (int i = 0; i < kSpin && (g = generation_.load(std::memory_order_acquire)) == seen; ++i) cpu_relax();
    if (g == seen) {
      sleepers_.fetch_add(1);  // seq_cst with run()'s store of generation_ then load of sleepers_
      while ((g = generation_.load()) == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = g;
    if (id >= helpers_.load()) continue;  // this job wants fewer threads
    work(g, fn_.load(), ctx_.load(), pieces_.load());
  }
}

void ThreadPool::grow(int n) {
  while (int(workers_.size()) < n) {
    const int id = int(workers_.size());
    workers_.emplace_back([this, id] { worker(id); });
  }
}

int ThreadPool::threads() const { return int(workers_.size()); }

}  // namespace detail

namespace {

detail::ThreadPool& pool() {
  static detail::ThreadPool p;
  return p;
}

std::atomic<int> g_threads{0};  // 0: the default

int default_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("OMP_NUM_THREADS")) {
      const int v = std::atoi(env);
      if (v > 0) return v;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, int(std::thread::hardware_concurrency()));
  }();
  return n;
}

}  // namespace

void set_num_threads(int n) { g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : default_threads();
}

namespace detail {

void run_pieces(int pieces, int threads, PieceFn fn, void* ctx) {
  if (pieces <= 0) return;
  if (threads <= 1 || pieces == 1) {
    for (int i = 0; i < pieces; ++i) fn(ctx, i);
    return;
  }
  pool().run(pieces, threads, fn, ctx);
}

}  // namespace detail
}  // namespace stagecraft::runtime::cpu
