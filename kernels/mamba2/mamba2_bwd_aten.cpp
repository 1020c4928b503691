// The Mamba-2 scan's backward around its kernels, in tensor operations (mamba2_bwd_aten.h).
#include "mamba2_bwd_aten.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>

#include "common/bhnd_tensors.h"
#include "common/checks.h"

namespace tk_mamba2 {
namespace {

// The dt chain on the prepared dt's gradient g (b, h, l): through the clamp (zero strictly outside the limits), the
// softplus (the identity above its threshold) and the bias; returns the raw dt's gradient (b, l, h).
at::Tensor raw_dt_gradient(const at::Tensor &g, const at::Tensor &dt, const at::Tensor &bias, bool softplus,
                           double dt_min, double dt_max) {
    at::Tensor v = bias.defined() ? dt + bias : dt;
    at::Tensor grad = g.transpose(1, 2);
    at::Tensor value = v;
    if (softplus) {
        const at::Tensor above = v > SOFTPLUS_THRESHOLD;
        value = at::where(above, v, at::log1p(at::exp(v)));
        grad = grad * at::where(above, at::ones_like(v), at::sigmoid(v));
    }
    return (grad * ((value >= dt_min) & (value <= dt_max))).contiguous();
}

} // namespace

at::Tensor absent_gradient(const at::Tensor &x) {
    return at::empty_symint({c10::SymInt(0)}, x.options().dtype(at::kFloat));
}

gradients backward_aten(const scan_args &a, bool dt_softplus, double dt_min, double dt_max, const at::Tensor &d_out,
                        const at::Tensor &d_final_in) {
    const at::Tensor &x_in = a.x;
    const int64_t b = x_in.size(0), l = x_in.size(1), h = x_in.size(2), p = x_in.size(3);
    const int64_t g = a.B.size(2), n = a.B.size(3);
    const scan_operands in(a, false);

    // The gate: dy = d_out silu(z) and dz = d_out y silu'(z), with y (before the gate) computed again by the forward.
    at::Tensor dy = d_out, dz = absent_gradient(x_in);
    if (a.z.defined()) {
        at::Tensor y = at::empty(x_in.sizes(), x_in.options());
        tk_kernels::check_launch(run_forward(in, y, at::Tensor(), dt_softplus, dt_min, dt_max),
                                 "tk_ops.mamba2_chunk_scan kernel");
        const at::Tensor zf = a.z.to(at::kFloat), sig = at::sigmoid(zf), d_out_f = d_out.to(at::kFloat);
        dy = (d_out_f * zf * sig).to(x_in.scalar_type());
        dz = (d_out_f * y.to(at::kFloat) * sig * (1 + zf * (1 - sig))).to(x_in.scalar_type());
    }

    const at::Tensor dy_v = heads_view(dy), d_final = dense(d_final_in);
    const int64_t padded = padded_len(int(l));
    const at::TensorOptions f32 = x_in.options().dtype(at::kFloat);
    at::Tensor dx = at::empty({b, l, h, p}, x_in.options());
    at::Tensor dB_sum = at::zeros({b, g, padded, n}, f32), dC_sum = at::zeros({b, g, padded, n}, f32);
    at::Tensor d_cum = at::zeros({b, h, padded}, f32), x_dot = at::zeros({b, h, padded}, f32);
    at::Tensor dD_sum = in.D.defined() ? at::zeros({h, p}, f32) : at::Tensor();
    at::Tensor d_init = in.init.defined() ? at::empty({b, h, p, n}, f32) : absent_gradient(x_in);

    bwd_problem bp{};
    bp.f = in.problem(dt_softplus, dt_min, dt_max);
    bp.dy = tk_kernels::view_of(dy_v);
    bp.dx = dx.data_ptr();
    bp.d_final_states = d_final.defined() ? d_final.data_ptr<float>() : nullptr;
    bp.d_initial_states = in.init.defined() ? d_init.data_ptr<float>() : nullptr;
    bp.dD = in.D.defined() ? dD_sum.data_ptr<float>() : nullptr;
    bp.dB = dB_sum.data_ptr<float>();
    bp.dC = dC_sum.data_ptr<float>();
    bp.d_cum = d_cum.data_ptr<float>();
    bp.x_dot = x_dot.data_ptr<float>();
    at::Tensor workspace = at::empty({int64_t(workspace_bytes(bp.f))}, x_in.options().dtype(at::kByte));
    bp.workspace = workspace.data_ptr();
    tk_kernels::check_launch(backward(bp, at::cuda::getCurrentCUDAStream()),
                             "tk_ops.mamba2_chunk_scan backward kernel");

    // The reverse cumulative sum of dL/dcum is dL/d(dt A), and from it come the gradients of dt and A.
    const at::Tensor dt_used = workspace.view(at::kFloat).narrow(0, 0, b * h * padded).view({b, h, padded});
    const at::Tensor d_log_decay = d_cum.flip(-1).cumsum(-1).flip(-1);
    const at::Tensor d_dt_used = (x_dot + in.A.view({1, h, 1}) * d_log_decay).narrow(2, 0, l);
    const at::Tensor dA = (dt_used * d_log_decay).sum(at::IntArrayRef{0, 2});
    const at::Tensor ddt = raw_dt_gradient(d_dt_used, in.dt, in.bias, dt_softplus, dt_min, dt_max);
    const at::Tensor ddt_bias = in.bias.defined() ? ddt.sum(at::IntArrayRef{0, 1}) : absent_gradient(x_in);
    auto by_token = [&](const at::Tensor &sum) {
        return sum.narrow(2, 0, l).transpose(1, 2).to(x_in.scalar_type()).contiguous();
    };
    at::Tensor dD = absent_gradient(x_in);
    if (in.D.defined()) dD = in.D.dim() == 2 ? dD_sum : dD_sum.sum(1);
    return {dx, ddt, dA, by_token(dB_sum), by_token(dC_sum), dD, dz, ddt_bias, d_init};
}

} // namespace tk_mamba2
