// cuBLASLt GEMMs with a bias epilogue: see lt_gemm.h.
#include "runtime/cuda/lt_gemm.h"

#include <cublasLt.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "runtime/cuda/cuda_context.h"

namespace stagecraft::runtime::cuda {

namespace {

// The largest power of two (up to 256) that divides the address: what cuBLASLt may assume of it
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES defaults to 256, which would rule out the
// algorithms that work at smaller alignments).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// The shape, the types, and the alignments of A, B, D, the bias, the aux buffer (0 without one:
// the plain bias epilogue) and C: the heuristic takes the bias and aux pointers' values as their
// alignment (cublasLt.h, BIAS_POINTER and EPILOGUE_AUX_POINTER), so an algorithm chosen for one
// alignment is not reused at a smaller one.
using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t>;

// A shape's descriptors and the algorithm the heuristic chose, or that there is none.
struct Plan {
  bool usable = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_mutex;
std::map<Key, Plan> g_plans;  // kept for the process's life, as the context is

bool lt_ok(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  record_error(std::string(call) + ": " + cublasGetStatusString(s));
  return false;
}

void release(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

// Builds the descriptors of a shape and asks the heuristic for one algorithm; make_plan releases
// what a shape without one holds.
Plan find_plan(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, cudaDataType_t ab_type,
               cudaDataType_t d_type, int ldd, const void* A, const void* B, const void* Cm, void* D, const void* bias, void* aux) {
  Context& c = *context();
  Plan p;
  if (cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return p;
  const int32_t opa = ta, opb = tb;
  const cublasLtEpilogue_t epilogue = aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
  const void* bias_ptr = bias;  // the heuristic reads the pointers' alignment
  if (cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr) != CUBLAS_STATUS_SUCCESS) {
    return p;
  }
  if (aux) {
    const int64_t aux_ld = ldd;
    if (cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) != CUBLAS_STATUS_SUCCESS) {
      return p;
    }
  }
  // Stored (before op) shapes: A m x k (N) or k x m (T); B k x n (N) or n x k (T); D m x n.
  const bool a_t = ta != CUBLAS_OP_N, b_t = tb != CUBLAS_OP_N;
  if (cublasLtMatrixLayoutCreate(&p.a, ab_type, a_t ? k : m, a_t ? m : k, lda) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p.b, ab_type, b_t ? n : k, b_t ? k : n, ldb) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p.d, d_type, m, n, ldd) != CUBLAS_STATUS_SUCCESS) {
    return p;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return p;
  const uint64_t workspace = c.lt_workspace_bytes;
  const uint32_t al_a = alignment(A), al_b = alignment(B), al_c = alignment(Cm), al_d = alignment(D);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const bool asked = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace) ==
                         CUBLAS_STATUS_SUCCESS &&
                     cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a) ==
                         CUBLAS_STATUS_SUCCESS &&
                     cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b) ==
                         CUBLAS_STATUS_SUCCESS &&
                     cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c) ==
                         CUBLAS_STATUS_SUCCESS &&
                     cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d) ==
                         CUBLAS_STATUS_SUCCESS &&
                     cublasLtMatmulAlgoGetHeuristic(c.cublaslt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found) ==
                         CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreferenceDestroy(pref);
  if (asked && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.usable = true;
  }
  return p;
}

// A shape's plan: usable, or not usable and holding nothing (no error: the caller computes it
// another way).
Plan make_plan(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, cudaDataType_t ab_type,
               cudaDataType_t d_type, int ldd, const void* A, const void* B, const void* Cm, void* D, const void* bias, void* aux) {
  Plan p = find_plan(ta, tb, m, n, k, lda, ldb, ab_type, d_type, ldd, A, B, Cm, D, bias, aux);
  if (!p.usable) release(p);
  return p;
}

}  // namespace

bool lt_enabled() { return lt_enabled(context() ? context()->kernels.gemm_bias : config::GemmBias::kAuto); }

int lt_shapes(bool usable) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int n = 0;
  for (const auto& [key, p] : g_plans) n += p.usable == usable ? 1 : 0;
  return n;
}

namespace {

// C (`residual`, or D when there is none) comes in with beta 1, or not at all.
bool lt_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
             cudaDataType_t ab_type, void* D, cudaDataType_t d_type, int ldd, const void* bias, void* aux, const void* residual) {
  Context* c = context();
  if (!lt_enabled() || !c || !c->cublaslt || !bias || alignment(bias) < 16 || m <= 0 || n <= 0 || k <= 0) return false;
  if (d_type != CUDA_R_32F && (d_type != CUDA_R_16BF || ab_type != CUDA_R_16BF)) return false;  // not a supported combination
  if (aux && (ldd % 8 != 0 || alignment(aux) < 16)) return false;
  if (residual && (d_type != CUDA_R_32F || aux || alignment(residual) < 16)) return false;
  const void* Cm = residual ? residual : D;
  const Key key{int(ta),      int(tb),      m,           n,
                k,            lda,          ldb,         ldd,
                int(ab_type), int(d_type),  alignment(A), alignment(B),
                alignment(D), alignment(bias), aux ? alignment(aux) : 0u, alignment(Cm)};
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_plans.find(key);
  if (it == g_plans.end()) {
    it = g_plans.emplace(key, make_plan(ta, tb, m, n, k, lda, ldb, ab_type, d_type, ldd, A, B, Cm, D, bias, aux)).first;
  }
  Plan& p = it->second;
  if (!p.usable) return false;
  const void* bias_ptr = bias;
  if (!lt_ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr),
             "cublasLtMatmulDescSetAttribute(bias)") ||
      (aux && !lt_ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
                     "cublasLtMatmulDescSetAttribute(aux)"))) {
    return true;  // recorded: the step fails at its next synchronize
  }
  const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
  lt_ok(cublasLtMatmul(c->cublaslt, p.desc, &alpha, A, p.a, B, p.b, &beta, Cm, p.d, D, p.d, &p.algo, c->lt_workspace, c->lt_workspace_bytes,
                       c->stream),
        "cublasLtMatmul");
  return true;
}

}  // namespace

bool lt_gemm_bias(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                  cudaDataType_t ab_type, void* D, cudaDataType_t d_type, int ldd, const void* bias, const void* residual) {
  return lt_gemm(ta, tb, m, n, k, A, lda, B, ldb, ab_type, D, d_type, ldd, bias, nullptr, residual);
}

bool lt_gemm_bias_gelu(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                       cudaDataType_t ab_type, void* D, cudaDataType_t d_type, int ldd, const void* bias, void* aux) {
  return aux && lt_gemm(ta, tb, m, n, k, A, lda, B, ldb, ab_type, D, d_type, ldd, bias, aux, nullptr);
}

}  // namespace stagecraft::runtime::cuda
