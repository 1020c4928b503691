// Torch binding of the GEMM kernels: tk_ops::matmul and tk_ops::scaled_mm.
//
// The Python wrappers (python/tk_ops/gemm.py) validate arguments with friendly messages first; the checks
// here are the last line of defence, so that nothing reaching a kernel can fault or write out of bounds.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <string>
#include <type_traits>
#include <stdexcept>

#include "common/require.h"
#include "gemm.h"

namespace {

using tk_kernels::require;

bool aligned16(const at::Tensor &t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// An operand viewed as (rows, cols): true if its storage is row-major (cols contiguous), false if it is the
// transpose of a row-major tensor. Anything else, or a misaligned base, is copied to row-major first.
bool rows_contiguous(at::Tensor &t, int64_t other_stride_rule) {
    if (t.is_contiguous() && aligned16(t)) return true;
    if (t.t().is_contiguous() && aligned16(t) && other_stride_rule % 8 == 0) return false;
    t = t.contiguous();
    return true;
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

at::Tensor matmul(const at::Tensor &a_in, const at::Tensor &b_in) {
    check_common(a_in, b_in);
    require(a_in.scalar_type() == at::kBFloat16 && b_in.scalar_type() == at::kBFloat16,
                "tk_ops.matmul: operands must be bfloat16");
    const int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
    require(K % 8 == 0 && N % 8 == 0,
                "tk_ops.matmul: K and N must be multiples of 8 (TMA needs 16-byte row strides); got K=", K, ", N=", N);
    require(M < (1ll << 31) && N < (1ll << 31) && K < (1ll << 31), "tk_ops.matmul: dimensions must be below 2^31");
    const c10::cuda::CUDAGuard guard(a_in.device());
    at::Tensor out = at::empty({M, N}, a_in.options());
    if (M == 0 || N == 0) return out;
    if (K == 0) return out.zero_();
    at::Tensor a = a_in, b = b_in;
    const bool a_kmajor = rows_contiguous(a, M);  // (M, K) row-major, else (K, M) row-major
    const bool b_rowmajor = rows_contiguous(b, K); // (K, N) row-major, else (N, K) row-major
    check_cuda(tk_gemm::matmul_bf16(a.data_ptr(), a_kmajor, b.data_ptr(), !b_rowmajor, out.data_ptr(), int(M), int(N),
                                    int(K), at::cuda::getCurrentCUDAStream()),
               "tk_ops.matmul kernel");
    return out;
}

at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
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
        require(s->numel() == 1 && s->scalar_type() == at::kFloat && s->device() == a.device(),
                    "tk_ops.scaled_mm: scales must be single-element float32 tensors on the operands' device");
    }
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
    check_cuda(tk_gemm::scaled_mm_e4m3(a.data_ptr(), b.data_ptr(), sa.data_ptr<float>(), sb.data_ptr<float>(),
                                       out.data_ptr(), od, int(M), int(N), int(K), at::cuda::getCurrentCUDAStream()),
               "tk_ops.scaled_mm kernel");
    return out;
}

// TMA encoding errors surface as std::runtime_error from the launchers; torch turns them into RuntimeError.

} // namespace

// The schemas are defined in Python (python/tk_ops/gemm.py) together with their fake implementations and
// autograd formulas, so tracing works even where this extension is absent; here only the CUDA kernels attach.
TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("matmul", &matmul);
    m.impl("scaled_mm", &scaled_mm);
}
