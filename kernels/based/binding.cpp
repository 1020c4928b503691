// The Based op as torch sees it: tk_ops::based_fwd(q, k, v, scale, normalize, eps) -> o (schema, and its CUDA, Meta
// and CPU kernels).
//
// The op's rules are one function below, shared by its three kernels: the CUDA kernel checks them before anything
// reaches a kernel, the Meta kernel (torch.compile's fake tensors) checks them and lays the output out the same way,
// and the CPU kernel checks them and then asks for CUDA tensors (see common/checks.h).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <iterator>
#include <optional>
#include <string>

#include "based.h"
#include "common/bhnd_tensors.h"
#include "common/checks.h"

namespace {

using namespace tk_kernels;

constexpr const char *BASED = "tk_ops.based";

// ---------------------------------------------------------------- the rules

// "64", "64 or 128": the value dimensions the kernels are built for.
std::string value_dim_list() {
    std::string s;
    const size_t n = std::size(tk_based::VALUE_DIMS);
    for (size_t i = 0; i < n; i++)
        s += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::to_string(tk_based::VALUE_DIMS[i]);
    return s;
}

// q, k (B, H, N, 16) and v (B, H, N, Dv); returns the query scale, 1/sqrt(16) unless given.
double based_rules(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
                   double eps) {
    for (const named_tensor &t : {named_tensor{"q", q}, named_tensor{"k", k}, named_tensor{"v", v}}) {
        const at::ScalarType type = t.tensor.scalar_type();
        check_dtype(type == at::kBFloat16 || type == at::kHalf, BASED, ": ", t.name,
                    " must be bfloat16 or float16, got ", type);
        check_input(t.tensor.dim() == 4, BASED, ": ", t.name, " must be 4-D (batch, heads, seq_len, dim), got shape ",
                    t.tensor.sym_sizes());
    }
    check_dtype(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), BASED,
                ": q, k, v must share one dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
    check_input(k.sym_sizes() == q.sym_sizes(), BASED, ": q and k must have the same shape, got ", q.sym_sizes(),
                " and ", k.sym_sizes());
    check_input(v.sym_size(0) == q.sym_size(0) && v.sym_size(1) == q.sym_size(1) && v.sym_size(2) == q.sym_size(2),
                BASED, ": v must be (B, H, N, Dv) with q's (B, H, N) = ", q.sym_sizes().slice(0, 3), ", got ",
                v.sym_sizes());
    // The feature and value dimensions pick the kernel: symbolic ones are specialised here.
    const int64_t dk = q.sym_size(3).guard_int(__FILE__, __LINE__);
    check_input(dk == tk_based::FEATURE_DIM, BASED, ": the feature dimension of q and k must be ", tk_based::FEATURE_DIM,
                ", got ", dk);
    const int64_t dv = v.sym_size(3).guard_int(__FILE__, __LINE__);
    check_input(dv % 16 == 0 && dv >= 16 && dv <= 128, BASED,
                ": the value dimension of v must be a multiple of 16 up to 128, got ", dv);
    check_input(tk_based::supported_value_dim(int(dv)), BASED, ": the value dimension ", dv,
                " is not built yet; this build takes ", value_dim_list());
    // The kernel indexes tasks and rows with 32-bit integers.
    check_input(q.sym_size(0) * q.sym_size(1) < (int64_t(1) << 31) && q.sym_size(2) < (int64_t(1) << 30), BASED,
                ": problem too large");
    check_input(std::isfinite(eps) && eps >= 0, BASED, ": eps must be a finite number >= 0, got ", eps);
    if (!scale) return 1.0 / std::sqrt(double(dk));
    check_input(std::isfinite(*scale), BASED, ": scale must be a finite number or None, got ", *scale);
    return *scale;
}

// ---------------------------------------------------------------- CUDA

at::Tensor based_fwd_cuda(const at::Tensor &q_in, const at::Tensor &k_in, const at::Tensor &v_in,
                          std::optional<double> scale_in, bool normalize, double eps) {
    const double scale = based_rules(q_in, k_in, v_in, scale_in, eps);
    check_devices(BASED, {{"q", q_in}, {"k", k_in}, {"v", v_in}});

    const c10::cuda::CUDAGuard guard(q_in.device());
    at::Tensor o = empty_like_order(v_in, v_in.scalar_type()); // v's memory order
    if (o.numel() == 0) return o;
    const at::Tensor q = tma_readable_copy(q_in), k = tma_readable_copy(k_in), v = tma_readable_copy(v_in);

    tk_based::fwd_problem p{};
    p.q = view_of(q);
    p.k = view_of(k);
    p.v = view_of(v);
    p.o = out_of(o);
    p.batch = int(q.size(0));
    p.heads = int(q.size(1));
    p.len = int(q.size(2));
    p.value_dim = int(v.size(3));
    p.scale = float(scale);
    p.normalize = normalize;
    p.eps = float(eps);
    p.type = q.scalar_type() == at::kBFloat16 ? tk_based::dtype::bf16 : tk_based::dtype::fp16;
    const cudaError_t e = tk_based::forward(p, at::cuda::getCurrentCUDAStream());
    if (e != cudaSuccess) throw c10::Error(message("tk_ops.based kernel failed: ", cudaGetErrorString(e)));
    return o;
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

at::Tensor based_fwd_meta(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
                          bool normalize, double eps) {
    based_rules(q, k, v, scale, eps);
    return empty_like_order(v, v.scalar_type());
}

// ---------------------------------------------------------------- CPU: the op's rules, then the device rule

at::Tensor based_fwd_cpu(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, std::optional<double> scale,
                         bool normalize, double eps) {
    based_rules(q, k, v, scale, eps);
    reject_cpu(BASED, {{"q", q}, {"k", k}, {"v", v}});
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("based_fwd(Tensor q, Tensor k, Tensor v, float? scale=None, bool normalize=True, float eps=1e-6) -> Tensor");
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) { m.impl("based_fwd", &based_fwd_cuda); }

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) { m.impl("based_fwd", &based_fwd_meta); }

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) { m.impl("based_fwd", &based_fwd_cpu); }
