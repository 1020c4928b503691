// The Mamba-2 decoding step as torch sees it (schema, and its CUDA, Meta, CPU and Autograd kernels):
//
//   mamba2_step(state!, x, dt, A, B, C, D, z, dt_bias, dt_softplus) -> y          (the state updated in place)
//
// mamba_ssm's selective_state_update for heads: state (b, h, p, n) float32; x, z (b, h, p); dt (b, h); A (h,);
// B, C (b, g, n) with g dividing h; D (h,) or (h, p); dt_bias (h,). Returns y (b, h, p) in x's dtype.
//
// The rules are one function below, shared by the op's kernels: the CUDA kernel checks them before anything reaches
// the kernel, the Meta kernel (torch.compile's fake tensors) checks them and shapes the output the same way, and the
// CPU kernel checks them and then asks for CUDA tensors (see common/checks.h). The Python wrapper
// (python/tk_ops/mamba2.py) only calls this op.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/checks.h"
#include "mamba2_step.h"

namespace {

using namespace tk_kernels;

constexpr const char *STEP = "tk_ops.mamba2_step";

using opt_tensor = std::optional<at::Tensor>;

// ---------------------------------------------------------------- the rules

void float32_rule(const char *name, const at::Tensor &t) {
    if (!t.defined()) return;
    check_dtype(t.scalar_type() == at::kFloat, STEP, ": ", name, " must be float32, got ", t.scalar_type());
}

void shape_rule(const char *name, const at::Tensor &t, c10::SymIntArrayRef shape, const char *what) {
    if (!t.defined()) return;
    check_input(t.sym_sizes() == shape, STEP, ": ", name, " must be ", what, " = ", shape, ", got ", t.sym_sizes());
}

// Every rule of mamba2_step.
void step_rules(const at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                const at::Tensor &B, const at::Tensor &C, const at::Tensor &D, const at::Tensor &z,
                const at::Tensor &dt_bias) {
    // dtypes: x, B, C, z 16-bit and alike; dt float32 or x's dtype (a slice of the model's projection); the state and
    // the parameters float32.
    const at::ScalarType type = x.scalar_type();
    check_dtype(type == at::kBFloat16 || type == at::kHalf, STEP, ": x must be bfloat16 or float16, got ", type);
    for (const named_tensor &t : {named_tensor{"B", B}, named_tensor{"C", C}, named_tensor{"z", z}}) {
        if (!t.tensor.defined()) continue;
        check_dtype(t.tensor.scalar_type() == type, STEP, ": ", t.name, " must have x's dtype ", type, ", got ",
                    t.tensor.scalar_type());
    }
    check_dtype(dt.scalar_type() == at::kFloat || dt.scalar_type() == type, STEP, ": dt must be float32 or x's dtype ",
                type, ", got ", dt.scalar_type());
    check_dtype(state.scalar_type() == at::kFloat, STEP, ": state must be float32, got ", state.scalar_type(),
                " (the state is updated in place, so it cannot be converted)");
    float32_rule("A", A);
    float32_rule("D", D);
    float32_rule("dt_bias", dt_bias);

    // Shapes.
    check_input(state.dim() == 4, STEP, ": state must be 4-D (batch, heads, head_dim, state_dim), got shape ",
                state.sym_sizes());
    const c10::SymInt &b = state.sym_size(0), &h = state.sym_size(1), &p = state.sym_size(2), &n = state.sym_size(3);
    const std::vector<c10::SymInt> bhp = {b, h, p}, bh = {b, h}, hs = {h}, hp = {h, p};
    check_input(x.sym_sizes() == c10::SymIntArrayRef(bhp), STEP,
                ": x must be (batch, heads, head_dim) = ", c10::SymIntArrayRef(bhp), " as the state (batch, heads, "
                "head_dim, state_dim) = ", state.sym_sizes(), " says, one token per sequence; got ", x.sym_sizes());
    shape_rule("dt", dt, bh, "(batch, heads)");
    shape_rule("A", A, hs, "(heads,)");
    check_input(B.dim() == 3, STEP, ": B must be 3-D (batch, groups, state_dim), got shape ", B.sym_sizes());
    const c10::SymInt &g = B.sym_size(1);
    check_input(B.sym_size(0) == b && B.sym_size(2) == n, STEP, ": B must be (batch, groups, state_dim) with the ",
                "state's batch = ", b, " and state_dim = ", n, ", got ", B.sym_sizes());
    check_input(g > 0 && h % g == 0, STEP, ": the number of groups (B's dim 1) must divide the heads (the state's dim 1) = ",
                h, ", got ", g);
    check_input(C.sym_sizes() == B.sym_sizes(), STEP, ": C must have B's shape ", B.sym_sizes(), ", got ",
                C.sym_sizes());
    if (D.defined())
        check_input(D.sym_sizes() == c10::SymIntArrayRef(hs) || D.sym_sizes() == c10::SymIntArrayRef(hp), STEP,
                    ": D must be (heads,) = ", c10::SymIntArrayRef(hs), " or (heads, head_dim) = ",
                    c10::SymIntArrayRef(hp), ", got ", D.sym_sizes());
    shape_rule("z", z, x.sym_sizes(), "x's shape (batch, heads, head_dim)");
    shape_rule("dt_bias", dt_bias, hs, "(heads,)");
    // The state dimension picks the kernel, so a symbolic one is specialised here.
    const int64_t nv = n.guard_int(__FILE__, __LINE__);
    check_input(tk_mamba2::step_supported_state_dim(nv), STEP,
                ": the state dimension (the state's last, B's and C's last) must be 16, 32, 64, 128 or 256, got ", nv);
    // The kernel indexes (batch, head) pairs and rows with 32-bit integers.
    check_input(b * h < (int64_t(1) << 31) && p < (int64_t(1) << 30), STEP, ": problem too large");
}

// The output: x's shape and dtype, contiguous.
at::Tensor empty_output(const at::Tensor &x) {
    if (x.is_cuda()) return at::detail::empty_cuda(x.sizes(), x.scalar_type(), x.device(), std::nullopt);
    return at::empty_symint(x.sym_sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
}

// ---------------------------------------------------------------- CUDA

void check_launch(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw c10::Error(message(what, " failed: ", cudaGetErrorString(e)));
}

// A per-head parameter as the kernel reads it: contiguous, else copied (they are a few hundred floats).
at::Tensor dense(const at::Tensor &t) {
    if (!t.defined() || t.is_contiguous()) return t;
    return t.contiguous();
}

tk_mamba2::step_token token_of(const at::Tensor &t) {
    if (!t.defined()) return {nullptr, 0, 0, 0};
    return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
}

template <typename P> const P *ptr_or_null(const at::Tensor &t) { return t.defined() ? t.data_ptr<P>() : nullptr; }

at::Tensor step_cuda(at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A_in,
                     const at::Tensor &B, const at::Tensor &C, const opt_tensor &D_opt, const opt_tensor &z_opt,
                     const opt_tensor &dt_bias_opt, bool dt_softplus) {
    const at::Tensor D_in = D_opt.value_or(at::Tensor()), z = z_opt.value_or(at::Tensor());
    const at::Tensor bias_in = dt_bias_opt.value_or(at::Tensor());
    step_rules(state, x, dt, A_in, B, C, D_in, z, bias_in);
    check_devices(STEP, {{"state", state}, {"x", x}, {"dt", dt}, {"A", A_in}, {"B", B}, {"C", C}, {"D", D_in},
                         {"z", z}, {"dt_bias", bias_in}});

    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor y = empty_output(x);
    if (y.numel() == 0) return y;
    const at::Tensor A = dense(A_in), D = dense(D_in), bias = dense(bias_in);

    tk_mamba2::step_problem p{};
    p.state = state.data_ptr<float>();
    for (int d = 0; d < 4; d++) p.state_stride[d] = state.stride(d);
    p.x = token_of(x);
    p.z = token_of(z);
    p.B = token_of(B);
    p.C = token_of(C);
    p.dt = dt.data_ptr();
    p.dt_stride_b = dt.stride(0);
    p.dt_stride_h = dt.stride(1);
    p.dt_is_float = dt.scalar_type() == at::kFloat;
    p.A = A.data_ptr<float>();
    p.D = ptr_or_null<float>(D);
    p.D_per_channel = D.defined() && D.dim() == 2;
    p.dt_bias = ptr_or_null<float>(bias);
    p.dt_softplus = dt_softplus;
    p.y = y.data_ptr();
    p.batch = int(state.size(0));
    p.heads = int(state.size(1));
    p.groups = int(B.size(1));
    p.head_dim = int(state.size(2));
    p.state_dim = int(state.size(3));
    p.type = x.scalar_type() == at::kBFloat16 ? tk_mamba2::dtype::bf16 : tk_mamba2::dtype::fp16;
    check_launch(tk_mamba2::step(p, at::cuda::getCurrentCUDAStream()), "tk_ops.mamba2_step kernel");
    return y;
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

at::Tensor step_meta(at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                     const at::Tensor &B, const at::Tensor &C, const opt_tensor &D, const opt_tensor &z,
                     const opt_tensor &dt_bias, bool dt_softplus) {
    step_rules(state, x, dt, A, B, C, D.value_or(at::Tensor()), z.value_or(at::Tensor()),
               dt_bias.value_or(at::Tensor()));
    return empty_output(x);
}

// ---------------------------------------------------------------- CPU: the op's rules, then the device rule

at::Tensor step_cpu(at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                    const at::Tensor &B, const at::Tensor &C, const opt_tensor &D_opt, const opt_tensor &z_opt,
                    const opt_tensor &dt_bias_opt, bool dt_softplus) {
    const at::Tensor D = D_opt.value_or(at::Tensor()), z = z_opt.value_or(at::Tensor());
    const at::Tensor bias = dt_bias_opt.value_or(at::Tensor());
    step_rules(state, x, dt, A, B, C, D, z, bias);
    reject_cpu(STEP, {{"state", state}, {"x", x}, {"dt", dt}, {"A", A}, {"B", B}, {"C", C}, {"D", D}, {"z", z},
                      {"dt_bias", bias}});
}

// ---------------------------------------------------------------- Autograd

// The step has no gradient: it is for decoding. Its own autograd kernel (as based_step's, kernels/based/autograd.cpp)
// keeps a step taken in grad mode cheap and honest: the output has no gradient, where the fallback for ops without one
// would give it a gradient function that silently yields nothing. The state is still marked as modified, so that a
// graph which saved it notices the change. A state that is itself part of a graph is refused: changed in place
// without a record, it would pass wrong gradients on.
at::Tensor step_autograd(at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                         const at::Tensor &B, const at::Tensor &C, const opt_tensor &D, const opt_tensor &z,
                         const opt_tensor &dt_bias, bool dt_softplus) {
    if (at::GradMode::is_enabled() && state.requires_grad())
        throw c10::ValueError("tk_ops.mamba2_step: the state requires grad, but the step updates it in place and has "
                              "no gradient; decode under torch.no_grad() or pass the state .detach()ed");
    using step_fn = at::Tensor(at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                               const at::Tensor &, const at::Tensor &, const opt_tensor &, const opt_tensor &,
                               const opt_tensor &, bool);
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::mamba2_step", "").typed<step_fn>();
    at::Tensor y;
    {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        y = op.call(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus);
    }
    if (!state.is_inference()) torch::autograd::impl::bump_version(state);
    return y;
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("mamba2_step(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D=None, "
          "Tensor? z=None, Tensor? dt_bias=None, bool dt_softplus=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) { m.impl("mamba2_step", &step_cuda); }

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) { m.impl("mamba2_step", &step_meta); }

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) { m.impl("mamba2_step", &step_cpu); }

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) { m.impl("mamba2_step", &step_autograd); }
