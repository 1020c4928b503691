// The GEMM ops as torch sees them: tk_ops::matmul, tk_ops::linear and tk_ops::scaled_mm (schemas, and their CUDA,
// Meta and CPU kernels; the autograd of matmul and linear is in autograd.cpp).
//
// Each op's rules (dtypes, ranks, extents, layouts) are one function below, shared by its three kernels: the CUDA
// kernel checks them before anything reaches a kernel, the Meta kernel (torch.compile's fake tensors) checks them
// and shapes the output the same way, and the CPU kernel checks them and then asks for CUDA tensors (see
// common/checks.h). The Python wrappers (python/tk_ops/gemm.py, nn.py) only call these ops.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/checks.h"
#include "gemm.h"

namespace {

using namespace tk_kernels;

constexpr const char *MATMUL = "tk_ops.matmul";
constexpr const char *LINEAR = "tk_ops.linear";
constexpr const char *SCALED_MM = "tk_ops.scaled_mm";

// ---------------------------------------------------------------- the rules

// C (M x N) = A (M x K) @ B (K x N). TMA moves rows whose stride is a multiple of 16 bytes (8 bf16 elements). The
// output's rows are N long; an operand can be read with its rows along K (K-major) or, stored transposed, along M
// or N. So N must be a multiple of 8, and K or M: B can always be stored with rows of N, A needs one of the two.
void check_bf16_extents(const char *op, const c10::SymInt &M, const c10::SymInt &K, const c10::SymInt &N) {
    check_input(N % 8 == 0, op, ": N=", N,
                " must be a multiple of 8 (TMA writes the output's rows, whose stride must be a multiple of 16 bytes); "
                "pad the tensors");
    check_input(K % 8 == 0 || M % 8 == 0, op, ": K=", K, " or M=", M,
                " must be a multiple of 8 (TMA reads rows whose stride is a multiple of 16 bytes); pad the tensors");
    check_input(M < (int64_t(1) << 31) && N < (int64_t(1) << 31) && K < (int64_t(1) << 31), op,
                ": dimensions must be below 2^31");
}

void check_bf16(const char *op, const char *name, const at::Tensor &t) {
    check_dtype(t.scalar_type() == at::kBFloat16, op, ": ", name, " must be torch.bfloat16, got ", t.scalar_type());
}

struct gemm_sizes {
    c10::SymInt M, K, N; // M counts the rows of every leading dimension
};

// a (M, K) or (..., M, K), b (K, N).
gemm_sizes matmul_rules(const at::Tensor &a, const at::Tensor &b) {
    check_bf16(MATMUL, "a", a);
    check_bf16(MATMUL, "b", b);
    check_input(a.dim() >= 2, MATMUL, ": a must be (M, K) or (..., M, K), got shape ", a.sym_sizes());
    check_input(b.dim() == 2, MATMUL, ": b must be 2-D (K, N), got shape ", b.sym_sizes());
    gemm_sizes s{leading_extent(a.sym_sizes(), a.dim() - 1), a.sym_size(-1), b.sym_size(1)};
    check_input(s.K == b.sym_size(0), MATMUL, ": a is ", s.M, "x", s.K, " but b is ", b.sym_size(0), "x", s.N,
                ": inner dimensions must match");
    check_bf16_extents(MATMUL, s.M, s.K, s.N);
    return s;
}

// x (..., K), weight (N, K) as nn.Linear stores it, bias (N,) or absent.
gemm_sizes linear_rules(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    check_bf16(LINEAR, "x", x);
    check_bf16(LINEAR, "weight", weight);
    if (bias && bias->defined()) check_bf16(LINEAR, "bias", *bias);
    check_input(x.dim() >= 1, LINEAR, ": x must be (..., in_features), got a 0-d tensor");
    check_input(weight.dim() == 2, LINEAR, ": weight must be (out_features, in_features), got shape ",
                weight.sym_sizes());
    gemm_sizes s{leading_extent(x.sym_sizes(), x.dim() - 1), x.sym_size(-1), weight.sym_size(0)};
    check_input(s.K == weight.sym_size(1), LINEAR, ": x has ", s.K, " features, weight expects ", weight.sym_size(1));
    if (bias && bias->defined())
        check_input(bias->dim() == 1 && bias->sym_size(0) == s.N, LINEAR, ": bias must be (out_features,) = (", s.N,
                    ",), got shape ", bias->sym_sizes());
    check_bf16_extents(LINEAR, s.M, s.K, s.N);
    return s;
}

// a (M, K) row-major and b (K, N) column-major fp8 e4m3; scales as torch._scaled_mm takes them.
gemm_sizes scaled_mm_rules(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                           const at::Tensor &scale_b, at::ScalarType out_dtype) {
    for (const named_tensor &t : {named_tensor{"a", a}, named_tensor{"b", b}}) {
        check_dtype(t.tensor.scalar_type() == at::kFloat8_e4m3fn, SCALED_MM, ": ", t.name,
                    " must be torch.float8_e4m3fn, got ", t.tensor.scalar_type());
        check_input(t.tensor.dim() == 2, SCALED_MM, ": ", t.name, " must be 2-D, got shape ", t.tensor.sym_sizes());
    }
    const gemm_sizes s{a.sym_size(0), a.sym_size(1), b.sym_size(1)};
    check_input(s.K == b.sym_size(0), SCALED_MM, ": a is ", s.M, "x", s.K, " but b is ", b.sym_size(0), "x", s.N,
                ": inner dimensions must match");
    check_input(s.K % 16 == 0 && s.N % 8 == 0, SCALED_MM, ": K=", s.K, " must be a multiple of 16 and N=", s.N,
                " a multiple of 8 (TMA moves rows whose stride is a multiple of 16 bytes); pad the tensors");
    check_input(s.M < (int64_t(1) << 31) && s.N < (int64_t(1) << 31) && s.K < (int64_t(1) << 31), SCALED_MM,
                ": dimensions must be below 2^31");
    check_input(row_major(s.M, s.K, a.sym_stride(0), a.sym_stride(1)), SCALED_MM,
                ": a must be row-major (call .contiguous())");
    check_input(row_major(s.N, s.K, b.sym_stride(1), b.sym_stride(0)), SCALED_MM,
                ": b must be column-major: pass w.t() for a contiguous (N, K) tensor w");
    // One element each (per tensor), or scale_a (M, 1) for A's rows and scale_b (1, N) for B's columns; here also
    // one of the two per tensor.
    struct scale_rule {
        const char *name;
        const at::Tensor &scale;
        c10::SymInt rows, cols;
        const char *what;
    };
    for (const scale_rule &r : {scale_rule{"scale_a", scale_a, s.M, 1, "per row of a"},
                                scale_rule{"scale_b", scale_b, 1, s.N, "per column of b"}}) {
        check_input(r.scale.scalar_type() == at::kFloat, SCALED_MM, ": ", r.name, " must be a float32 tensor, got ",
                    r.scale.scalar_type());
        const bool per_tensor = r.scale.sym_numel() == 1;
        check_input(per_tensor || (r.scale.dim() == 2 && r.scale.sym_size(0) == r.rows && r.scale.sym_size(1) == r.cols),
                    SCALED_MM, ": ", r.name, " must have one element (per tensor) or shape (", r.rows, ", ", r.cols,
                    ") (", r.what, "), got shape ", r.scale.sym_sizes());
    }
    check_input(out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat, SCALED_MM,
                ": out_dtype must be bfloat16, float16 or float32, got ", out_dtype);
    return s;
}

// The output: a fresh dense tensor on the inputs' device. CUDA tensors come from the caching allocator directly
// (no dispatch on the eager path); meta ones through the dispatcher, sizes possibly symbolic.
at::Tensor new_output(const at::Tensor &like, c10::SymIntArrayRef sizes, at::ScalarType type) {
    if (like.is_cuda()) return at::detail::empty_cuda(C10_AS_INTARRAYREF_SLOW(sizes), type, like.device(), std::nullopt);
    return at::empty_symint(sizes, like.options().dtype(type));
}

// (..., rows) with the last extent replaced.
std::vector<c10::SymInt> with_last(c10::SymIntArrayRef shape, const c10::SymInt &last) {
    std::vector<c10::SymInt> out(shape.begin(), shape.end());
    out.back() = last;
    return out;
}

// ---------------------------------------------------------------- CUDA

void check_cuda(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw c10::Error(message(what, " failed: ", cudaGetErrorString(e)));
}

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
        if (cols % 8 == 0 && row_major(rows, cols, row_stride, col_stride)) return {p, rows_along_k, {}};
        if (rows % 8 == 0 && row_major(cols, rows, col_stride, row_stride)) return {p, !rows_along_k, {}};
    }
    const at::Tensor view = base.as_strided({rows, cols}, {row_stride, col_stride});
    if (cols % 8 == 0) {
        at::Tensor copy = view.clone(at::MemoryFormat::Contiguous);
        return {copy.data_ptr(), rows_along_k, copy};
    }
    at::Tensor copy = view.t().clone(at::MemoryFormat::Contiguous); // the rules guarantee rows % 8 == 0 here
    return {copy.data_ptr(), !rows_along_k, copy};
}

