// bf16: the storage of 16-bit activations (train.precision: bf16 on a GPU) — a bfloat16 value
// as its bits, the upper half of an IEEE float, with the one rounding both backends use.
//
// The conversions are plain functions the CPU and the CUDA kernels (src/runtime/cuda) both call,
// so a CPU suite checks the rounding a GPU does bit for bit: to the nearest, ties to even; NaN
// stays a (quiet) NaN; infinities stay; a finite float beyond bf16's largest finite value,
// 3.3895e38, rounds to infinity, as IEEE's round-to-nearest does.
// Worked example: 1 + 2^-8 (half-way between two bf16 values) -> 1.0 (0x3f80, the even one);
// 1 + 3 x 2^-8 -> 1 + 2^-6 (0x3f82).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STAGECRAFT_BF16_HD __host__ __device__ __forceinline__
#else
#define STAGECRAFT_BF16_HD inline
#endif

namespace stagecraft::runtime {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes, as a GPU's __nv_bfloat16");

STAGECRAFT_BF16_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

STAGECRAFT_BF16_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

STAGECRAFT_BF16_HD bf16 to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // NaN: keep it quiet
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

STAGECRAFT_BF16_HD float to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

}  // namespace stagecraft::runtime
