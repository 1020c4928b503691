// Torch tensors as the GEMM kernel's operands, and the bf16 product around the kernel (gemm_operands.h).
#include "gemm_operands.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>

#include "common/checks.h"

namespace tk_gemm {
namespace {

bool aligned(const void *p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// A GEMM operand as the kernel reads it: dense, with its rows along K (kmajor) or along M / N.
struct operand {
    const void *ptr;
    bool kmajor;
    at::Tensor storage; // a copy, when the given memory could not be read in place
};

// The logical (rows, cols) matrix at `base` with these strides, as TMA can read it: in place when dense with a row
// length that is a multiple of 8 elements and a 16-byte aligned start, else copied (row-major when the column count
// allows, else transposed). `rows_along_k`: whether the matrix's rows run along the contraction (A: (M, K)) or its
// columns do (B: (K, N)). Only the stored row length matters: the other extent is any size, so dW = dY^T X
// contracts over any number of tokens without padding.
operand tma_operand(const at::Tensor &base, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                    bool rows_along_k) {
    const void *p = base.data_ptr();
    if (aligned(p, 16)) {
        if (cols % 8 == 0 && tk_kernels::row_major(rows, cols, row_stride, col_stride)) return {p, rows_along_k, {}};
        if (rows % 8 == 0 && tk_kernels::row_major(cols, rows, col_stride, row_stride)) return {p, !rows_along_k, {}};
    }
    const at::Tensor view = base.as_strided({rows, cols}, {row_stride, col_stride});
    if (cols % 8 == 0) {
        at::Tensor copy = view.clone(at::MemoryFormat::Contiguous);
        return {copy.data_ptr(), rows_along_k, copy};
    }
    at::Tensor copy = view.t().clone(at::MemoryFormat::Contiguous); // the rules guarantee rows % 8 == 0 here
    return {copy.data_ptr(), !rows_along_k, copy};
}

// A (..., M, K) tensor as its (rows, K) matrix: the leading dimensions fold into the rows when they are dense.
operand rows_operand(const at::Tensor &t, int64_t rows) {
    const int64_t K = t.size(-1);
    if (t.dim() == 2) return tma_operand(t, rows, K, t.stride(0), t.stride(1), true);
    const at::Tensor dense = t.contiguous();
    operand op = tma_operand(dense, rows, K, K, 1, true);
    if (!op.storage.defined()) op.storage = dense; // keeps a copy made by contiguous() alive
    return op;
}

// out (M x N, dense) = A @ B (+ bias, added to every row in the kernel's epilogue where the layout allows).
cudaError_t run_bf16(at::Tensor &out, const operand &a, const operand &b, int64_t M, int64_t N, int64_t K,
                     const at::Tensor *bias, config_id config) {
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    gemm_problem p{.a = a.ptr, .b = b.ptr, .a_kmajor = a.kmajor, .b_kmajor = b.kmajor, .c = out.data_ptr(),
                   .M = int(M), .N = int(N), .K = int(K), .config = config};
    p.splits = config == config_id::automatic ? contraction_ranges(M, N, K, bias != nullptr) : 1;
    if (p.splits > 1) {
        at::Tensor partial = at::zeros({M, N}, out.options().dtype(at::kFloat));
        p.c = partial.data_ptr<float>();
        const cudaError_t e = matmul_bf16(p, stream);
        if (e == cudaSuccess) out.copy_(partial.view(out.sizes()));
        return e;
    }
    // The bias epilogue exists for the nn.Linear layout (both operands K-major); other layouts add it after.
    const bool fused = bias && a.kmajor && b.kmajor;
    if (fused) p.bias = bias->data_ptr();
    const cudaError_t e = matmul_bf16(p, stream);
    if (e == cudaSuccess && bias && !fused) out.add_(*bias);
    return e;
}

} // namespace

int contraction_ranges(int64_t M, int64_t N, int64_t K, bool bias) {
    if (bias || at::globalContext().deterministicAlgorithms()) return 1;
    gemm_problem p{};
    p.M = int(M), p.N = int(N), p.K = int(K);
    return matmul_bf16_splits(p);
}

cudaError_t matmul_product(at::Tensor &out, const at::Tensor &a, const at::Tensor &b, int64_t M, int64_t N, int64_t K,
                           config_id config) {
    const operand A = rows_operand(a, M);
    const operand B = tma_operand(b, K, N, b.stride(0), b.stride(1), false);
    return run_bf16(out, A, B, M, N, K, nullptr, config);
}

// The weight is read in place as the kernel's K-major B operand.
cudaError_t linear_product(at::Tensor &y, const at::Tensor &x, const at::Tensor &weight, const at::Tensor &bias,
                           int64_t M, int64_t N, int64_t K, config_id config) {
    const operand A = rows_operand(x, M);
    const operand B = tma_operand(weight, K, N, weight.stride(1), weight.stride(0), false);
    if (!bias.defined()) return run_bf16(y, A, B, M, N, K, nullptr, config);
    // The epilogue reads the bias as 4-byte pairs: a view at an odd offset is copied first.
    const at::Tensor b = bias.is_contiguous() && aligned(bias.data_ptr(), 4) ? bias : bias.clone();
    return run_bf16(y, A, B, M, N, K, &b, config);
}

} // namespace tk_gemm
