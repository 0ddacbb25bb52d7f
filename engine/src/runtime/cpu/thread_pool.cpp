// The CPU backend's thread pool (thread_pool.h) and its thread count (kernels.h).
//
// Protocol. The caller (one at a time: busy_) publishes a job: fn, ctx, pieces, then claim_ =
// (generation << 32 | 0), then generation_ (release). Workers spin ~50 us on generation_, then
// sleep on it (futex via std::atomic::wait). Everyone claims pieces by compare-and-swap on claim_,
// which succeeds only while its generation is the job's, so a worker that wakes after its job has
// ended can never run a piece of the next job with the old fn. The caller returns when done_
// reaches the number of pieces; it never waits for a worker that has not claimed a piece.
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

class ThreadPool {
 public:
  ~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int pieces, int threads, detail::PieceFn fn, void* ctx) {
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

 private:
  // Claims and runs pieces of job g until none is left.
  void work(uint32_t g, detail::PieceFn fn, void* ctx, int pieces) {
    uint64_t c = claim_.load();
    while (uint32_t(c >> 32) == g && uint32_t(c) < uint32_t(pieces)) {
      if (claim_.compare_exchange_weak(c, c + 1)) {
        fn(ctx, int(uint32_t(c)));
        done_.fetch_add(1);
        c = claim_.load();
      }
    }
  }

  void worker(int id) {
    uint32_t seen = generation_.load(std::memory_order_acquire);
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

  // Called by the one running caller only.
  void grow(int n) {
    while (int(workers_.size()) < n) {
      const int id = int(workers_.size());
      workers_.emplace_back([this, id] { worker(id); });
    }
  }

  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> helpers_{0};
  std::atomic<detail::PieceFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int> pieces_{0};
  std::vector<std::thread> workers_;
};

ThreadPool& pool() {
  static ThreadPool p;
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
