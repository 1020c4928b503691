// The GEMM ops as torch sees them: tk_ops::matmul, tk_ops::linear and tk_ops::scaled_mm (schemas, and their CUDA,
// Meta and CPU kernels; the autograd of matmul and linear is in autograd.cpp, the operands' layouts around the bf16
// kernel in gemm_operands.cpp). The namespace tk_ops_testing holds the tests' and tools' seams: the same three ops
// with the configuration to run as an explicit argument (config: "auto" for the op's own choice, or a name of
// gemm_configs.cuh), under the same rules, and gemm_config, the configuration a problem picks.
//
// Each op's rules (dtypes, ranks, extents, layouts) are one function below, shared by its kernels: the CUDA kernel
// checks them before anything reaches a kernel, the Meta kernel (torch.compile's fake tensors) checks them and shapes
// the output the same way, and the CPU kernel (common/cpu_refusal.h) runs the Meta kernel and then asks for CUDA
// tensors. The Python wrappers (python/tk_ops/gemm.py, nn/gemm.py, _testing/gemm.py) only call these ops.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/checks.h"
#include "common/cpu_refusal.h"
#include "gemm.h"
#include "gemm_operands.h"

namespace {

using namespace tk_kernels;
using tk_gemm::config_id;

constexpr const char *MATMUL = "tk_ops.matmul";
constexpr const char *LINEAR = "tk_ops.linear";
constexpr const char *SCALED_MM = "tk_ops.scaled_mm";
constexpr const char *TESTING_MATMUL = "tk_ops_testing.matmul";
constexpr const char *TESTING_LINEAR = "tk_ops_testing.linear";
constexpr const char *TESTING_SCALED_MM = "tk_ops_testing.scaled_mm";
constexpr const char *GEMM_CONFIG = "tk_ops_testing.gemm_config";

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
gemm_sizes matmul_rules(const char *op, const at::Tensor &a, const at::Tensor &b) {
    check_bf16(op, "a", a);
    check_bf16(op, "b", b);
    check_input(a.dim() >= 2, op, ": a must be (M, K) or (..., M, K), got shape ", a.sym_sizes());
    check_input(b.dim() == 2, op, ": b must be 2-D (K, N), got shape ", b.sym_sizes());
    gemm_sizes s{leading_extent(a.sym_sizes(), a.dim() - 1), a.sym_size(-1), b.sym_size(1)};
    check_input(s.K == b.sym_size(0), op, ": a is ", s.M, "x", s.K, " but b is ", b.sym_size(0), "x", s.N,
                ": inner dimensions must match");
    check_bf16_extents(op, s.M, s.K, s.N);
    return s;
}

// x (..., K), weight (N, K) as nn.Linear stores it, bias (N,) or absent.
gemm_sizes linear_rules(const char *op, const at::Tensor &x, const at::Tensor &weight,
                        const std::optional<at::Tensor> &bias) {
    check_bf16(op, "x", x);
    check_bf16(op, "weight", weight);
    if (bias && bias->defined()) check_bf16(op, "bias", *bias);
    check_input(x.dim() >= 1, op, ": x must be (..., in_features), got a 0-d tensor");
    check_input(weight.dim() == 2, op, ": weight must be (out_features, in_features), got shape ", weight.sym_sizes());
    gemm_sizes s{leading_extent(x.sym_sizes(), x.dim() - 1), x.sym_size(-1), weight.sym_size(0)};
    check_input(s.K == weight.sym_size(1), op, ": x has ", s.K, " features, weight expects ", weight.sym_size(1));
    if (bias && bias->defined())
        check_input(bias->dim() == 1 && bias->sym_size(0) == s.N, op, ": bias must be (out_features,) = (", s.N,
                    ",), got shape ", bias->sym_sizes());
    check_bf16_extents(op, s.M, s.K, s.N);
    return s;
}

void check_scaled_mm_out_dtype(const char *op, at::ScalarType out_dtype) {
    check_input(out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat, op,
                ": out_dtype must be bfloat16, float16 or float32, got ", out_dtype);
}

// a (M, K) row-major and b (K, N) column-major fp8 e4m3; scales as torch._scaled_mm takes them.
gemm_sizes scaled_mm_rules(const char *op, const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                           const at::Tensor &scale_b, at::ScalarType out_dtype) {
    for (const named_tensor &t : {named_tensor{"a", a}, named_tensor{"b", b}}) {
        check_dtype(t.tensor.scalar_type() == at::kFloat8_e4m3fn, op, ": ", t.name,
                    " must be torch.float8_e4m3fn, got ", t.tensor.scalar_type());
        check_input(t.tensor.dim() == 2, op, ": ", t.name, " must be 2-D, got shape ", t.tensor.sym_sizes());
    }
    const gemm_sizes s{a.sym_size(0), a.sym_size(1), b.sym_size(1)};
    check_input(s.K == b.sym_size(0), op, ": a is ", s.M, "x", s.K, " but b is ", b.sym_size(0), "x", s.N,
                ": inner dimensions must match");
    check_input(s.K % 16 == 0 && s.N % 8 == 0, op, ": K=", s.K, " must be a multiple of 16 and N=", s.N,
                " a multiple of 8 (TMA moves rows whose stride is a multiple of 16 bytes); pad the tensors");
    check_input(s.M < (int64_t(1) << 31) && s.N < (int64_t(1) << 31) && s.K < (int64_t(1) << 31), op,
                ": dimensions must be below 2^31");
    check_input(row_major(s.M, s.K, a.sym_stride(0), a.sym_stride(1)), op, ": a must be row-major (call .contiguous())");
    check_input(row_major(s.N, s.K, b.sym_stride(1), b.sym_stride(0)), op,
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
        check_input(r.scale.scalar_type() == at::kFloat, op, ": ", r.name, " must be a float32 tensor, got ",
                    r.scale.scalar_type());
        const bool per_tensor = r.scale.sym_numel() == 1;
        check_input(per_tensor || (r.scale.dim() == 2 && r.scale.sym_size(0) == r.rows && r.scale.sym_size(1) == r.cols),
                    op, ": ", r.name, " must have one element (per tensor) or shape (", r.rows, ", ", r.cols, ") (",
                    r.what, "), got shape ", r.scale.sym_sizes());
    }
    check_scaled_mm_out_dtype(op, out_dtype);
    return s;
}

// The testing ops' config: "auto" (the op's own choice) or a shipped configuration that runs the problem: the fp8
// kernel comes in big, small and tiny blocks, the resident B panel holds short contractions only.
config_id config_rule(const char *op, const std::string &name, const c10::SymInt &K, bool fp8) {
    for (const tk_gemm::config_name &c : tk_gemm::CONFIG_NAMES) {
        if (name != c.name) continue;
        const bool fp8_block = c.id == config_id::big || c.id == config_id::small || c.id == config_id::tiny;
        check_input(!fp8 || fp8_block || c.id == config_id::automatic, op,
                    ": the fp8 kernel runs config auto, big, small or tiny, got '", name, "'");
        constexpr int MAX_K = tk_gemm::resident_max_k(tk_gemm::BF16_BYTES);
        check_input(c.id != config_id::resident || K <= MAX_K, op, ": config 'resident' holds contractions of at most ",
                    MAX_K, " (its B panel), got K=", K);
        return c.id;
    }
    std::string names;
    for (const tk_gemm::config_name &c : tk_gemm::CONFIG_NAMES) names += (names.empty() ? "" : ", ") + std::string(c.name);
    check_input(false, op, ": config must be one of ", names, "; got '", name, "'");
    return config_id::automatic;
}

struct testing_rules {
    gemm_sizes sizes;
    config_id config;
};

testing_rules testing_matmul_rules(const at::Tensor &a, const at::Tensor &b, const std::string &config) {
    const gemm_sizes s = matmul_rules(TESTING_MATMUL, a, b);
    return {s, config_rule(TESTING_MATMUL, config, s.K, false)};
}

testing_rules testing_linear_rules(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias,
                                   const std::string &config) {
    const gemm_sizes s = linear_rules(TESTING_LINEAR, x, weight, bias);
    return {s, config_rule(TESTING_LINEAR, config, s.K, false)};
}

testing_rules testing_scaled_mm_rules(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                                      const at::Tensor &scale_b, at::ScalarType out_dtype, const std::string &config) {
    const gemm_sizes s = scaled_mm_rules(TESTING_SCALED_MM, a, b, scale_a, scale_b, out_dtype);
    return {s, config_rule(TESTING_SCALED_MM, config, s.K, true)};
}

// gemm_config's problem: positive sizes below 2^31 (an empty product runs no kernel); bf16 inputs with a bf16
// output, or fp8 e4m3 inputs with one of scaled_mm's outputs and no bias.
void gemm_config_rules(int64_t M, int64_t N, int64_t K, at::ScalarType in_dtype, at::ScalarType out_dtype, bool bias) {
    for (const int64_t d : {M, N, K})
        check_input(d > 0 && d < (int64_t(1) << 31), GEMM_CONFIG, ": M, N and K must be positive and below 2^31, got ",
                    M, ", ", N, ", ", K);
    check_dtype(in_dtype == at::kBFloat16 || in_dtype == at::kFloat8_e4m3fn, GEMM_CONFIG,
                ": in_dtype must be torch.bfloat16 or torch.float8_e4m3fn, got ", in_dtype);
    if (in_dtype == at::kBFloat16) {
        check_input(out_dtype == at::kBFloat16, GEMM_CONFIG, ": the bf16 GEMM's out_dtype is bfloat16, got ", out_dtype);
    } else {
        check_scaled_mm_out_dtype(GEMM_CONFIG, out_dtype);
        check_input(!bias, GEMM_CONFIG, ": the fp8 GEMM has no bias");
    }
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

bool aligned(const void *p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

at::Tensor matmul_on_gpu(const char *op, const gemm_sizes &s, const at::Tensor &a, const at::Tensor &b,
                         config_id config) {
    check_devices(op, {{"a", a}, {"b", b}});
    const int64_t M = s.M.expect_int(), K = s.K.expect_int(), N = s.N.expect_int();
    const c10::cuda::CUDAGuard guard(a.device());
    at::Tensor out = new_output(a, with_last(a.sym_sizes(), s.N), a.scalar_type());
    if (M == 0 || N == 0) return out;
    if (K == 0) return out.zero_();
    check_launch(tk_gemm::matmul_product(out, a, b, M, N, K, config), "tk_ops.matmul kernel");
    return out;
}

at::Tensor matmul_cuda(const at::Tensor &a, const at::Tensor &b) {
    return matmul_on_gpu(MATMUL, matmul_rules(MATMUL, a, b), a, b, config_id::automatic);
}

at::Tensor testing_matmul_cuda(const at::Tensor &a, const at::Tensor &b, const std::string &config) {
    const testing_rules r = testing_matmul_rules(a, b, config);
    return matmul_on_gpu(TESTING_MATMUL, r.sizes, a, b, r.config);
}

// y = x @ weight^T (+ bias).
at::Tensor linear_on_gpu(const char *op, const gemm_sizes &s, const at::Tensor &x, const at::Tensor &weight,
                         const std::optional<at::Tensor> &bias, config_id config) {
    const bool has_bias = bias && bias->defined();
    check_devices(op, {{"x", x}, {"weight", weight}, {"bias", has_bias ? *bias : at::Tensor()}});
    const int64_t M = s.M.expect_int(), K = s.K.expect_int(), N = s.N.expect_int();
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = new_output(x, with_last(x.sym_sizes(), s.N), x.scalar_type());
    if (M == 0 || N == 0) return y;
    if (K == 0) return has_bias ? y.copy_(*bias) : y.zero_();
    check_launch(tk_gemm::linear_product(y, x, weight, has_bias ? *bias : at::Tensor(), M, N, K, config),
                 "tk_ops.linear kernel");
    return y;
}

at::Tensor linear_cuda(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    return linear_on_gpu(LINEAR, linear_rules(LINEAR, x, weight, bias), x, weight, bias, config_id::automatic);
}

at::Tensor testing_linear_cuda(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias,
                               const std::string &config) {
    const testing_rules r = testing_linear_rules(x, weight, bias, config);
    return linear_on_gpu(TESTING_LINEAR, r.sizes, x, weight, bias, r.config);
}

at::Tensor scaled_mm_on_gpu(const char *op, const gemm_sizes &s, const at::Tensor &a, const at::Tensor &b,
                            const at::Tensor &scale_a, const at::Tensor &scale_b, at::ScalarType out_dtype,
                            config_id config) {
    check_devices(op, {{"a", a}, {"b", b}, {"scale_a", scale_a}, {"scale_b", scale_b}});
    check_input(aligned(a.data_ptr(), 16) && aligned(b.data_ptr(), 16), op,
                ": a and b must start at 16-byte aligned addresses (TMA); copy a view at an odd offset with .clone()");
    const int64_t M = s.M.expect_int(), K = s.K.expect_int(), N = s.N.expect_int();
    const c10::cuda::CUDAGuard guard(a.device());
    at::Tensor out = at::detail::empty_cuda({M, N}, out_dtype, a.device(), std::nullopt);
    if (M == 0 || N == 0) return out;
    if (K == 0) return out.zero_();
    at::Tensor sa = scale_a.contiguous(), sb = scale_b.contiguous();
    tk_gemm::scaled_mm_problem p{};
    const bool a_rows = scale_a.numel() != 1, b_cols = scale_b.numel() != 1;
    if (a_rows || b_cols) {
        // The vector kernels take B's scales as a vector: a per-tensor one is spread over the N columns.
        if (!b_cols) sb = sb.reshape({1, 1}).expand({1, N}).contiguous();
        p.scaling = a_rows ? tk_gemm::scales::per_row_and_column : tk_gemm::scales::per_column;
    }
    p.a = a.data_ptr();
    p.b = b.data_ptr();
    p.scale_a = sa.data_ptr<float>();
    p.scale_b = sb.data_ptr<float>();
    p.c = out.data_ptr();
    p.type = dtype_of(out_dtype);
    p.M = int(M), p.N = int(N), p.K = int(K);
    p.config = config;
    check_launch(tk_gemm::scaled_mm_e4m3(p, at::cuda::getCurrentCUDAStream()), "tk_ops.scaled_mm kernel");
    return out;
}

at::Tensor scaled_mm_cuda(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                          const at::Tensor &scale_b, at::ScalarType out_dtype) {
    const gemm_sizes s = scaled_mm_rules(SCALED_MM, a, b, scale_a, scale_b, out_dtype);
    return scaled_mm_on_gpu(SCALED_MM, s, a, b, scale_a, scale_b, out_dtype, config_id::automatic);
}

at::Tensor testing_scaled_mm_cuda(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                                  const at::Tensor &scale_b, at::ScalarType out_dtype, const std::string &config) {
    const testing_rules r = testing_scaled_mm_rules(a, b, scale_a, scale_b, out_dtype, config);
    return scaled_mm_on_gpu(TESTING_SCALED_MM, r.sizes, a, b, scale_a, scale_b, out_dtype, r.config);
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

at::Tensor matmul_meta(const at::Tensor &a, const at::Tensor &b) {
    const gemm_sizes s = matmul_rules(MATMUL, a, b);
    return new_output(a, with_last(a.sym_sizes(), s.N), a.scalar_type());
}

at::Tensor testing_matmul_meta(const at::Tensor &a, const at::Tensor &b, const std::string &config) {
    const gemm_sizes s = testing_matmul_rules(a, b, config).sizes;
    return new_output(a, with_last(a.sym_sizes(), s.N), a.scalar_type());
}

at::Tensor linear_meta(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    const gemm_sizes s = linear_rules(LINEAR, x, weight, bias);
    return new_output(x, with_last(x.sym_sizes(), s.N), x.scalar_type());
}

at::Tensor testing_linear_meta(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias,
                               const std::string &config) {
    const gemm_sizes s = testing_linear_rules(x, weight, bias, config).sizes;
    return new_output(x, with_last(x.sym_sizes(), s.N), x.scalar_type());
}

at::Tensor scaled_mm_meta(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                          const at::Tensor &scale_b, at::ScalarType out_dtype) {
    const gemm_sizes s = scaled_mm_rules(SCALED_MM, a, b, scale_a, scale_b, out_dtype);
    return new_output(a, {s.M, s.N}, out_dtype);
}

at::Tensor testing_scaled_mm_meta(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                                  const at::Tensor &scale_b, at::ScalarType out_dtype, const std::string &config) {
    const gemm_sizes s = testing_scaled_mm_rules(a, b, scale_a, scale_b, out_dtype, config).sizes;
    return new_output(a, {s.M, s.N}, out_dtype);
}

// ---------------------------------------------------------------- no tensors: one kernel for every backend

// The configuration the public op would run an M x N x K problem in now, on the current GPU (an H100's SM count where
// none is visible): tk_ops.matmul or tk_ops.nn.Linear for bf16 inputs (bias: fused, which rules split-K out; "split"
// where split-K cuts the contraction), tk_ops.scaled_mm for fp8 ones.
std::string gemm_config(int64_t M, int64_t N, int64_t K, at::ScalarType in_dtype, at::ScalarType out_dtype, bool bias) {
    gemm_config_rules(M, N, K, in_dtype, out_dtype, bias);
    if (in_dtype == at::kBFloat16) {
        if (tk_gemm::contraction_ranges(M, N, K, bias) > 1) return "split";
        tk_gemm::gemm_problem p{};
        p.M = int(M), p.N = int(N), p.K = int(K);
        return tk_gemm::name_of(tk_gemm::matmul_bf16_config(p));
    }
    tk_gemm::scaled_mm_problem p{};
    p.type = dtype_of(out_dtype);
    p.M = int(M), p.N = int(N), p.K = int(K);
    return tk_gemm::name_of(tk_gemm::scaled_mm_e4m3_config(p));
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("matmul(Tensor a, Tensor b) -> Tensor");
    m.def("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
    m.def("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype) -> Tensor");
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
    m.impl("matmul", tk_kernels::cpu_refusal());
    m.impl("linear", tk_kernels::cpu_refusal());
    m.impl("scaled_mm", tk_kernels::cpu_refusal());
}

TORCH_LIBRARY_FRAGMENT(tk_ops_testing, m) {
    m.def("matmul(Tensor a, Tensor b, str config) -> Tensor");
    m.def("linear(Tensor x, Tensor weight, Tensor? bias, str config) -> Tensor");
    m.def("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype, str config) -> Tensor");
    // No tensor to dispatch on: the one kernel serves every backend.
    m.def("gemm_config(int M, int N, int K, ScalarType in_dtype, ScalarType out_dtype, bool bias) -> str", &gemm_config);
}

TORCH_LIBRARY_IMPL(tk_ops_testing, CUDA, m) {
    m.impl("matmul", &testing_matmul_cuda);
    m.impl("linear", &testing_linear_cuda);
    m.impl("scaled_mm", &testing_scaled_mm_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops_testing, Meta, m) {
    m.impl("matmul", &testing_matmul_meta);
    m.impl("linear", &testing_linear_meta);
    m.impl("scaled_mm", &testing_scaled_mm_meta);
}

TORCH_LIBRARY_IMPL(tk_ops_testing, CPU, m) {
    m.impl("matmul", tk_kernels::cpu_refusal());
    m.impl("linear", tk_kernels::cpu_refusal());
    m.impl("scaled_mm", tk_kernels::cpu_refusal());
}
