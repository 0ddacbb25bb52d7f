// CPU element-wise and per-row kernels: layernorm, GELU, residual, embeddings, softmax and
// cross-entropy, AdamW, sum of squares (per range, and over a list of segments in one call).
// Llama's RMSNorm, rotary positions and SwiGLU are llama.cpp's.
//
// Every loop is a parallel_for (thread_pool.h) over rows or blocks of elements, with `omp simd`
// inner loops so that GCC vectorises them (-fopenmp-simd: the pragmas only, no OpenMP runtime);
// float uses exp_fast/sigmoid_fast (cpu_math.h) where double uses std::exp. Reductions that cross
// rows (layernorm's dweight, the embeddings' gradients) give each piece a block of columns instead
// of a private copy, so results do not depend on the thread count.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "runtime/cpu/cpu_math.h"
#include "runtime/cpu/thread_pool.h"
#include "runtime/element_math.h"
#include "stagecraft/runtime/kernels.h"

namespace stagecraft::runtime::cpu {

namespace {

using detail::parallel_for;
using detail::threads_for;

// Pieces: ~16K elements (a few microseconds of work, so that claiming one costs nothing), or the
// rows that hold that many.
constexpr size_t kGrain = 16384;
size_t rows_grain(int row_len) { return std::max<size_t>(1, kGrain / size_t(std::max(row_len, 1))); }
// Columns per piece of a cross-row reduction: 256 bytes of each row in float, so that the rows
// stream (16 columns ran 2x slower), and still 4 pieces for C = 256.
constexpr size_t kColumnGrain = 64;

}  // namespace

// ---- layernorm ---------------------------------------------------------------------------------

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C) {
  // out (N, C), mean (N), rstd (N), inp (N, C), weight (C), bias (C)
  assert(out && mean && rstd && inp && weight && bias && N >= 0 && C > 0);
  parallel_for(size_t(N), rows_grain(C), threads_for(size_t(N) * C), [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      const Real* x = inp + i * C;
      Real* o = out + i * C;
      Real s = 0;
#pragma omp simd reduction(+ : s)
      for (int c = 0; c < C; ++c) s += x[c];
      const Real m = s / C;
      Real v = 0;
#pragma omp simd reduction(+ : v)
      for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
      const Real r = element::layernorm_rstd(v / C);
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
      mean[i] = m;
      rstd[i] = r;
    }
  });
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C) {
  // dinp (N, C), dweight (C), dbias (C), dout (N, C), inp (N, C), weight (C), mean (N), rstd (N)
  assert(dout && inp && weight && mean && rstd && N >= 0 && C > 0);
  const int nt = threads_for(size_t(N) * C);
  if (dinp != nullptr) {
    parallel_for(size_t(N), rows_grain(C), nt, [&](size_t first, size_t last) {
      for (size_t i = first; i < last; ++i) {
        const Real* x = inp + i * C;
        const Real* dy = dout + i * C;
        Real* dx = dinp + i * C;
        const Real m = mean[i], r = rstd[i];
        // dnorm = dy w;  dx = r (dnorm - mean(dnorm) - norm mean(dnorm norm))
        Real a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
        for (int c = 0; c < C; ++c) {
          const Real dn = dy[c] * weight[c];
          a += dn;
          b += dn * (x[c] - m) * r;
        }
        a /= C;
        b /= C;
#pragma omp simd
        for (int c = 0; c < C; ++c) dx[c] += element::layernorm_dx(dy[c], weight[c], (x[c] - m) * r, r, a, b);
      }
    });
  }
  if (dweight != nullptr || dbias != nullptr) {
    parallel_for(size_t(C), kColumnGrain, nt, [&](size_t c0, size_t c1) {
      for (int i = 0; i < N; ++i) {
        const Real* x = inp + size_t(i) * C;
        const Real* dy = dout + size_t(i) * C;
        const Real m = mean[i], r = rstd[i];
        if (dweight != nullptr) {
#pragma omp simd
          for (size_t c = c0; c < c1; ++c) dweight[c] += dy[c] * (x[c] - m) * r;
        }
        if (dbias != nullptr) {
#pragma omp simd
          for (size_t c = c0; c < c1; ++c) dbias[c] += dy[c];
        }
      }
    });
  }
}

