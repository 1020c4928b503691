// The bf16 products of tk_ops.matmul and tk_ops.linear as their CUDA kernels (binding.cpp) run them once the op's rules
// have passed: the torch tensors read as the kernel's TMA operands (in place where their memory allows, copied
// otherwise), then split-K or one configuration's kernel (gemm.h), and the bias where the epilogue cannot add it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "gemm.h"

namespace tk_gemm {

// How many contraction ranges a product of the op's own choosing runs in: split-K's count (matmul_bf16_splits), or 1
// with a bias (split-K has no bias epilogue) and under torch.use_deterministic_algorithms (the ranges' partial sums add
// in an order that varies from run to run).
int contraction_ranges(int64_t M, int64_t N, int64_t K, bool bias);

// out (..., M, N), dense = a (..., M, K) @ b (K, N): the leading dimensions of a fold into M. M, N and K are not zero.
// config: automatic for the op's own choice (split-K included), else that configuration, unsplit.
cudaError_t matmul_product(at::Tensor &out, const at::Tensor &a, const at::Tensor &b, int64_t M, int64_t N, int64_t K,
                           config_id config);

// y (..., N), dense = x (..., K) @ weight^T (+ bias): weight (N, K) as nn.Linear stores it, bias (N,) or undefined.
// M (the rows of x), N and K are not zero. config as for matmul_product.
cudaError_t linear_product(at::Tensor &y, const at::Tensor &x, const at::Tensor &weight, const at::Tensor &bias,
                           int64_t M, int64_t N, int64_t K, config_id config);

} // namespace tk_gemm
