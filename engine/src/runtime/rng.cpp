// Block fills of the counter-based RNG (rng.h), rows spread over the CPU backend's threads.
#include "stagecraft/runtime/rng.h"

#include <algorithm>
#include <cassert>

#include "runtime/cpu/thread_pool.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime {

namespace {

template <typename Real, typename Draw>
void fill_block(Real* out, int64_t ld, const TensorBlock& b, Draw draw) {
  assert(b.rows >= 0 && b.cols >= 0 && b.col0 + b.cols <= b.full_cols);
  if (ld == 0) ld = b.cols;
  assert(ld >= b.cols);
  // ~50 ns a value: pieces of 4096 values, one thread per 16K.
  const size_t n = size_t(b.rows) * size_t(b.cols);
  const int nt = int(std::min<size_t>(size_t(cpu::num_threads()), n / 16384 + 1));
  cpu::detail::parallel_for(n, 4096, nt, [&](size_t first, size_t last) {
    for (size_t k = first; k < last; ++k) {
      const int64_t i = int64_t(k / size_t(b.cols)), j = int64_t(k % size_t(b.cols));
      out[i * ld + j] = Real(draw(uint64_t((b.row0 + i) * b.full_cols + b.col0 + j)));
    }
  });
}

}  // namespace

template <typename Real>
void fill_normal(Real* out, int64_t ld, const TensorBlock& block, double mean, double stddev,
                 uint64_t seed, uint64_t stream) {
  fill_block(out, ld, block, [&](uint64_t k) { return mean + stddev * rng_normal(seed, stream, k); });
}

template <typename Real>
void fill_uniform(Real* out, int64_t ld, const TensorBlock& block, double lo, double hi, uint64_t seed,
                  uint64_t stream) {
  fill_block(out, ld, block, [&](uint64_t k) { return lo + (hi - lo) * rng_uniform(seed, stream, k); });
}

template void fill_normal<float>(float*, int64_t, const TensorBlock&, double, double, uint64_t, uint64_t);
template void fill_normal<double>(double*, int64_t, const TensorBlock&, double, double, uint64_t, uint64_t);
template void fill_uniform<float>(float*, int64_t, const TensorBlock&, double, double, uint64_t, uint64_t);
template void fill_uniform<double>(double*, int64_t, const TensorBlock&, double, double, uint64_t, uint64_t);

}  // namespace stagecraft::runtime
