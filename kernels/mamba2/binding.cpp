// The Mamba-2 ops as torch sees them (schema, and its CUDA, Meta and CPU kernels):
//
//   mamba2_chunk_scan_fwd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min,
//                         dt_max, return_final_states) -> (out, final_states)
//   mamba2_chunk_scan_bwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max,
//                         d_out, d_final_states) -> (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, d_initial_states)
//
// The arguments of mamba_ssm's mamba_chunk_scan_combined, dt_limit as its two ends. final_states is an empty (0,)
// float32 tensor unless return_final_states: a schema's outputs are always tensors, and their shapes must follow from
// the arguments alone for torch.compile's fake tensors.
//
// The rules are one function below, shared by the op's three kernels: the CUDA kernel checks them before anything
// reaches a kernel, the Meta kernel (torch.compile's fake tensors) checks them and shapes the outputs the same way,
// and the CPU kernel checks them and then asks for CUDA tensors (see common/checks.h). The Python wrapper
// (python/tk_ops/mamba2.py) only calls this op.
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

#include "common/bhnd_tensors.h"
#include "common/checks.h"
#include "mamba2.h"

namespace {

using namespace tk_kernels;

constexpr const char *SCAN = "tk_ops.mamba2_chunk_scan";

using opt_tensor = std::optional<at::Tensor>;

// ---------------------------------------------------------------- the rules

void float32_rule(const char *name, const at::Tensor &t) {
    if (!t.defined()) return;
    check_dtype(t.scalar_type() == at::kFloat, SCAN, ": ", name, " must be float32, got ", t.scalar_type());
}

void shape_rule(const char *name, const at::Tensor &t, c10::SymIntArrayRef shape, const char *what) {
    if (!t.defined()) return;
    check_input(t.sym_sizes() == shape, SCAN, ": ", name, " must be ", what, " = ", shape, ", got ", t.sym_sizes());
}

// Every rule of mamba2_chunk_scan_fwd.
void fwd_rules(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
               const at::Tensor &C, int64_t chunk_size, const at::Tensor &D, const at::Tensor &z,
               const at::Tensor &dt_bias, const at::Tensor &initial_states, const at::Tensor &seq_idx, double dt_min,
               double dt_max) {
    // dtypes: x, B, C, z 16-bit and alike; the rest float32, seq_idx int32.
    const at::ScalarType type = x.scalar_type();
    check_dtype(type == at::kBFloat16 || type == at::kHalf, SCAN, ": x must be bfloat16 or float16, got ", type);
    for (const named_tensor &t : {named_tensor{"B", B}, named_tensor{"C", C}, named_tensor{"z", z}}) {
        if (!t.tensor.defined()) continue;
        check_dtype(t.tensor.scalar_type() == type, SCAN, ": ", t.name, " must have x's dtype ", type, ", got ",
                    t.tensor.scalar_type());
    }
    float32_rule("dt", dt);
    float32_rule("A", A);
    float32_rule("D", D);
    float32_rule("dt_bias", dt_bias);
    float32_rule("initial_states", initial_states);
    if (seq_idx.defined())
        check_dtype(seq_idx.scalar_type() == at::kInt, SCAN, ": seq_idx must be int32, got ", seq_idx.scalar_type(),
                    "; pass seq_idx.int()");

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
    const std::vector<c10::SymInt> blh = {b, l, h}, hs = {h}, hp = {h, p}, bhpn = {b, h, p, n}, bl = {b, l};
    shape_rule("dt", dt, blh, "(batch, seq_len, heads)");
    shape_rule("A", A, hs, "(heads,)");
    if (D.defined())
        check_input(D.sym_sizes() == c10::SymIntArrayRef(hs) || D.sym_sizes() == c10::SymIntArrayRef(hp), SCAN,
                    ": D must be (heads,) = ", c10::SymIntArrayRef(hs), " or (heads, head_dim) = ",
                    c10::SymIntArrayRef(hp), ", got ", D.sym_sizes());
    shape_rule("z", z, x.sym_sizes(), "x's shape (batch, seq_len, heads, head_dim)");
    shape_rule("dt_bias", dt_bias, hs, "(heads,)");
    shape_rule("initial_states", initial_states, bhpn, "(batch, heads, head_dim, state_dim)");
    shape_rule("seq_idx", seq_idx, bl, "(batch, seq_len)");

    // Scalars.
    check_input(tk_mamba2::supported_chunk_size(chunk_size), SCAN, ": chunk_size must be 64, 128 or 256, got ",
                chunk_size);
    check_input(!std::isnan(dt_min) && !std::isnan(dt_max) && dt_min <= dt_max, SCAN,
                ": dt_limit must be (low, high) with low <= high, got (", dt_min, ", ", dt_max, ")");
    // The kernels index tasks and tokens with 32-bit integers.
    check_input(b * h < (int64_t(1) << 31) && l < (int64_t(1) << 30), SCAN, ": problem too large");
}

// ---------------------------------------------------------------- outputs

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

// ---------------------------------------------------------------- CUDA

void check_launch(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw c10::Error(message(what, " failed: ", cudaGetErrorString(e)));
}

// A small operand as the kernels read it: contiguous and 16-byte aligned, else copied.
at::Tensor dense(const at::Tensor &t) {
    if (!t.defined() || (t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0)) return t;
    return t.clone(at::MemoryFormat::Contiguous);
}

// A (batch, seq, heads, dim) tensor as the (batch, heads, seq, dim) view TMA reads (copied first when its strides do
// not allow it in place).
at::Tensor heads_view(const at::Tensor &t) {
    if (!t.defined()) return t;
    return tma_readable_copy(t.transpose(1, 2));
}

template <typename P> const P *ptr_or_null(const at::Tensor &t) { return t.defined() ? t.data_ptr<P>() : nullptr; }

// The scan's inputs as the kernels take them: x, B, C (and z) as (b, h, l, d) views, the small operands dense. Both
// the forward and the backward fill their problems from it.
struct scan_inputs {
    at::Tensor x, z, B, C, dt, A, D, bias, init, seq;
    scan_inputs(const at::Tensor &x_in, const at::Tensor &z_in, const at::Tensor &B_in, const at::Tensor &C_in,
                const at::Tensor &dt_in, const at::Tensor &A_in, const at::Tensor &D_in, const at::Tensor &bias_in,
                const at::Tensor &init_in, const at::Tensor &seq_in)
        : x(heads_view(x_in)), z(heads_view(z_in)), B(heads_view(B_in)), C(heads_view(C_in)), dt(dense(dt_in)),
          A(dense(A_in)), D(dense(D_in)), bias(dense(bias_in)), init(dense(init_in)), seq(dense(seq_in)) {}