// out (M x N, dense) = A @ B (+ bias, added to every row in the kernel's epilogue where the layout allows); M, N and
// K are not zero.
void run_bf16(at::Tensor &out, const operand &a, const operand &b, int64_t M, int64_t N, int64_t K,
              const at::Tensor *bias) {
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    // Small outputs over long contractions: fp32 partial sums of several K ranges, added in a run-to-run varying
    // order, so not under torch.use_deterministic_algorithms.
    const int splits = bias || at::globalContext().deterministicAlgorithms()
                           ? 1
                           : tk_gemm::matmul_bf16_splits(int(M), int(N), int(K));
    if (splits > 1) {
        at::Tensor partial = at::zeros({M, N}, out.options().dtype(at::kFloat));
        check_cuda(tk_gemm::matmul_bf16_split_k(a.ptr, a.kmajor, b.ptr, b.kmajor, partial.data_ptr<float>(), int(M),
                                                int(N), int(K), splits, stream),
                   "tk_ops.matmul split-K kernel");
        out.copy_(partial.view(out.sizes()));
        return;
    }
    // The bias epilogue exists for the nn.Linear layout (both operands K-major); other layouts add it after.
    const bool fused = bias && a.kmajor && b.kmajor;
    check_cuda(tk_gemm::matmul_bf16(a.ptr, a.kmajor, b.ptr, b.kmajor, out.data_ptr(), int(M), int(N), int(K), stream,
                                    fused ? bias->data_ptr() : nullptr),
               "tk_ops.matmul kernel");
    if (bias && !fused) out.add_(*bias);
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

at::Tensor matmul_cuda(const at::Tensor &a, const at::Tensor &b) {
    const gemm_sizes s = matmul_rules(a, b);
    check_devices(MATMUL, {{"a", a}, {"b", b}});
    const int64_t M = s.M.expect_int(), K = s.K.expect_int(), N = s.N.expect_int();
    const c10::cuda::CUDAGuard guard(a.device());
    at::Tensor out = new_output(a, with_last(a.sym_sizes(), s.N), a.scalar_type());
    if (M == 0 || N == 0) return out;
    if (K == 0) return out.zero_();
    const operand A = rows_operand(a, M);
    const operand B = tma_operand(b, K, N, b.stride(0), b.stride(1), false);
    run_bf16(out, A, B, M, N, K, nullptr);
    return out;
}

// y = x @ weight^T (+ bias): the weight is read in place as the kernel's K-major B operand.
at::Tensor linear_cuda(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    const gemm_sizes s = linear_rules(x, weight, bias);
    const bool has_bias = bias && bias->defined();
    check_devices(LINEAR, {{"x", x}, {"weight", weight}, {"bias", has_bias ? *bias : at::Tensor()}});
    const int64_t M = s.M.expect_int(), K = s.K.expect_int(), N = s.N.expect_int();
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = new_output(x, with_last(x.sym_sizes(), s.N), x.scalar_type());
    // The epilogue reads the bias as 4-byte pairs: a view at an odd offset is copied first.
    at::Tensor b;
    if (has_bias) b = bias->is_contiguous() && aligned(bias->data_ptr(), 4) ? *bias : bias->clone();
    if (M == 0 || N == 0) return y;
    if (K == 0) return has_bias ? y.copy_(b) : y.zero_();
    const operand A = rows_operand(x, M);
    const operand B = tma_operand(weight, K, N, weight.stride(1), weight.stride(0), false);
    run_bf16(y, A, B, M, N, K, has_bias ? &b : nullptr);
    return y;
}

at::Tensor scaled_mm_cuda(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                          const at::Tensor &scale_b, at::ScalarType out_dtype) {
    const gemm_sizes s = scaled_mm_rules(a, b, scale_a, scale_b, out_dtype);
    check_devices(SCALED_MM, {{"a", a}, {"b", b}, {"scale_a", scale_a}, {"scale_b", scale_b}});
    check_input(aligned(a.data_ptr(), 16) && aligned(b.data_ptr(), 16), SCALED_MM,
                ": a and b must start at 16-byte aligned addresses (TMA); copy a view at an odd offset with .clone()");
    const int64_t M = s.M.expect_int(), K = s.K.expect_int(), N = s.N.expect_int();
    const tk_gemm::out_dtype od = out_dtype == at::kBFloat16 ? tk_gemm::out_dtype::bf16
                                  : out_dtype == at::kHalf   ? tk_gemm::out_dtype::fp16
                                                             : tk_gemm::out_dtype::fp32;
    const c10::cuda::CUDAGuard guard(a.device());
    at::Tensor out = at::detail::empty_cuda({M, N}, out_dtype, a.device(), std::nullopt);
    if (M == 0 || N == 0) return out;
    if (K == 0) return out.zero_();
    at::Tensor sa = scale_a.contiguous(), sb = scale_b.contiguous();
    const bool a_rows = scale_a.numel() != 1, b_cols = scale_b.numel() != 1;
    tk_gemm::scales kind = tk_gemm::scales::per_tensor;
    if (a_rows || b_cols) {
        // The vector kernels take B's scales as a vector: a per-tensor one is spread over the N columns.
        if (!b_cols) sb = sb.reshape({1, 1}).expand({1, N}).contiguous();
        kind = a_rows ? tk_gemm::scales::per_row_and_column : tk_gemm::scales::per_column;
    }
    check_cuda(tk_gemm::scaled_mm_e4m3(a.data_ptr(), b.data_ptr(), sa.data_ptr<float>(), sb.data_ptr<float>(),
                                       out.data_ptr(), od, int(M), int(N), int(K), at::cuda::getCurrentCUDAStream(),
                                       kind),
               "tk_ops.scaled_mm kernel");
    return out;
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

at::Tensor matmul_meta(const at::Tensor &a, const at::Tensor &b) {
    const gemm_sizes s = matmul_rules(a, b);
    return new_output(a, with_last(a.sym_sizes(), s.N), a.scalar_type());
}

at::Tensor linear_meta(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    const gemm_sizes s = linear_rules(x, weight, bias);
    return new_output(x, with_last(x.sym_sizes(), s.N), x.scalar_type());
}

at::Tensor scaled_mm_meta(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                          const at::Tensor &scale_b, at::ScalarType out_dtype) {
    const gemm_sizes s = scaled_mm_rules(a, b, scale_a, scale_b, out_dtype);
    return new_output(a, {s.M, s.N}, out_dtype);
}

// ---------------------------------------------------------------- CPU: the op's rules, then the device rule

at::Tensor matmul_cpu(const at::Tensor &a, const at::Tensor &b) {
    matmul_rules(a, b);
    reject_cpu(MATMUL, {{"a", a}, {"b", b}});
}

at::Tensor linear_cpu(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    linear_rules(x, weight, bias);
    reject_cpu(LINEAR, {{"x", x}, {"weight", weight}, {"bias", bias ? *bias : at::Tensor()}});
}

at::Tensor scaled_mm_cpu(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                         const at::Tensor &scale_b, at::ScalarType out_dtype) {
    scaled_mm_rules(a, b, scale_a, scale_b, out_dtype);
    reject_cpu(SCALED_MM, {{"a", a}, {"b", b}, {"scale_a", scale_a}, {"scale_b", scale_b}});
}

// Debugging switch (gemm.h): runs every later GEMM of this process in the named configuration.
bool gemm_force_config(const std::string &name) { return tk_gemm::force_config(name.c_str()); }

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("matmul(Tensor a, Tensor b) -> Tensor");
    m.def("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
    m.def("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype) -> Tensor");
    m.def("gemm_force_config(str name) -> bool", &gemm_force_config);
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("matmul", &matmul_cuda);
    m.impl("linear", &linear_cuda);
    m.impl("scaled_mm", &scaled_mm_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("matmul", &matmul_meta);
    m.impl("linear", &linear_meta);
    m.impl("scaled_mm", &scaled_mm_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    m.impl("matmul", &matmul_cpu);
    m.impl("linear", &linear_cpu);
    m.impl("scaled_mm", &scaled_mm_cpu);
}
