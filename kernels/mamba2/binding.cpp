// The Mamba-2 ops as torch sees them (schemas, rules, and their CUDA, Meta and CPU kernels):
//
//   mamba2_chunk_scan_fwd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min,
//                         dt_max, return_final_states) -> (out, final_states)
//   mamba2_chunk_scan_bwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max,
//                         d_out, d_final_states) -> (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, d_initial_states)
//   mamba2_step(state!, x, dt, A, B, C, D, z, dt_bias, dt_softplus) -> y          (the state updated in place)
//
// The scan: the arguments of mamba_ssm's mamba_chunk_scan_combined, dt_limit as its two ends. final_states is an empty
// (0,) float32 tensor unless return_final_states: a schema's outputs are always tensors, and their shapes must follow
// from the arguments alone for torch.compile's fake tensors. The backward finishes in tensor operations
// (mamba2_bwd_aten.cpp); the scan's autograd formula and the step's autograd kernel are in autograd.cpp.
//
// The step: mamba_ssm's selective_state_update for heads: state (b, h, p, n) float32; x, z (b, h, p); dt (b, h);
// A (h,); B, C (b, g, n) with g dividing h; D (h,) or (h, p); dt_bias (h,). Returns y (b, h, p) in x's dtype.
//
// Each op's rules are one function below, shared by its kernels: the CUDA kernel checks them before anything reaches a
// kernel, the Meta kernel (torch.compile's fake tensors) checks them and shapes the outputs the same way, and the CPU
// kernel (common/cpu_refusal.h) runs the Meta kernel and then asks for CUDA tensors. The Python wrappers
// (python/tk_ops/mamba2.py) only call these ops.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "common/checks.h"
#include "common/cpu_refusal.h"
#include "mamba2.h"
#include "mamba2_bwd_aten.h"
#include "mamba2_operands.h"