    // Everything of a fwd_problem but the outputs and the workspace.
    tk_mamba2::fwd_problem problem(bool dt_softplus, double dt_min, double dt_max) const {
        tk_mamba2::fwd_problem p{};
        p.x = view_of(x);
        p.B = view_of(B);
        p.C = view_of(C);
        if (z.defined()) p.z = view_of(z);
        p.dt = dt.data_ptr<float>();
        p.A = A.data_ptr<float>();
        p.D = ptr_or_null<float>(D);
        p.D_per_channel = D.defined() && D.dim() == 2;
        p.dt_bias = ptr_or_null<float>(bias);
        p.dt_softplus = dt_softplus;
        p.dt_min = float(dt_min);
        p.dt_max = float(dt_max);
        p.initial_states = ptr_or_null<float>(init);
        p.seq_idx = ptr_or_null<int>(seq);
        p.batch = int(x.size(0));
        p.heads = int(x.size(1));
        p.len = int(x.size(2));
        p.head_dim = int(x.size(3));
        p.groups = int(B.size(1));
        p.state_dim = int(B.size(3));
        p.type = x.scalar_type() == at::kBFloat16 ? tk_mamba2::dtype::bf16 : tk_mamba2::dtype::fp16;
        return p;
    }
};

std::tuple<at::Tensor, at::Tensor> scan_fwd_cuda(const at::Tensor &x_in, const at::Tensor &dt_in,
                                                 const at::Tensor &A_in, const at::Tensor &B_in, const at::Tensor &C_in,
                                                 int64_t chunk_size, const opt_tensor &D_opt, const opt_tensor &z_opt,
                                                 const opt_tensor &dt_bias_opt, const opt_tensor &init_opt,
                                                 const opt_tensor &seq_opt, bool dt_softplus, double dt_min,
                                                 double dt_max, bool return_final_states) {
    const at::Tensor D_in = D_opt.value_or(at::Tensor()), z_in = z_opt.value_or(at::Tensor());
    const at::Tensor bias_in = dt_bias_opt.value_or(at::Tensor()), init_in = init_opt.value_or(at::Tensor());
    const at::Tensor seq_in = seq_opt.value_or(at::Tensor());
    fwd_rules(x_in, dt_in, A_in, B_in, C_in, chunk_size, D_in, z_in, bias_in, init_in, seq_in, dt_min, dt_max);
    check_devices(SCAN, {{"x", x_in}, {"dt", dt_in}, {"A", A_in}, {"B", B_in}, {"C", C_in}, {"D", D_in}, {"z", z_in},
                         {"dt_bias", bias_in}, {"initial_states", init_in}, {"seq_idx", seq_in}});

    const c10::cuda::CUDAGuard guard(x_in.device());
    at::Tensor out = empty_output(x_in);
    at::Tensor final_states = empty_states(x_in, B_in, return_final_states);
    if (x_in.size(0) == 0 || x_in.size(2) == 0) return {out, final_states};

    const scan_inputs in(x_in, z_in, B_in, C_in, dt_in, A_in, D_in, bias_in, init_in, seq_in);
    at::Tensor out_view = out.transpose(1, 2);
    tk_mamba2::fwd_problem p = in.problem(dt_softplus, dt_min, dt_max);
    p.out = out_of(out_view);
    p.final_states = return_final_states ? final_states.data_ptr<float>() : nullptr;
    // The kernels' scratch from torch's caching allocator: reused across calls and owned by a captured CUDA graph's
    // pool like every other tensor.
    at::Tensor workspace = at::detail::empty_cuda({int64_t(tk_mamba2::workspace_bytes(p))}, at::kByte, x_in.device(),
                                                  std::nullopt);
    p.workspace = workspace.data_ptr();
    check_launch(tk_mamba2::forward(p, at::cuda::getCurrentCUDAStream()), "tk_ops.mamba2_chunk_scan kernel");
    return {out, final_states};
}

// ---------------------------------------------------------------- Meta (torch.compile's fake tensors)

std::tuple<at::Tensor, at::Tensor> scan_fwd_meta(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                                                 const at::Tensor &B, const at::Tensor &C, int64_t chunk_size,
                                                 const opt_tensor &D, const opt_tensor &z, const opt_tensor &dt_bias,
                                                 const opt_tensor &initial_states, const opt_tensor &seq_idx,
                                                 bool dt_softplus, double dt_min, double dt_max,
                                                 bool return_final_states) {
    fwd_rules(x, dt, A, B, C, chunk_size, D.value_or(at::Tensor()), z.value_or(at::Tensor()),
              dt_bias.value_or(at::Tensor()), initial_states.value_or(at::Tensor()), seq_idx.value_or(at::Tensor()),
              dt_min, dt_max);
    return {empty_output(x), empty_states(x, B, return_final_states)};
}

// ---------------------------------------------------------------- CPU: the op's rules, then the device rule

std::tuple<at::Tensor, at::Tensor> scan_fwd_cpu(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                                                const at::Tensor &B, const at::Tensor &C, int64_t chunk_size,
                                                const opt_tensor &D_opt, const opt_tensor &z_opt,
                                                const opt_tensor &dt_bias_opt, const opt_tensor &init_opt,
                                                const opt_tensor &seq_opt, bool dt_softplus, double dt_min,
                                                double dt_max, bool return_final_states) {
    const at::Tensor D = D_opt.value_or(at::Tensor()), z = z_opt.value_or(at::Tensor());
    const at::Tensor bias = dt_bias_opt.value_or(at::Tensor()), init = init_opt.value_or(at::Tensor());
    const at::Tensor seq = seq_opt.value_or(at::Tensor());
    fwd_rules(x, dt, A, B, C, chunk_size, D, z, bias, init, seq, dt_min, dt_max);
    reject_cpu(SCAN, {{"x", x}, {"dt", dt}, {"A", A}, {"B", B}, {"C", C}, {"D", D}, {"z", z}, {"dt_bias", bias},
                      {"initial_states", init}, {"seq_idx", seq}});
}

// ---------------------------------------------------------------- the backward

// The backward's own rules, after the forward's: the output's gradient like x, the final states' like the states.
void bwd_rules(const at::Tensor &x, const at::Tensor &B, const at::Tensor &d_out, const at::Tensor &d_final) {
    check_input(d_out.sym_sizes() == x.sym_sizes() && d_out.scalar_type() == x.scalar_type(), SCAN,
                ": the output's gradient must have x's shape and dtype, got ", d_out.sym_sizes(), " ",
                d_out.scalar_type());
    float32_rule("the final states' gradient", d_final);
    const std::vector<c10::SymInt> bhpn = {x.sym_size(0), x.sym_size(2), x.sym_size(3), B.sym_size(3)};
    shape_rule("the final states' gradient", d_final, bhpn, "(batch, heads, head_dim, state_dim)");
}

// The gradients' tensors, each empty (0,) where its input is absent (a schema's outputs are tensors).
struct bwd_outputs {
    at::Tensor dx, ddt, dA, dB, dC, dD, dz, ddt_bias, d_initial_states;
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
    tuple() const {
        return {dx, ddt, dA, dB, dC, dD, dz, ddt_bias, d_initial_states};
    }
};

at::Tensor none_like(const at::Tensor &t) { return at::empty_symint({c10::SymInt(0)}, t.options().dtype(at::kFloat)); }

bwd_outputs empty_gradients(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                            const at::Tensor &D, const at::Tensor &z, const at::Tensor &dt_bias,
                            const at::Tensor &init) {
    auto like = [&](const at::Tensor &t) { return t.defined() ? at::empty_symint(t.sym_sizes(), t.options()) : none_like(x); };
    return {like(x), like(dt), like(A), like(B), like(B), like(D), like(z), like(dt_bias), like(init)};
}

using bwd_tuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor>;

// The dt chain on the prepared dt's gradient g (b, h, l): through the clamp (zero strictly outside the limits), the
// softplus (the identity above its threshold) and the bias; returns the raw dt's gradient (b, l, h).
at::Tensor raw_dt_gradient(const at::Tensor &g, const at::Tensor &dt, const at::Tensor &bias, bool softplus,
                           double dt_min, double dt_max) {
    at::Tensor v = bias.defined() ? dt + bias : dt;
    at::Tensor grad = g.transpose(1, 2);
    at::Tensor value = v;
    if (softplus) {
        const at::Tensor above = v > tk_mamba2::SOFTPLUS_THRESHOLD;
        value = at::where(above, v, at::log1p(at::exp(v)));
        grad = grad * at::where(above, at::ones_like(v), at::sigmoid(v));
    }
    return (grad * ((value >= dt_min) & (value <= dt_max))).contiguous();
}

bwd_tuple scan_bwd_cuda(const at::Tensor &x_in, const at::Tensor &dt_in, const at::Tensor &A_in, const at::Tensor &B_in,
                        const at::Tensor &C_in, const opt_tensor &D_opt, const opt_tensor &z_opt,
                        const opt_tensor &dt_bias_opt, const opt_tensor &init_opt, const opt_tensor &seq_opt,
                        bool dt_softplus, double dt_min, double dt_max, const at::Tensor &d_out_in,
                        const opt_tensor &d_final_opt) {
    const at::Tensor D_in = D_opt.value_or(at::Tensor()), z_in = z_opt.value_or(at::Tensor());
    const at::Tensor bias_in = dt_bias_opt.value_or(at::Tensor()), init_in = init_opt.value_or(at::Tensor());
    const at::Tensor seq_in = seq_opt.value_or(at::Tensor()), d_final_in = d_final_opt.value_or(at::Tensor());
    fwd_rules(x_in, dt_in, A_in, B_in, C_in, 64, D_in, z_in, bias_in, init_in, seq_in, dt_min, dt_max);
    bwd_rules(x_in, B_in, d_out_in, d_final_in);
    check_devices(SCAN, {{"x", x_in}, {"dt", dt_in}, {"A", A_in}, {"B", B_in}, {"C", C_in}, {"D", D_in}, {"z", z_in},
                         {"dt_bias", bias_in}, {"initial_states", init_in}, {"seq_idx", seq_in},
                         {"the output's gradient", d_out_in}, {"the final states' gradient", d_final_in}});
    const c10::cuda::CUDAGuard guard(x_in.device());
    const int64_t b = x_in.size(0), l = x_in.size(1), h = x_in.size(2), p = x_in.size(3);
    const int64_t g = B_in.size(2), n = B_in.size(3);
    if (b == 0 || h == 0) {
        bwd_outputs out = empty_gradients(x_in, dt_in, A_in, B_in, D_in, z_in, bias_in, init_in);
        for (at::Tensor *t : {&out.dx, &out.ddt, &out.dA, &out.dB, &out.dC, &out.dD, &out.dz, &out.ddt_bias,
                              &out.d_initial_states})
            t->zero_();
        return out.tuple();
    }

    // The gate: dy = d_out silu(z) and dz = d_out y silu'(z), with y (before the gate) computed again by the forward.
    at::Tensor dy = d_out_in, dz = none_like(x_in);
    if (z_in.defined()) {
        const at::Tensor y = std::get<0>(scan_fwd_cuda(x_in, dt_in, A_in, B_in, C_in, 64, D_opt, std::nullopt,
                                                       dt_bias_opt, init_opt, seq_opt, dt_softplus, dt_min, dt_max,
                                                       false));
        const at::Tensor zf = z_in.to(at::kFloat), sig = at::sigmoid(zf), d_out = d_out_in.to(at::kFloat);
        dy = (d_out * zf * sig).to(x_in.scalar_type());
        dz = (d_out * y.to(at::kFloat) * sig * (1 + zf * (1 - sig))).to(x_in.scalar_type());
    }

    const scan_inputs in(x_in, at::Tensor(), B_in, C_in, dt_in, A_in, D_in, bias_in, init_in, seq_in);
    const at::Tensor dy_v = heads_view(dy), d_final = dense(d_final_in);
    const int64_t padded = tk_mamba2::padded_len(int(l));
    const at::TensorOptions f32 = x_in.options().dtype(at::kFloat);
    at::Tensor dx = at::empty({b, l, h, p}, x_in.options());
    at::Tensor dB_sum = at::zeros({b, g, padded, n}, f32), dC_sum = at::zeros({b, g, padded, n}, f32);
    at::Tensor d_cum = at::zeros({b, h, padded}, f32), x_dot = at::zeros({b, h, padded}, f32);
    at::Tensor dD_sum = in.D.defined() ? at::zeros({h, p}, f32) : at::Tensor();
    at::Tensor d_init = in.init.defined() ? at::empty({b, h, p, n}, f32) : none_like(x_in);

    tk_mamba2::bwd_problem bp{};
    bp.f = in.problem(dt_softplus, dt_min, dt_max);
    const tk_mamba2::fwd_problem &f = bp.f;
    bp.dy = view_of(dy_v);
    bp.dx = dx.data_ptr();
    bp.d_final_states = ptr_or_null<float>(d_final);
    bp.d_initial_states = in.init.defined() ? d_init.data_ptr<float>() : nullptr;
    bp.dD = in.D.defined() ? dD_sum.data_ptr<float>() : nullptr;
    bp.dB = dB_sum.data_ptr<float>();
    bp.dC = dC_sum.data_ptr<float>();
    bp.d_cum = d_cum.data_ptr<float>();
    bp.x_dot = x_dot.data_ptr<float>();
    at::Tensor workspace = at::empty({int64_t(tk_mamba2::workspace_bytes(f))}, x_in.options().dtype(at::kByte));
    bp.workspace = workspace.data_ptr();
    check_launch(tk_mamba2::backward(bp, at::cuda::getCurrentCUDAStream()), "tk_ops.mamba2_chunk_scan backward kernel");

    // The reverse cumulative sum of dL/dcum is dL/d(dt A), and from it come the gradients of dt and A.
    const at::Tensor dt_used = workspace.view(at::kFloat).narrow(0, 0, b * h * padded).view({b, h, padded});
    const at::Tensor d_log_decay = d_cum.flip(-1).cumsum(-1).flip(-1);
    const at::Tensor d_dt_used = (x_dot + in.A.view({1, h, 1}) * d_log_decay).narrow(2, 0, l);
    const at::Tensor dA = (dt_used * d_log_decay).sum(at::IntArrayRef{0, 2});
    const at::Tensor ddt = raw_dt_gradient(d_dt_used, in.dt, in.bias, dt_softplus, dt_min, dt_max);
    const at::Tensor ddt_bias = in.bias.defined() ? ddt.sum(at::IntArrayRef{0, 1}) : none_like(x_in);
    auto by_token = [&](const at::Tensor &sum) {
        return sum.narrow(2, 0, l).transpose(1, 2).to(x_in.scalar_type()).contiguous();
    };
    at::Tensor dD = none_like(x_in);
    if (in.D.defined()) dD = in.D.dim() == 2 ? dD_sum : dD_sum.sum(1);
    return {dx, ddt, dA, by_token(dB_sum), by_token(dC_sum), dD, dz, ddt_bias, d_init};
}

bwd_tuple scan_bwd_meta(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                        const at::Tensor &C, const opt_tensor &D, const opt_tensor &z, const opt_tensor &dt_bias,
                        const opt_tensor &init, const opt_tensor &seq_idx, bool, double dt_min, double dt_max,
                        const at::Tensor &d_out, const opt_tensor &d_final) {
    const at::Tensor D_t = D.value_or(at::Tensor()), z_t = z.value_or(at::Tensor());
    const at::Tensor bias_t = dt_bias.value_or(at::Tensor()), init_t = init.value_or(at::Tensor());
    fwd_rules(x, dt, A, B, C, 64, D_t, z_t, bias_t, init_t, seq_idx.value_or(at::Tensor()), dt_min, dt_max);
    bwd_rules(x, B, d_out, d_final.value_or(at::Tensor()));
    return empty_gradients(x, dt, A, B, D_t, z_t, bias_t, init_t).tuple();
}

bwd_tuple scan_bwd_cpu(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                       const at::Tensor &C, const opt_tensor &D, const opt_tensor &z, const opt_tensor &dt_bias,
                       const opt_tensor &init, const opt_tensor &seq_idx, bool softplus, double dt_min, double dt_max,
                       const at::Tensor &d_out, const opt_tensor &d_final) {
    scan_bwd_meta(x, dt, A, B, C, D, z, dt_bias, init, seq_idx, softplus, dt_min, dt_max, d_out, d_final);
    reject_cpu(SCAN, {{"x", x}, {"dt", dt}, {"A", A}, {"B", B}, {"C", C}, {"the output's gradient", d_out}});
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
}

TORCH_LIBRARY_IMPL(tk_ops, CUDA, m) {
    m.impl("mamba2_chunk_scan_fwd", &scan_fwd_cuda);
    m.impl("mamba2_chunk_scan_bwd", &scan_bwd_cuda);
}

TORCH_LIBRARY_IMPL(tk_ops, Meta, m) {
    m.impl("mamba2_chunk_scan_fwd", &scan_fwd_meta);
    m.impl("mamba2_chunk_scan_bwd", &scan_bwd_meta);
}

TORCH_LIBRARY_IMPL(tk_ops, CPU, m) {
    m.impl("mamba2_chunk_scan_fwd", &scan_fwd_cpu);
    m.impl("mamba2_chunk_scan_bwd", &scan_bwd_cpu);
}
