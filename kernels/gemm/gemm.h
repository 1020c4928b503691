// Host entry points of the GEMM kernels. Plain CUDA types only: the torch binding (binding.cpp) and its host
// composition (gemm_operands.cpp) include this, the kernels' translation units implement it.
#pragma once

#include <cuda_runtime.h>

#include "common/dtype.h"
#include "gemm_configs.cuh"

namespace tk_gemm {

using tk_kernels::dtype;

// C (M x N, row-major) = A @ B with bf16 inputs and fp32 accumulation.
struct gemm_problem {
    // a_kmajor: A is (M, K) row-major, else its transpose (K, M) row-major. b_kmajor: B is stored as (N, K) row-major
    // (B^T contiguous), else (K, N) row-major. Every stored row's stride is a multiple of 16 bytes (TMA): N % 8 == 0
    // (C), K % 8 == 0 for a K-major A or B, M % 8 == 0 for an A that is not K-major (the binding arranges the layouts).
    const void *a, *b;
    bool a_kmajor, b_kmajor;
    // bf16; with splits > 1, fp32 zeroed by the caller.
    void *c;
    // Null, or N bf16 values (4-byte aligned) added to every row of C in fp32 before rounding; supported when both
    // operands are K-major (the nn.Linear layout) and splits == 1, cudaErrorNotSupported otherwise.
    const void *bias = nullptr;
    int M, N, K;
    // Split-K for outputs too small to occupy the GPU: the contraction is cut into this many ranges, each range's fp32
    // partial sum added into C in an order that varies from run to run (matmul_bf16_splits says how many pay).
    int splits = 1;
    // The configuration to run (gemm_configs.cuh); automatic: the one the shape picks. A named one runs with
    // splits == 1, and resident only where its panel holds the contraction (K <= resident_max_k);
    // cudaErrorInvalidValue otherwise.
    config_id config = config_id::automatic;
};

cudaError_t matmul_bf16(const gemm_problem &p, cudaStream_t stream);

// The configuration matmul_bf16 runs p in with splits == 1 on the current device: p.config, or the one its shape
// picks (never automatic).
config_id matmul_bf16_config(const gemm_problem &p);
// How many contraction ranges split-K would cut p's contraction into on the current device (1: do not split).
int matmul_bf16_splits(const gemm_problem &p);

// How the fp32 scales (device memory) apply: one value each (per_tensor); one value for A and a vector of N for B's
// columns (per_column); a vector of M for A's rows and one of N for B's columns (per_row_and_column). Vectors are
// contiguous.
enum class scales { per_tensor, per_column, per_row_and_column };

// C (M x N, row-major, of `type`) = (A * scale_a) @ (B * scale_b) with A (M, K) e4m3 row-major, B (N, K) e4m3
// row-major. Requires K % 16 == 0 and N % 8 == 0.
struct scaled_mm_problem {
    const void *a, *b;
    const float *scale_a, *scale_b;
    scales scaling = scales::per_tensor;
    void *c;
    dtype type; // of C: bf16, fp16 or fp32
    int M, N, K;
    // automatic, big, small or tiny (cudaErrorInvalidValue for the others).
    config_id config = config_id::automatic;
};

cudaError_t scaled_mm_e4m3(const scaled_mm_problem &p, cudaStream_t stream);

// The configuration scaled_mm_e4m3 runs p in on the current device: p.config, or the one its shape picks.
config_id scaled_mm_e4m3_config(const scaled_mm_problem &p);

} // namespace tk_gemm
