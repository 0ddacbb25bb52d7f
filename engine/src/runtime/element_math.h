// The per-element math of the layers, written once for both backends: the CPU kernels
// (src/runtime/cpu/pointwise.cpp) call these in their vectorised loops and the CUDA kernels
// (src/runtime/cuda/cuda_kernels.cu) call them per thread, so the CPU suites test the formulas
// the GPU runs. Only the exponential differs per backend (the CPU's vectorisable exp_fast, the
// GPU's expf), so the functions here take what depends on it (a sigmoid) as an argument.
//
// Not part of the engine's API; included by src/runtime/cpu and src/runtime/cuda only.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define STAGECRAFT_HD __host__ __device__ __forceinline__
#else
#define STAGECRAFT_HD inline
#endif

namespace stagecraft::runtime::element {

inline constexpr double kLayerNormEps = 1e-5;  // GPT-2's layer_norm_epsilon

// GELU (tanh approximation) written with the logistic function: 0.5 (1 + tanh(u)) = sigmoid(2 u),
// u = sqrt(2 / pi) (x + 0.044715 x^3).
inline constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kGeluA = 0.044715;

template <typename Real>
STAGECRAFT_HD Real gelu_arg(Real x) {  // 2 u: the argument of the sigmoid
  return Real(2) * (Real(kGeluK) * (x + Real(kGeluA) * x * x * x));
}

// GELU(x), given s = sigmoid(gelu_arg(x)).
template <typename Real>
STAGECRAFT_HD Real gelu_value(Real x, Real s) {
  return x * s;
}

// dGELU/dx, given s = sigmoid(gelu_arg(x)): d/dx [x s(2u)] = s + 2 x s (1 - s) u'.
template <typename Real>
STAGECRAFT_HD Real gelu_slope(Real x, Real s) {
  const Real du = Real(kGeluK) * (Real(1) + Real(3) * Real(kGeluA) * x * x);
  return s + Real(2) * x * s * (Real(1) - s) * du;
}

template <typename Real>
STAGECRAFT_HD Real square_root(Real x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// 1 / sqrt(variance + eps): layernorm's rstd from a row's variance.
template <typename Real>
STAGECRAFT_HD Real layernorm_rstd(Real variance) {
  return Real(1) / square_root(variance + Real(kLayerNormEps));
}

// Layernorm's input gradient for one element: with n = (x - mean) rstd and dn = dy w,
//   dx = rstd (dn - mean(dn) - n mean(dn n)); mean_dn and mean_dn_n are the row's means.
template <typename Real>
STAGECRAFT_HD Real layernorm_dx(Real dy, Real w, Real norm, Real rstd, Real mean_dn, Real mean_dn_n) {
  return rstd * (dy * w - mean_dn - norm * mean_dn_n);
}

// One AdamW step's constants (kernels.h's adamw_update documents the update).
template <typename Real>
struct AdamWStep {
  Real lr, beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale;  // bias_k = 1 - beta_k^t
};

// The AdamW update of one parameter p with moments m, v and raw gradient g.
template <typename Real>
STAGECRAFT_HD void adamw(Real& p, Real& m, Real& v, Real g, const AdamWStep<Real>& s) {
  g *= s.grad_scale;
  const Real mi = s.beta1 * m + (Real(1) - s.beta1) * g;
  const Real vi = s.beta2 * v + (Real(1) - s.beta2) * g * g;
  m = mi;
  v = vi;
  p -= s.lr * ((mi / s.bias1) / (square_root(vi / s.bias2) + s.eps) + s.weight_decay * p);
}

}  // namespace stagecraft::runtime::element