// ---- GELU ----------------------------------------------------------------------------------------

namespace {

template <typename Real>
[[gnu::always_inline]] inline void gelu_forward_range(Real* out, const Real* inp, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const Real x = inp[i];
    out[i] = element::gelu_value(x, detail::sigmoid_real(element::gelu_arg(x)));
  }
}

template <typename Real>
[[gnu::always_inline]] inline void gelu_backward_range(Real* dinp, const Real* inp, const Real* dout,
                                                       size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const Real x = inp[i];
    dinp[i] = dout[i] * element::gelu_slope(x, detail::sigmoid_real(element::gelu_arg(x)));
  }
}

// The float loops in 8-lane AVX2 where the CPU has it (see STAGECRAFT_SIMD_CLONES).
STAGECRAFT_SIMD_CLONES void gelu_forward_f32(float* out, const float* inp, size_t n) {
  gelu_forward_range(out, inp, n);
}
STAGECRAFT_SIMD_CLONES void gelu_backward_f32(float* dinp, const float* inp, const float* dout, size_t n) {
  gelu_backward_range(dinp, inp, dout, n);
}

}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t N) {
  // out (N), inp (N)
  parallel_for(N, kGrain, threads_for(N * 8), [&](size_t first, size_t last) {
    if constexpr (std::is_same_v<Real, float>) {
      gelu_forward_f32(out + first, inp + first, last - first);
    } else {
      gelu_forward_range(out + first, inp + first, last - first);
    }
  });
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t N) {
  // dinp (N), inp (N), dout (N)
  parallel_for(N, kGrain, threads_for(N * 8), [&](size_t first, size_t last) {
    if constexpr (std::is_same_v<Real, float>) {
      gelu_backward_f32(dinp + first, inp + first, dout + first, last - first);
    } else {
      gelu_backward_range(dinp + first, inp + first, dout + first, last - first);
    }
  });
}

// ---- residual --------------------------------------------------------------------------------

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, size_t N) {
  // out (N), inp1 (N), inp2 (N)
  parallel_for(N, kGrain, threads_for(N), [&](size_t first, size_t last) {
#pragma omp simd
    for (size_t i = first; i < last; ++i) out[i] = inp1[i] + inp2[i];
  });
}

void to_bf16(bf16* out, const float* in, size_t N) {
  // out (N), in (N)
  parallel_for(N, kGrain, threads_for(N), [&](size_t first, size_t last) {
#pragma omp simd
    for (size_t i = first; i < last; ++i) out[i] = runtime::to_bf16(in[i]);
  });
}

void from_bf16(float* out, const bf16* in, size_t N) {
  // out (N), in (N)
  parallel_for(N, kGrain, threads_for(N), [&](size_t first, size_t last) {
#pragma omp simd
    for (size_t i = first; i < last; ++i) out[i] = runtime::to_float(in[i]);
  });
}

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, size_t N) {
  // dinp1 (N), dinp2 (N), dout (N)
  if (dinp1 != nullptr) {
    parallel_for(N, kGrain, threads_for(N), [&](size_t first, size_t last) {
#pragma omp simd
      for (size_t i = first; i < last; ++i) dinp1[i] += dout[i];
    });
  }
  if (dinp2 != nullptr) {
    parallel_for(N, kGrain, threads_for(N), [&](size_t first, size_t last) {
#pragma omp simd
      for (size_t i = first; i < last; ++i) dinp2[i] += dout[i];
    });
  }
}

// ---- embeddings ------------------------------------------------------------------------------