namespace {

using namespace tk_kernels;
using tk_mamba2::scan_args;

constexpr const char *SCAN = "tk_ops.mamba2_chunk_scan";
constexpr const char *STEP = "tk_ops.mamba2_step";

using opt_tensor = std::optional<at::Tensor>;

// ---------------------------------------------------------------- the rules

void float32_rule(const char *op, const char *name, const at::Tensor &t) {
    if (!t.defined()) return;
    check_dtype(t.scalar_type() == at::kFloat, op, ": ", name, " must be float32, got ", t.scalar_type());
}

void shape_rule(const char *op, const char *name, const at::Tensor &t, c10::SymIntArrayRef shape, const char *what) {
    if (!t.defined()) return;
    check_input(t.sym_sizes() == shape, op, ": ", name, " must be ", what, " = ", shape, ", got ", t.sym_sizes());
}

// x, B, C, z 16-bit and alike: the dtype checks both ops share.
void same_16bit_rule(const char *op, const at::Tensor &x, const at::Tensor &B, const at::Tensor &C,
                     const at::Tensor &z) {
    const at::ScalarType type = x.scalar_type();
    check_dtype(type == at::kBFloat16 || type == at::kHalf, op, ": x must be bfloat16 or float16, got ", type);
    for (const named_tensor &t : {named_tensor{"B", B}, named_tensor{"C", C}, named_tensor{"z", z}}) {
        if (!t.tensor.defined()) continue;
        check_dtype(t.tensor.scalar_type() == type, op, ": ", t.name, " must have x's dtype ", type, ", got ",
                    t.tensor.scalar_type());
    }
}

// D: (heads,) or (heads, head_dim).
void D_rule(const char *op, const at::Tensor &D, const c10::SymInt &h, const c10::SymInt &p) {
    if (!D.defined()) return;
    const std::vector<c10::SymInt> hs = {h}, hp = {h, p};
    check_input(D.sym_sizes() == c10::SymIntArrayRef(hs) || D.sym_sizes() == c10::SymIntArrayRef(hp), op,
                ": D must be (heads,) = ", c10::SymIntArrayRef(hs), " or (heads, head_dim) = ", c10::SymIntArrayRef(hp),
                ", got ", D.sym_sizes());
}

// The scan's tensors, as both of its ops take them.
void scan_tensor_rules(const scan_args &a) {
    const at::Tensor &x = a.x, &B = a.B, &C = a.C;
    // dtypes: x, B, C, z 16-bit and alike; the rest float32, seq_idx int32.
    same_16bit_rule(SCAN, x, B, C, a.z);
    float32_rule(SCAN, "dt", a.dt);
    float32_rule(SCAN, "A", a.A);
    float32_rule(SCAN, "D", a.D);
    float32_rule(SCAN, "dt_bias", a.dt_bias);
    float32_rule(SCAN, "initial_states", a.initial_states);
    if (a.seq_idx.defined())
        check_dtype(a.seq_idx.scalar_type() == at::kInt, SCAN, ": seq_idx must be int32, got ",
                    a.seq_idx.scalar_type(), "; pass seq_idx.int()");

    // Shapes.
    check_input(x.dim() == 4, SCAN, ": x must be 4-D (batch, seq_len, heads, head_dim), got shape ", x.sym_sizes());
    check_input(B.dim() == 4, SCAN, ": B must be 4-D (batch, seq_len, groups, state_dim), got shape ", B.sym_sizes());
    const c10::SymInt &b = x.sym_size(0), &l = x.sym_size(1), &h = x.sym_size(2), &p = x.sym_size(3);
    check_input(B.sym_size(0) == b && B.sym_size(1) == l, SCAN, ": B must be (batch, seq_len, groups, state_dim) with ",
                "x's (batch, seq_len) = ", x.sym_sizes().slice(0, 2), ", got ", B.sym_sizes());
    const c10::SymInt &g = B.sym_size(2), &n = B.sym_size(3);
    check_input(g > 0 && h % g == 0, SCAN, ": the number of groups (B's dim 2) must divide the heads (x's dim 2) = ", h,
                ", got ", g);
    check_input(C.sym_sizes() == B.sym_sizes(), SCAN, ": C must have B's shape ", B.sym_sizes(), ", got ",
                C.sym_sizes());
    check_input(l >= 1, SCAN, ": the sequence length (x's dim 1) must be at least 1, got ", l);
    const int64_t pv = p.guard_int(__FILE__, __LINE__), nv = n.guard_int(__FILE__, __LINE__);
    check_input(tk_mamba2::supported_dim(int(pv)), SCAN, ": the head dimension (x's last) must be 64 or 128, got ", pv);
    check_input(tk_mamba2::supported_dim(int(nv)), SCAN, ": the state dimension (B's and C's last) must be 64 or 128, got ",
                nv);
    const std::vector<c10::SymInt> blh = {b, l, h}, hs = {h}, bhpn = {b, h, p, n}, bl = {b, l};
    shape_rule(SCAN, "dt", a.dt, blh, "(batch, seq_len, heads)");
    shape_rule(SCAN, "A", a.A, hs, "(heads,)");
    D_rule(SCAN, a.D, h, p);
    shape_rule(SCAN, "z", a.z, x.sym_sizes(), "x's shape (batch, seq_len, heads, head_dim)");
    shape_rule(SCAN, "dt_bias", a.dt_bias, hs, "(heads,)");
    shape_rule(SCAN, "initial_states", a.initial_states, bhpn, "(batch, heads, head_dim, state_dim)");
    shape_rule(SCAN, "seq_idx", a.seq_idx, bl, "(batch, seq_len)");
}

// The scan's scalars, as both of its ops take them, and the size the kernels can index.
void scan_scalar_rules(const scan_args &a, double dt_min, double dt_max) {
    check_input(!std::isnan(dt_min) && !std::isnan(dt_max) && dt_min <= dt_max, SCAN,
                ": dt_limit must be (low, high) with low <= high, got (", dt_min, ", ", dt_max, ")");
    // The kernels index tasks and tokens with 32-bit integers.
    const c10::SymInt &b = a.x.sym_size(0), &l = a.x.sym_size(1), &h = a.x.sym_size(2);
    check_input(b * h < (int64_t(1) << 31) && l < (int64_t(1) << 30), SCAN, ": problem too large");
}

// Every rule of mamba2_chunk_scan_fwd. chunk_size is mamba_ssm's argument: the op takes the values its users pass, and
// the result does not depend on it, so the kernels walk chunks of their own (tk_mamba2::KERNEL_CHUNK) and it goes no
// further than this check.
void fwd_rules(const scan_args &a, int64_t chunk_size, double dt_min, double dt_max) {
    scan_tensor_rules(a);
    check_input(chunk_size == 64 || chunk_size == 128 || chunk_size == 256, SCAN,
                ": chunk_size must be 64, 128 or 256, got ", chunk_size);
    scan_scalar_rules(a, dt_min, dt_max);
}

// Every rule of mamba2_chunk_scan_bwd: the scan's, then the output's gradient like x, the final states' like the
// states.
void bwd_rules(const scan_args &a, double dt_min, double dt_max, const at::Tensor &d_out, const at::Tensor &d_final) {
    scan_tensor_rules(a);
    scan_scalar_rules(a, dt_min, dt_max);
    const at::Tensor &x = a.x;
    check_input(d_out.sym_sizes() == x.sym_sizes() && d_out.scalar_type() == x.scalar_type(), SCAN,
                ": the output's gradient must have x's shape and dtype, got ", d_out.sym_sizes(), " ",
                d_out.scalar_type());
    float32_rule(SCAN, "the final states' gradient", d_final);
    const std::vector<c10::SymInt> bhpn = {x.sym_size(0), x.sym_size(2), x.sym_size(3), a.B.sym_size(3)};
    shape_rule(SCAN, "the final states' gradient", d_final, bhpn, "(batch, heads, head_dim, state_dim)");
}

// Every rule of mamba2_step.
void step_rules(const at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                const at::Tensor &B, const at::Tensor &C, const at::Tensor &D, const at::Tensor &z,
                const at::Tensor &dt_bias) {
    // dtypes: x, B, C, z 16-bit and alike; dt float32 or x's dtype (a slice of the model's projection); the state and
    // the parameters float32.
    same_16bit_rule(STEP, x, B, C, z);
    const at::ScalarType type = x.scalar_type();
    check_dtype(dt.scalar_type() == at::kFloat || dt.scalar_type() == type, STEP, ": dt must be float32 or x's dtype ",
                type, ", got ", dt.scalar_type());
    check_dtype(state.scalar_type() == at::kFloat, STEP, ": state must be float32, got ", state.scalar_type(),
                " (the state is updated in place, so it cannot be converted)");
    float32_rule(STEP, "A", A);
    float32_rule(STEP, "D", D);
    float32_rule(STEP, "dt_bias", dt_bias);

    // Shapes.
    check_input(state.dim() == 4, STEP, ": state must be 4-D (batch, heads, head_dim, state_dim), got shape ",
                state.sym_sizes());
    const c10::SymInt &b = state.sym_size(0), &h = state.sym_size(1), &p = state.sym_size(2), &n = state.sym_size(3);
    const std::vector<c10::SymInt> bhp = {b, h, p}, bh = {b, h}, hs = {h};
    check_input(x.sym_sizes() == c10::SymIntArrayRef(bhp), STEP,
                ": x must be (batch, heads, head_dim) = ", c10::SymIntArrayRef(bhp), " as the state (batch, heads, "
                "head_dim, state_dim) = ", state.sym_sizes(), " says, one token per sequence; got ", x.sym_sizes());
    shape_rule(STEP, "dt", dt, bh, "(batch, heads)");
    shape_rule(STEP, "A", A, hs, "(heads,)");
    check_input(B.dim() == 3, STEP, ": B must be 3-D (batch, groups, state_dim), got shape ", B.sym_sizes());
    const c10::SymInt &g = B.sym_size(1);
    check_input(B.sym_size(0) == b && B.sym_size(2) == n, STEP, ": B must be (batch, groups, state_dim) with the ",
                "state's batch = ", b, " and state_dim = ", n, ", got ", B.sym_sizes());
    check_input(g > 0 && h % g == 0, STEP, ": the number of groups (B's dim 1) must divide the heads (the state's dim 1) = ",
                h, ", got ", g);
    check_input(C.sym_sizes() == B.sym_sizes(), STEP, ": C must have B's shape ", B.sym_sizes(), ", got ",
                C.sym_sizes());
    D_rule(STEP, D, h, p);
    shape_rule(STEP, "z", z, x.sym_sizes(), "x's shape (batch, heads, head_dim)");
    shape_rule(STEP, "dt_bias", dt_bias, hs, "(heads,)");
    // The state dimension picks the kernel, so a symbolic one is specialised here.
    const int64_t nv = n.guard_int(__FILE__, __LINE__);
    check_input(tk_mamba2::step_supported_state_dim(nv), STEP,
                ": the state dimension (the state's last, B's and C's last) must be 16, 32, 64, 128 or 256, got ", nv);
    // The kernel indexes (batch, head) pairs and rows with 32-bit integers.
    check_input(b * h < (int64_t(1) << 31) && p < (int64_t(1) << 30), STEP, ": problem too large");
}

// ---------------------------------------------------------------- outputs

// x's shape and dtype, contiguous: the scan's output and the step's.
at::Tensor empty_output(const at::Tensor &x) {
    if (x.is_cuda()) return at::detail::empty_cuda(x.sizes(), x.scalar_type(), x.device(), std::nullopt);
    return at::empty_symint(x.sym_sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
}

// (batch, heads, head_dim, state_dim) float32 when wanted, else (0,).
at::Tensor empty_states(const at::Tensor &x, const at::Tensor &B, bool wanted) {
    std::vector<c10::SymInt> shape = {c10::SymInt(0)};
    if (wanted) shape = {x.sym_size(0), x.sym_size(2), x.sym_size(3), B.sym_size(3)};
    if (x.is_cuda())
        return at::detail::empty_cuda(C10_AS_INTARRAYREF_SLOW(c10::SymIntArrayRef(shape)), at::kFloat, x.device(),
                                      std::nullopt);
    return at::empty_symint(shape, x.options().dtype(at::kFloat));
}

// The backward's results, each like its input or absent (tk_mamba2::absent_gradient).
tk_mamba2::gradients empty_gradients(const scan_args &a) {
    auto like = [&](const at::Tensor &t) {
        return t.defined() ? at::empty_symint(t.sym_sizes(), t.options()) : tk_mamba2::absent_gradient(a.x);
    };
    return {like(a.x), like(a.dt), like(a.A), like(a.B), like(a.B), like(a.D), like(a.z), like(a.dt_bias),
            like(a.initial_states)};
}

// ---------------------------------------------------------------- CUDA

std::tuple<at::Tensor, at::Tensor> scan_fwd_cuda(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                                                 const at::Tensor &B, const at::Tensor &C, int64_t chunk_size,
                                                 const opt_tensor &D, const opt_tensor &z, const opt_tensor &dt_bias,
                                                 const opt_tensor &initial_states, const opt_tensor &seq_idx,
                                                 bool dt_softplus, double dt_min, double dt_max,
                                                 bool return_final_states) {
    const scan_args a(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx);
    fwd_rules(a, chunk_size, dt_min, dt_max);
    check_devices(SCAN, {{"x", a.x}, {"dt", a.dt}, {"A", a.A}, {"B", a.B}, {"C", a.C}, {"D", a.D}, {"z", a.z},
                         {"dt_bias", a.dt_bias}, {"initial_states", a.initial_states}, {"seq_idx", a.seq_idx}});

    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor out = empty_output(x);
    at::Tensor final_states = empty_states(x, B, return_final_states);
    if (x.size(0) == 0 || x.size(2) == 0) return {out, final_states};
    check_launch(tk_mamba2::run_forward(tk_mamba2::scan_operands(a, true), out,
                                        return_final_states ? final_states : at::Tensor(), dt_softplus, dt_min, dt_max),
                 "tk_ops.mamba2_chunk_scan kernel");
    return {out, final_states};
}

tk_mamba2::gradients scan_bwd_cuda(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                                   const at::Tensor &C, const opt_tensor &D, const opt_tensor &z,
                                   const opt_tensor &dt_bias, const opt_tensor &initial_states,
                                   const opt_tensor &seq_idx, bool dt_softplus, double dt_min, double dt_max,
                                   const at::Tensor &d_out, const opt_tensor &d_final_states) {
    const scan_args a(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx);
    const at::Tensor d_final = d_final_states.value_or(at::Tensor());
    bwd_rules(a, dt_min, dt_max, d_out, d_final);
    check_devices(SCAN, {{"x", a.x}, {"dt", a.dt}, {"A", a.A}, {"B", a.B}, {"C", a.C}, {"D", a.D}, {"z", a.z},
                         {"dt_bias", a.dt_bias}, {"initial_states", a.initial_states}, {"seq_idx", a.seq_idx},
                         {"the output's gradient", d_out}, {"the final states' gradient", d_final}});
    const c10::cuda::CUDAGuard guard(x.device());
    if (x.size(0) == 0 || x.size(2) == 0) {
        tk_mamba2::gradients out = empty_gradients(a);
        std::apply([](auto &...t) { (t.zero_(), ...); }, out);
        return out;
    }
    return tk_mamba2::backward_aten(a, dt_softplus, dt_min, dt_max, d_out, d_final);
}

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
    // The per-head parameters as the kernel reads them: contiguous, else copied (they are a few hundred floats).
    auto contiguous = [](const at::Tensor &t) { return t.defined() ? t.contiguous() : t; };
    auto token = [](const at::Tensor &t) -> tk_mamba2::step_token {
        if (!t.defined()) return {nullptr, 0, 0, 0};
        return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
    };
    const at::Tensor A = contiguous(A_in), D = contiguous(D_in), bias = contiguous(bias_in);

    tk_mamba2::step_problem p{};
    p.state = state.data_ptr<float>();
    for (int d = 0; d < 4; d++) p.state_stride[d] = state.stride(d);
    p.x = token(x);
    p.z = token(z);
    p.B = token(B);
    p.C = token(C);
    p.dt = dt.data_ptr();
    p.dt_stride_b = dt.stride(0);
    p.dt_stride_h = dt.stride(1);
    p.dt_is_float = dt.scalar_type() == at::kFloat;
    p.A = A.data_ptr<float>();
    p.D = D.defined() ? D.data_ptr<float>() : nullptr;
    p.D_per_channel = D.defined() && D.dim() == 2;
    p.dt_bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
    p.dt_softplus = dt_softplus;
    p.y = y.data_ptr();
    p.batch = int(state.size(0));
    p.heads = int(state.size(1));
    p.groups = int(B.size(1));
    p.head_dim = int(state.size(2));
    p.state_dim = int(state.size(3));
    p.type = dtype_of(x.scalar_type());
    check_launch(tk_mamba2::step(p, at::cuda::getCurrentCUDAStream()), "tk_ops.mamba2_step kernel");
    return y;
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

std::tuple<at::Tensor, at::Tensor> scan_fwd_meta(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                                                 const at::Tensor &B, const at::Tensor &C, int64_t chunk_size,
                                                 const opt_tensor &D, const opt_tensor &z, const opt_tensor &dt_bias,
                                                 const opt_tensor &initial_states, const opt_tensor &seq_idx,
                                                 bool, double dt_min, double dt_max, bool return_final_states) {
    fwd_rules(scan_args(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx), chunk_size, dt_min, dt_max);
    return {empty_output(x), empty_states(x, B, return_final_states)};
}

tk_mamba2::gradients scan_bwd_meta(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                                   const at::Tensor &C, const opt_tensor &D, const opt_tensor &z,
                                   const opt_tensor &dt_bias, const opt_tensor &initial_states,
                                   const opt_tensor &seq_idx, bool, double dt_min, double dt_max,
                                   const at::Tensor &d_out, const opt_tensor &d_final_states) {
    const scan_args a(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx);
    bwd_rules(a, dt_min, dt_max, d_out, d_final_states.value_or(at::Tensor()));
    return empty_gradients(a);
}

at::Tensor step_meta(at::Tensor &state, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                     const at::Tensor &B, const at::Tensor &C, const opt_tensor &D, const opt_tensor &z,
                     const opt_tensor &dt_bias, bool) {
    step_rules(state, x, dt, A, B, C, D.value_or(at::Tensor()), z.value_or(at::Tensor()),
               dt_bias.value_or(at::Tensor()));
    return empty_output(x);
}

} // namespace

TORCH_LIBRARY_FRAGMENT(tk_ops, m) {
    m.def("mamba2_chunk_scan_fwd(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, int chunk_size, Tensor? D, "
          "Tensor? z, Tensor? dt_bias, Tensor? initial_states, Tensor? seq_idx, bool dt_softplus, float dt_min, "
          "float dt_max, bool return_final_states) -> (Tensor out, Tensor final_states)");
    m.def("mamba2_chunk_scan_bwd(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
          "Tensor? dt_bias, Tensor? initial_states, Tensor? seq_idx, bool dt_softplus, float dt_min, float dt_max, "
          "Tensor d_out, Tensor? d_final_states) -> (Tensor dx, Tensor ddt, Tensor dA, Tensor dB, Tensor dC, "
          "Tensor dD, Tensor dz, Tensor ddt_bias, Tensor d_initial_states)");
    m.def("mamba2_step(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D=None, "
          "Tensor? z=None, Tensor? dt_bias=None, bool dt_softplus=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("mamba2_chunk_scan_fwd", &scan_fwd_cuda);
    m.impl("mamba2_chunk_scan_bwd", &scan_bwd_cuda);
    m.impl("mamba2_step", &step_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("mamba2_chunk_scan_fwd", &scan_fwd_meta);
    m.impl("mamba2_chunk_scan_bwd", &scan_bwd_meta);
    m.impl("mamba2_step", &step_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    m.impl("mamba2_chunk_scan_fwd", tk_kernels::cpu_refusal());
    m.impl("mamba2_chunk_scan_bwd", tk_kernels::cpu_refusal());
    m.impl("mamba2_step", tk_kernels::cpu_refusal());
}
