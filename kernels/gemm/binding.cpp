// Torch binding of the GEMM kernels: tk_ops::matmul, tk_ops::linear and tk_ops::scaled_mm (CUDA kernels; the
// autograd of linear is in autograd.cpp).
//
// The Python wrappers (python/tk_ops/gemm.py) validate arguments with friendly messages first; the checks
// here are the last line of defence, so that nothing reaching a kernel can fault or write out of bounds.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/require.h"
#include "gemm.h"

namespace {

using tk_kernels::require;

bool aligned16(const at::Tensor &t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// How the kernel reads an operand viewed as (rows, cols): true if from row-major storage, false if from the
// transpose of a row-major tensor. TMA needs a 16-byte aligned base and a row stride that is a multiple of 8
// elements, so a view whose storage already qualifies is read in place; anything else is copied, row-major
// when its column count allows, else transposed. Only the stored row length matters: the other dimension is
// an extent, any size (so dW = dY^T X contracts over any number of tokens without padding).
bool tma_order(at::Tensor &t, const char *name) {
    const int64_t rows = t.size(0), cols = t.size(1);
    if (aligned16(t)) {
        if (t.is_contiguous() && cols % 8 == 0) return true;
        if (t.t().is_contiguous() && rows % 8 == 0) return false;
    }
    if (cols % 8 == 0) {
        t = t.clone(at::MemoryFormat::Contiguous);
        return true;
    }
    require(rows % 8 == 0, "tk_ops.matmul: ", name, " is ", rows, "x", cols,
            ": one of its dimensions must be a multiple of 8 (TMA needs 16-byte row strides)");
    t = t.t().clone(at::MemoryFormat::Contiguous).t();
    return false;
}

void check_cuda(cudaError_t e, const char *what) {
    require(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

void check_common(const at::Tensor &a, const at::Tensor &b) {
    require(a.is_cuda() && b.is_cuda(), "tk_ops: inputs must be CUDA tensors");
    require(a.device() == b.device(), "tk_ops: inputs must be on the same device");
    require(a.dim() == 2 && b.dim() == 2, "tk_ops: matmul operands must be 2-D");
    require(a.size(1) == b.size(0), "tk_ops: inner dimensions differ: a is ", a.size(0), "x", a.size(1), ", b is ", b.size(0), "x", b.size(1));
}

// a @ b (+ bias, added to every row in the kernel's epilogue).
at::Tensor matmul_bias(const at::Tensor &a_in, const at::Tensor &b_in, const at::Tensor *bias) {
    check_common(a_in, b_in);
    require(a_in.scalar_type() == at::kBFloat16 && b_in.scalar_type() == at::kBFloat16,
                "tk_ops.matmul: operands must be bfloat16");
    const int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
    require(N % 8 == 0, "tk_ops.matmul: N must be a multiple of 8 (the output's rows are written by TMA); got N=", N);
    require(M < (1ll << 31) && N < (1ll << 31) && K < (1ll << 31), "tk_ops.matmul: dimensions must be below 2^31");
    const c10::cuda::CUDAGuard guard(a_in.device());
    at::Tensor out = at::empty({M, N}, a_in.options());
    if (M == 0 || N == 0) return out;
    if (K == 0) return bias ? out.copy_(bias->expand({M, N})) : out.zero_();
    at::Tensor a = a_in, b = b_in;
    const bool a_kmajor = tma_order(a, "a");   // (M, K) row-major, else (K, M) row-major
    const bool b_rowmajor = tma_order(b, "b"); // (K, N) row-major, else (N, K) row-major
    // Small outputs over long contractions: fp32 partial sums of several K ranges, added in a run-to-run
    // varying order, so not under torch.use_deterministic_algorithms.
    const int splits = bias || at::globalContext().deterministicAlgorithms() ? 1 : tk_gemm::matmul_bf16_splits(int(M), int(N), int(K));
    if (splits > 1) {
        at::Tensor partial = at::zeros({M, N}, out.options().dtype(at::kFloat));
        check_cuda(tk_gemm::matmul_bf16_split_k(a.data_ptr(), a_kmajor, b.data_ptr(), !b_rowmajor, partial.data_ptr<float>(),
                                                int(M), int(N), int(K), splits, at::cuda::getCurrentCUDAStream()),
                   "tk_ops.matmul split-K kernel");
        return out.copy_(partial);
    }
    // The bias epilogue exists for the nn.Linear layout (both operands K-major); other layouts add it after.
    const bool fused = bias && a_kmajor && !b_rowmajor;
    check_cuda(tk_gemm::matmul_bf16(a.data_ptr(), a_kmajor, b.data_ptr(), !b_rowmajor, out.data_ptr(), int(M), int(N),
                                    int(K), at::cuda::getCurrentCUDAStream(), fused ? bias->data_ptr() : nullptr),
               "tk_ops.matmul kernel");
    if (bias && !fused) out.add_(*bias);
    return out;
}

at::Tensor matmul_cuda(const at::Tensor &a, const at::Tensor &b) { return matmul_bias(a, b, nullptr); }

// y = x @ weight^T (+ bias) for x (..., K), weight (N, K) as nn.Linear stores it, bias (N): the weight is read
// in place as the kernel's K-major B operand.
at::Tensor linear_cuda(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    require(x.dim() >= 1 && weight.dim() == 2,
            "tk_ops.linear: x must be (..., in_features) and weight (out_features, in_features)");
    require(x.size(-1) == weight.size(1), "tk_ops.linear: x has ", x.size(-1), " features, weight expects ",
            weight.size(1));
    const bool has_bias = bias.has_value() && bias->defined();
    if (has_bias) {
        require(bias->dim() == 1 && bias->size(0) == weight.size(0), "tk_ops.linear: bias must be (out_features,) = (",
                weight.size(0), ",)");
        require(bias->scalar_type() == at::kBFloat16 && bias->is_cuda() && bias->device() == x.device(),
                "tk_ops.linear: bias must be a bfloat16 CUDA tensor on x's device");
    }
    // The epilogue reads the bias as 4-byte pairs: a view at an odd offset is copied first.
    at::Tensor b;
    if (has_bias) b = bias->is_contiguous() && reinterpret_cast<uintptr_t>(bias->data_ptr()) % 4 == 0 ? *bias : bias->clone();
    at::Tensor y = matmul_bias(x.reshape({-1, x.size(-1)}), weight.t(), has_bias ? &b : nullptr);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return y.view(shape);
}

at::Tensor scaled_mm_cuda(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     at::ScalarType out_dtype) {
    check_common(a, b);
    require(a.scalar_type() == at::kFloat8_e4m3fn && b.scalar_type() == at::kFloat8_e4m3fn,
                "tk_ops.scaled_mm: operands must be torch.float8_e4m3fn");
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    require(K % 16 == 0 && N % 8 == 0,
                "tk_ops.scaled_mm: K must be a multiple of 16 and N a multiple of 8 (TMA needs 16-byte row strides); got K=",
                K, ", N=", N);
    require(a.is_contiguous() && aligned16(a), "tk_ops.scaled_mm: a must be row-major (contiguous)");
    require(b.t().is_contiguous() && aligned16(b),
                "tk_ops.scaled_mm: b must be column-major, i.e. the transpose of a contiguous (N, K) tensor");
    for (const at::Tensor *s : {&scale_a, &scale_b}) {
        require(s->scalar_type() == at::kFloat && s->device() == a.device(),
                "tk_ops.scaled_mm: scales must be float32 tensors on the operands' device");
    }
    // torch._scaled_mm's scale shapes: one element each (per tensor), or scale_a (M, 1) for A's rows and scale_b
    // (1, N) for B's columns; here also one of the two per tensor.
    const bool a_rows = scale_a.numel() != 1, b_cols = scale_b.numel() != 1;
    require(!a_rows || (scale_a.dim() == 2 && scale_a.size(0) == M && scale_a.size(1) == 1),
            "tk_ops.scaled_mm: scale_a must have one element (per tensor) or shape (M, 1) = (", M, ", 1) (per row of a)");
    require(!b_cols || (scale_b.dim() == 2 && scale_b.size(0) == 1 && scale_b.size(1) == N),
            "tk_ops.scaled_mm: scale_b must have one element (per tensor) or shape (1, N) = (1, ", N, ") (per column of b)");
    tk_gemm::out_dtype od;
    if (out_dtype == at::kBFloat16) od = tk_gemm::out_dtype::bf16;
    else if (out_dtype == at::kHalf) od = tk_gemm::out_dtype::fp16;
    else if (out_dtype == at::kFloat) od = tk_gemm::out_dtype::fp32;
    else require(false, "tk_ops.scaled_mm: out_dtype must be bfloat16, float16 or float32");
    const c10::cuda::CUDAGuard guard(a.device());
    at::Tensor out = at::empty({M, N}, a.options().dtype(out_dtype));
    if (M == 0 || N == 0) return out;
    if (K == 0) return out.zero_();
    at::Tensor sa = scale_a.contiguous(), sb = scale_b.contiguous();
    tk_gemm::scales kind = tk_gemm::scales::per_tensor;
    if (a_rows || b_cols) {
        // The vector kernels take B's scales as a vector: a per-tensor one is spread over the N columns.
        if (!b_cols) sb = sb.reshape({1, 1}).expand({1, N}).contiguous();
        kind = a_rows ? tk_gemm::scales::per_row_and_column : tk_gemm::scales::per_column;
    }
    check_cuda(tk_gemm::scaled_mm_e4m3(a.data_ptr(), b.data_ptr(), sa.data_ptr<float>(), sb.data_ptr<float>(),
                                       out.data_ptr(), od, int(M), int(N), int(K), at::cuda::getCurrentCUDAStream(), kind),
               "tk_ops.scaled_mm kernel");
    return out;
}

// TMA encoding errors surface as std::runtime_error from the launchers; torch turns them into RuntimeError.

} // namespace

// The schemas are defined in Python (python/tk_ops/gemm.py) together with their fake implementations and
// autograd formulas, so tracing works even where this extension is absent; here only the CUDA kernels attach.
TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("matmul", &matmul_cuda);
    m.impl("linear", &linear_cuda);
    m.impl("scaled_mm", &scaled_mm_cuda);
}
