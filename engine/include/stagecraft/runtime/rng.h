// Counter-based random numbers for initialisation: value = f(seed, stream, index), no state.
//
// What this is: Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3",
// the generator of cuRAND and JAX) keyed by the 64-bit seed, with the 128-bit counter
// (index, stream). Element `index` of tensor `stream` gets the same number whoever draws it, in
// whatever order, so a TP shard or a pipeline stage initialises its slice to exactly the values
// of the unsharded model: it passes the unsharded element indices (fill_* take a TensorBlock).
// What it is not: a sampler for training-time noise (there is no dropout) or a crypto RNG.
//
// GPT-2 init with it (Radford et al. 2019; nanoGPT): stream = tensor_stream(Hugging Face name),
// weights N(0, 0.02); attn.c_proj and mlp.c_proj weights N(0, 0.02 / sqrt(2 n_layer)); wte, wpe
// N(0, 0.02); biases 0; LayerNorm weight 1, bias 0. Indices are row-major in the HF shape, e.g.
// c_attn.weight [C, 3C]: a TP rank owning heads [h0, h1) fills three column blocks of it (q, k, v).
//
// Every function is pure and thread-safe. Values are identical on every platform up to the last
// bit of libm's log/cos in double, which float rounding then hides.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace stagecraft::runtime {

// Philox4x32 with 10 rounds: 4 x 32 random bits for a 128-bit counter and a 64-bit key.
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * ctr[0];
    const uint64_t p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
    key = {key[0] + kW0, key[1] + kW1};
  }
  return ctr;
}

// The 4 words for (seed, stream, index): key = seed, counter = (index, stream) low word first.
inline std::array<uint32_t, 4> rng_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), uint32_t(stream), uint32_t(stream >> 32)},
                       {uint32_t(seed), uint32_t(seed >> 32)});
}

// Uniform in (0, 1) with 53 random bits.
inline double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto w = rng_bits(seed, stream, index);
  const uint64_t x = ((uint64_t(w[0]) << 32) | w[1]) >> 11;
  return (double(x) + 0.5) * 0x1p-53;
}

// Standard normal, Box-Muller on the two 64-bit halves of one Philox block (the sine half is
// dropped so that every index stands alone).
inline double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const auto w = rng_bits(seed, stream, index);
  const uint64_t a = ((uint64_t(w[0]) << 32) | w[1]) >> 11;
  const uint64_t b = ((uint64_t(w[2]) << 32) | w[3]) >> 11;
  const double u1 = (double(a) + 1.0) * 0x1p-53;  // (0, 1]: log is finite
  const double u2 = double(b) * 0x1p-53;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A stream id per tensor name: 64-bit FNV-1a. Names are Hugging Face GPT-2 names ("h.3.attn.c_attn.weight").
inline uint64_t tensor_stream(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The part of a row-major tensor with `full_cols` columns that a buffer holds: rows
// [row0, row0 + rows) x columns [col0, col0 + cols). A 1-D tensor is one row.
struct TensorBlock {
  int64_t full_cols = 0;
  int64_t row0 = 0, rows = 0;
  int64_t col0 = 0, cols = 0;

  static TensorBlock whole(int64_t rows, int64_t cols) { return {cols, 0, rows, 0, cols}; }
  static TensorBlock range(int64_t offset, int64_t n, int64_t full_n) { return {full_n, 0, 1, offset, n}; }
};

// out[i * ld + j] = mean + stddev * rng_normal(seed, stream, (row0 + i) * full_cols + col0 + j),
// for i < block.rows, j < block.cols; ld >= block.cols (ld = 0 means block.cols).
template <typename Real>
void fill_normal(Real* out, int64_t ld, const TensorBlock& block, double mean, double stddev,
                 uint64_t seed, uint64_t stream);

// Same with rng_uniform in (lo, hi).
template <typename Real>
void fill_uniform(Real* out, int64_t ld, const TensorBlock& block, double lo, double hi, uint64_t seed,
                  uint64_t stream);

}  // namespace stagecraft::runtime
