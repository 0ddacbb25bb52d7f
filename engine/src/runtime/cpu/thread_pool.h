// The CPU backend's threads: a small pool that runs a loop's pieces on the calling thread plus
// workers, handing pieces out one at a time.
//
// Why not OpenMP: a parallel region ends at a barrier that every thread of the team must reach,
// so when another process holds one of the cores (a build, a second rank), each of the ~150
// regions of a training step waits a scheduler time slice for the preempted thread; measured here
// with 2 threads on 2 busy cores, a GPT block took 2.6x longer than on 1 thread. In this pool
// the caller claims pieces itself and only waits for pieces that a worker has already started:
// a worker that wakes late finds nothing left and goes back to sleep. It also needs no OpenMP
// runtime in the processes that link the engine, and no environment variable to tune.
//
// Not part of the engine's API; used by src/runtime/cpu/*.cpp and rng.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace stagecraft::runtime::cpu::detail {

using PieceFn = void (*)(void* ctx, int piece);

// The pool behind run_pieces (one per process; the suites make their own).
//
// Protocol. The caller (one at a time: busy_) publishes a job: fn, ctx, pieces, then claim_ =
// (generation << 32 | 0), then generation_ (release). Workers spin ~50 us on generation_, then
// sleep on it (futex via std::atomic::wait). Everyone claims pieces by compare-and-swap on claim_,
// which succeeds only while its generation is the job's, so a worker that wakes after its job has
// ended can never run a piece of the next job with the old fn. The caller returns when done_
// reaches the number of pieces; it never waits for a worker that has not claimed a piece. The
// destructor stops every worker, including one whose thread first runs after it began.
class ThreadPool {
 public:
  // on_start, where given, runs first on each worker thread (the suites delay workers with it).
  explicit ThreadPool(void (*on_start)() = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // fn(ctx, i) for every i in [0, pieces) on up to `threads` threads, the caller included; a call
  // made while another runs runs its pieces inline.
  void run(int pieces, int threads, PieceFn fn, void* ctx);
  int threads() const;  // worker threads made so far

 private:
  void work(uint32_t g, PieceFn fn, void* ctx, int pieces);  // claims and runs pieces of job g
  void worker(int id);
  void grow(int n);  // called by the one running caller only

  void (*on_start_)() = nullptr;
  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> helpers_{0};
  std::atomic<PieceFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int> pieces_{0};
  std::vector<std::thread> workers_;
};

// Runs fn(ctx, i) for every i in [0, pieces) on up to `threads` threads, the caller included;
// returns when all are done. A call made while another is running (from a second thread, or
// from inside a piece) runs its pieces inline on the calling thread.
void run_pieces(int pieces, int threads, PieceFn fn, void* ctx);

// Calls f(begin, end) over [0, n) in pieces of `grain` items (the last one shorter), spread over
// up to `threads` threads. The pieces depend on n and grain only, never on the thread count, so a
// piece that reduces (a column block of a weight gradient) gives the same bits on any machine.
template <typename F>
void parallel_for(size_t n, size_t grain, int threads, F&& f) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t pieces = (n + grain - 1) / grain;
  if (pieces == 1 || threads <= 1) {
    for (size_t b = 0; b < n; b += grain) f(b, std::min(n, b + grain));
    return;
  }
  struct Ctx {
    std::remove_reference_t<F>* f;
    size_t n, grain;
  } ctx{&f, n, grain};
  run_pieces(int(pieces), int(std::min<size_t>(size_t(threads), pieces)),
             [](void* c, int i) {
               auto* x = static_cast<Ctx*>(c);
               const size_t b = size_t(i) * x->grain;
               (*x->f)(b, std::min(x->n, b + x->grain));
             },
             &ctx);
}

}  // namespace stagecraft::runtime::cpu::detail
