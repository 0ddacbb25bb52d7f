// cuBLASLt GEMMs with a bias epilogue, for the 16-bit GEMMs of the CUDA backend: the bias is added
// by the GEMM itself (CUBLASLT_EPILOGUE_BIAS) instead of by a second pass over the output.
//
// What it computes: D (m x n, column-major, ld ldd) = op(A) op(B) + bias, bias (m) of D's type
// broadcast over D's columns, A and B bf16 or fp16, fp32 accumulation (CUBLAS_COMPUTE_32F) — in
// the row-major terms of cuda_kernels.cu, out (BT, OC) = inp W + bias with m = OC, n = BT. D is
// fp32, or bf16 with bf16 A and B: cuBLASLt's supported combinations "A/B 16BF or 16F, C/D 32F,
// bias 32F" and "A/B/C/D 16BF, bias 16BF" (the cuBLAS docs' table of cublasLtMatmul's data types;
// the bias type defaults to D's).
//
// Where it does not apply it says so instead of computing: lt_gemm_bias returns false when the
// bias is not 16-byte aligned, when cuBLASLt's heuristic offers no algorithm for the shape and
// alignments, or where train.kernels.gemm_bias: separate asks for the plain path; the caller
// then runs cublasGemmEx and adds the bias itself. A shape's heuristic answer, yes or no, is
// looked up once and cached with its descriptors. A failure of cublasLtMatmul itself is recorded
// in the context like any other (cuda_context.h).
//
// Not part of the engine's API; included by src/runtime/cuda only. Thread-safe.
#pragma once

#include <cublas_v2.h>
#include <library_types.h>

#include "stagecraft/config/run_config.h"

namespace stagecraft::runtime::cuda {

// With residual (fp32 D only; D's layout, 16-byte aligned, may be D itself): D = op(A) op(B) +
// bias + residual, cuBLASLt's C input with beta 1.
bool lt_gemm_bias(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                  cudaDataType_t ab_type, void* D, cudaDataType_t d_type, int ldd, const void* bias, const void* residual = nullptr);

// The same with GELU after the bias (CUBLASLT_EPILOGUE_GELU_AUX_BIAS): D = GELU(op(A) op(B) +
// bias) and aux (m x n, D's type, column-major, ld ldd) = op(A) op(B) + bias, GELU's input kept
// for the backward. cuBLASLt's GELU is the tanh approximation GPT-2 uses (the cuBLAS docs name
// no formula; NVIDIA's nvmath-python tests check the epilogue against the tanh form). Also false
// where ldd is not a multiple of 8 (cuBLASLt's rule for the aux's leading dimension) or aux is
// not 16-byte aligned.
bool lt_gemm_bias_gelu(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                       cudaDataType_t ab_type, void* D, cudaDataType_t d_type, int ldd, const void* bias, void* aux);

// Whether train.kernels.gemm_bias = `choice` lets the 16-bit GEMMs' bias epilogues take cuBLASLt
// (auto and cublaslt do: where it has an algorithm for a shape; separate does not), and the same
// under the context's choice (the last Device::set_kernels').
inline bool lt_enabled(config::GemmBias choice) { return choice != config::GemmBias::kSeparate; }
bool lt_enabled();

// The shapes looked up so far for which cuBLASLt has an algorithm (usable) or has none.
int lt_shapes(bool usable);

}  // namespace stagecraft::runtime::cuda