template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B,
                     int T, int C) {
  // out (B, T, C), tokens (B, T), wte (V, C), wpe (>= T, C) or nullptr (no learned positions)
  assert(out && tokens && wte);
  const int BT = B * T;
  parallel_for(size_t(BT), rows_grain(C), threads_for(size_t(BT) * C), [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      const Real* e = wte + size_t(tokens[i]) * C;
      Real* o = out + i * C;
      if (wpe == nullptr) {
        std::copy(e, e + C, o);
        continue;
      }
      const Real* p = wpe + (i % T) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B,
                      int T, int C) {
  // dwte (V, C), dwpe (>= T, C) or nullptr, dout (B, T, C), tokens (B, T)
  assert(dout && tokens);
  // Each piece owns a block of columns, so two positions with the same token never race.
  parallel_for(size_t(C), kColumnGrain, threads_for(size_t(B) * T * C), [&](size_t c0, size_t c1) {
    for (int i = 0; i < B * T; ++i) {
      const Real* d = dout + size_t(i) * C;
      Real* w = dwte != nullptr ? dwte + size_t(tokens[i]) * C : nullptr;
      Real* p = dwpe != nullptr ? dwpe + size_t(i % T) * C : nullptr;
      if (w != nullptr) {
#pragma omp simd
        for (size_t c = c0; c < c1; ++c) w[c] += d[c];
      }
      if (p != nullptr) {
#pragma omp simd
        for (size_t c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  });
}

// ---- softmax and cross-entropy -----------------------------------------------------------------

namespace {

// probs (rows, V) = softmax(logits (rows, V)); lse_add (rows), when given, += log-sum-exp of
// each row. probs may alias logits.
template <typename Real>
[[gnu::always_inline]] inline void softmax_rows(Real* probs, const Real* logits, Real* lse_add,
                                                size_t rows, int V) {
  for (size_t i = 0; i < rows; ++i) {
    const Real lse = detail::softmax_row(probs + i * V, logits + i * V, V);
    if (lse_add != nullptr) lse_add[i] += lse;
  }
}

STAGECRAFT_SIMD_CLONES void softmax_rows_f32(float* probs, const float* logits, float* lse_add,
                                             size_t rows, int V) {
  softmax_rows(probs, logits, lse_add, rows, V);
}
void softmax_rows_any(float* probs, const float* logits, float* lse_add, size_t rows, int V) {
  softmax_rows_f32(probs, logits, lse_add, rows, V);
}
void softmax_rows_any(double* probs, const double* logits, double* lse_add, size_t rows, int V) {
  softmax_rows(probs, logits, lse_add, rows, V);
}

}  // namespace

template <typename Real>
void softmax_forward(Real* probs, const Real* logits, int N, int V) {
  // probs (N, V), logits (N, V)
  parallel_for(size_t(N), rows_grain(V), threads_for(size_t(N) * V * 4), [&](size_t first, size_t last) {
    softmax_rows_any(probs + first * V, logits + first * V, static_cast<Real*>(nullptr), last - first, V);
  });
}

template <typename Real>
double crossentropy_forward(Real* losses, Real* probs, const Real* logits, const int32_t* targets,
                            int N, int V) {
  // losses (N), probs (N, V), logits (N, V), targets (N)
  assert(losses && probs && logits && targets);
  parallel_for(size_t(N), rows_grain(V), threads_for(size_t(N) * V * 4), [&](size_t first, size_t last) {
    // loss = lse - logit[target]; the target logits first, before probs overwrite them
    for (size_t i = first; i < last; ++i) losses[i] = -logits[i * V + targets[i]];
    softmax_rows_any(probs + first * V, logits + first * V, losses + first, last - first, V);
  });
  double sum = 0;
  for (int i = 0; i < N; ++i) sum += losses[i];
  return N > 0 ? sum / N : 0.0;
}

template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* probs, const int32_t* targets, Real dloss,
                           int N, int V) {
  // dlogits (N, V), probs (N, V), targets (N)
  parallel_for(size_t(N), rows_grain(V), threads_for(size_t(N) * V), [&](size_t first, size_t last) {
    for (size_t i = first; i < last; ++i) {
      const Real* p = probs + i * V;
      Real* d = dlogits + i * V;
#pragma omp simd
      for (int j = 0; j < V; ++j) d[j] = dloss * p[j];
      d[targets[i]] -= dloss;
    }
  });
}

// ---- AdamW and norms -------------------------------------------------------------------------

namespace {

template <typename Real>
[[gnu::always_inline]] inline void adamw_range(Real* p, Real* m, Real* v, const Real* g, size_t n,
                                               const element::AdamWStep<Real>& st) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) element::adamw(p[i], m[i], v[i], g[i], st);
}

// sum_of_squares' chunks of a range of N elements: at least 64K elements, at most kMaxChunks of
// them, depending on N only.
constexpr size_t kMaxChunks = 4096;
size_t squares_chunk(size_t N) { return std::max<size_t>(size_t(1) << 16, (N + kMaxChunks - 1) / kMaxChunks); }

// The sum of x[i]^2 over [0, n) in double, in index order: the one loop of sum_of_squares and of
// sum_of_squares_segments, so that both give the same bits. Deliberately not `omp simd`: index
// order is the one the gradient norm has been computed in (GCC kept the loop scalar under the
// pragma too), and a vectorised sum would change its last bits.
template <typename Real>
[[gnu::noinline]] double squares_range(const Real* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

}  // namespace

template <typename Real>
void adamw_update(Real* params, Real* m, Real* v, const Real* grads, size_t N,
                  const AdamWOptions& opt, int64_t step, bool decay, Real grad_scale) {
  // params (N), m (N), v (N), grads (N)
  assert(step >= 1);
  const auto st = element::adamw_step<Real>(opt, step, decay, grad_scale);
  parallel_for(N, kGrain, threads_for(N * 4), [&](size_t first, size_t last) {
    adamw_range(params + first, m + first, v + first, grads + first, last - first, st);
  });
}

template <typename Real>
double sum_of_squares(const Real* x, size_t N) {
  // x (N)
  const size_t chunk = squares_chunk(N);
  const size_t chunks = (N + chunk - 1) / chunk;
  double partial[kMaxChunks];
  parallel_for(N, chunk, threads_for(N), [&](size_t first, size_t last) {
    partial[first / chunk] = squares_range(x + first, last - first);
  });
  double total = 0;
  for (size_t k = 0; k < chunks; ++k) total += partial[k];
  return total;
}

size_t layout_segments(Segment* segs, size_t n) {
  size_t total = 0;
  for (size_t k = 0; k < n; ++k) {
    segs[k].first = total;
    total += segs[k].count;
  }
  return total;
}

size_t segment_of(const Segment* segs, size_t n, size_t i, size_t hint) { return element::segment_of(segs, n, i, hint); }

template <typename Real>
void adamw_update_segments(Real* params, Real* m, Real* v, const Real* grads, const Segment* segs,
                           size_t nsegs, const AdamWOptions& opt, int64_t step, Real grad_scale) {
  // params, grads (>= every begin + count); m, v (>= every moment + count); segs (nsegs)
  assert(step >= 1);
  if (nsegs == 0) return;
  const size_t total = segs[nsegs - 1].first + segs[nsegs - 1].count;
  const auto plain = element::adamw_step<Real>(opt, step, false, grad_scale);
  const auto decayed = element::adamw_step<Real>(opt, step, true, grad_scale);
  // Pieces of the concatenation, each over the segments it overlaps (an empty one adds n = 0).
  parallel_for(total, kGrain, threads_for(total * 4), [&](size_t first, size_t last) {
    for (size_t k = element::segment_of(segs, nsegs, first); first < last; ++k) {
      const Segment& s = segs[k];
      const size_t off = first - s.first, n = std::min(last, s.first + s.count) - first;
      adamw_range(params + s.begin + off, m + s.moment + off, v + s.moment + off, grads + s.begin + off, n,
                  s.decay ? decayed : plain);
      first += n;
    }
  });
}

template <typename Real>
double sum_of_squares_segments(const Real* x, const Segment* segs, size_t nsegs) {
  // x (>= every begin + count); segs (nsegs)
  // Pieces: every segment's chunks as sum_of_squares cuts them, taken in windows of kWindow so
  // that nothing is allocated. A window's pieces run on the threads; its partials are then added
  // in order, each segment's from 0 and the segments' sums to the total, as the per-segment
  // calls would be: the window boundaries change no bit.
  constexpr size_t kWindow = 1024;
  struct Piece {
    const Real* x;
    size_t n;
    bool closes;  // the segment's last chunk
  };
  Piece piece[kWindow];
  double partial[kWindow];
  size_t pieces = 0, elements = 0;
  double total = 0, segment = 0;
  auto run_window = [&] {
    parallel_for(pieces, 1, threads_for(elements), [&](size_t first, size_t last) {
      for (size_t k = first; k < last; ++k) partial[k] = squares_range(piece[k].x, piece[k].n);
    });
    for (size_t k = 0; k < pieces; ++k) {
      segment += partial[k];
      if (piece[k].closes) {
        total += segment;
        segment = 0;
      }
    }
    pieces = elements = 0;
  };
  for (size_t k = 0; k < nsegs; ++k) {
    const Segment& s = segs[k];
    const size_t chunk = squares_chunk(s.count);
    for (size_t b = 0; b < s.count; b += chunk) {
      const size_t n = std::min(chunk, s.count - b);
      piece[pieces++] = {x + s.begin + b, n, b + n == s.count};
      elements += n;
      if (pieces == kWindow) run_window();
    }
  }
  run_window();
  return total;
}

template <typename Real>
void scale(Real* x, size_t N, Real s) {
  // x (N)
  parallel_for(N, kGrain, threads_for(N), [&](size_t first, size_t last) {
#pragma omp simd
    for (size_t i = first; i < last; ++i) x[i] *= s;
  });
}

#define STAGECRAFT_INSTANTIATE(Real)                                                                 \
  template void layernorm_forward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, \
                                        int, int);                                                  \
  template void layernorm_backward<Real>(Real*, Real*, Real*, const Real*, const Real*,             \
                                         const Real*, const Real*, const Real*, int, int);          \
  template void gelu_forward<Real>(Real*, const Real*, size_t);                                     \
  template void gelu_backward<Real>(Real*, const Real*, const Real*, size_t);                       \
  template void residual_forward<Real>(Real*, const Real*, const Real*, size_t);                    \
  template void residual_backward<Real>(Real*, Real*, const Real*, size_t);                         \
  template void encoder_forward<Real>(Real*, const int32_t*, const Real*, const Real*, int, int,    \
                                      int);                                                         \
  template void encoder_backward<Real>(Real*, Real*, const Real*, const int32_t*, int, int, int);   \
  template void softmax_forward<Real>(Real*, const Real*, int, int);                                \
  template double crossentropy_forward<Real>(Real*, Real*, const Real*, const int32_t*, int, int);  \
  template void crossentropy_backward<Real>(Real*, const Real*, const int32_t*, Real, int, int);    \
  template void adamw_update<Real>(Real*, Real*, Real*, const Real*, size_t, const AdamWOptions&,   \
                                   int64_t, bool, Real);                                            \
  template double sum_of_squares<Real>(const Real*, size_t);                                        \
  template void adamw_update_segments<Real>(Real*, Real*, Real*, const Real*, const Segment*, size_t, \
                                            const AdamWOptions&, int64_t, Real);                      \
  template double sum_of_squares_segments<Real>(const Real*, const Segment*, size_t);               \
  template void scale<Real>(Real*, size_t, Real);
STAGECRAFT_INSTANTIATE(float)
STAGECRAFT_INSTANTIATE(double)
#undef STAGECRAFT_INSTANTIATE

}  // namespace stagecraft::runtime::cpu
