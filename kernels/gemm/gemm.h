// Host entry points of the GEMM kernels. Plain CUDA types only: the torch binding (binding.cpp) includes
// this, the kernels' translation units implement it.
#pragma once

#include <cuda_runtime.h>

namespace tk_gemm {

enum class out_dtype { bf16, fp16, fp32 };

// C (M x N, row-major bf16) = A @ B. a_kmajor: A is (M, K) row-major, else its transpose (K, M) row-major.
// b_kmajor: B is stored as (N, K) row-major (B^T contiguous), else (K, N) row-major.
// Requires the 16-byte TMA stride rule on every stored row: N % 8 == 0 (C), K % 8 == 0 for a K-major A or B,
// M % 8 == 0 for an A that is not K-major (the binding arranges the layouts).
// bias: null, or N bf16 values (4-byte aligned) added to every row of C in fp32 before rounding; supported when
// both operands are K-major (the nn.Linear layout), cudaErrorNotSupported otherwise.
cudaError_t matmul_bf16(const void *a, bool a_kmajor, const void *b, bool b_kmajor, void *c, int M, int N, int K,
                        cudaStream_t stream, const void *bias = nullptr);

// Split-K for outputs too small to occupy the GPU: how many contraction ranges (1: do not split), and the
// product itself, each range's fp32 partial sum added into C (M x N fp32, row-major, zeroed by the caller) in an
// order that varies from run to run. Operand conventions as matmul_bf16.
int matmul_bf16_splits(int M, int N, int K);
cudaError_t matmul_bf16_split_k(const void *a, bool a_kmajor, const void *b, bool b_kmajor, float *c, int M, int N, int K,
                                int splits, cudaStream_t stream);

// How scaled_mm_e4m3's fp32 scales (device memory) apply: one value each (per_tensor); one value for A and a vector
// of N for B's columns (per_column); a vector of M for A's rows and one of N for B's columns (per_row_and_column).
// Vectors are contiguous.
enum class scales { per_tensor, per_column, per_row_and_column };

// C (M x N, row-major, `out`) = (A * scale_a) @ (B * scale_b) with A (M, K) e4m3 row-major, B (N, K) e4m3
// row-major. Requires K % 16 == 0 and N % 8 == 0.
cudaError_t scaled_mm_e4m3(const void *a, const void *b, const float *scale_a, const float *scale_b, void *c,
                           out_dtype out, int M, int N, int K, cudaStream_t stream, scales kind = scales::per_tensor);

// Debugging switch, not part of normal use: every later GEMM call of this process runs the named configuration
// (kernels/gemm/gemm_configs.cuh: "big", "hinted", "resident", "small" or "tiny") instead of the one its shape
// picks, so that tests and tools reach each configuration on any shape. The fp8 entry point runs "small" and "tiny"
// as named and "big" for the other names; "resident" runs "hinted" where K > 256. "" or "auto" restores the
// shape-based choice. Returns false, changing nothing, for any other name.
bool force_config(const char *name);

} // namespace tk_gemm
