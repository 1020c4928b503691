// Autograd of tk_ops::attention_fwd, in C++: a formula registered from Python costs several times an op's own
// host time per call, in eager mode and inside a compiled backward graph alike (every op call there still
// passes the Autograd key), where this costs what a built-in op does.
//
// attention_fwd(q, k, v, <options>) -> (O, LSE), the options being causal, scale, window and softcap. The gradient of O comes from attention_bwd, which
// recomputes the probabilities from LSE. A gradient flowing into LSE (a loss that uses the log-sum-exp) adds
// dLSE_i / dS_ij = P_ij * grad_lse_i to dS = P * (dP - delta), where dP = dO V^T and delta_i = rowsum(dO_i * O_i),
// O entering only through delta. One more attention_bwd call computes exactly that term: O = 0 (delta = 0),
// V' = e_0 for every key and dO'_i = grad_lse_i * e_0 give dP'_ij = grad_lse_i, hence dS'_ij = P_ij grad_lse_i;
// its dQ' and dK' are the term (its dV' is discarded). grad_lse is divided by its largest magnitude on the way
// in and the results multiplied back, so that fp16 neither overflows nor loses small values.
//
// The ops are called through the dispatcher, so torch.compile traces them into its forward and backward
// graphs (their Meta kernels are in binding.cpp). Sizes are read as SymInts: under dynamic shapes they are symbols.
// A call that needs no gradient skips the autograd function, as a built-in op does. The scale stays as given
// (None: the ops' default) all the way to the backward op.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cfloat>
#include <optional>
#include <tuple>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using scale_t = std::optional<double>;
using fwd_fn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, const at::Tensor &, const at::Tensor &, bool, scale_t,
                                                  int64_t, int64_t, double);
using bwd_fn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                              const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                              bool, scale_t, int64_t, int64_t, double);

// The ops' options after the tensors, passed through unchanged from the forward to the backward.
struct options {
    bool causal;
    scale_t scale;
    int64_t window_left, window_right;
    double softcap;

    void save(AutogradContext *ctx) const {
        ctx->saved_data["causal"] = causal;
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["window_left"] = window_left;
        ctx->saved_data["window_right"] = window_right;
        ctx->saved_data["softcap"] = softcap;
    }
    static options saved(AutogradContext *ctx) {
        return {ctx->saved_data["causal"].toBool(), ctx->saved_data["scale"].toOptional<double>(),
                ctx->saved_data["window_left"].toInt(), ctx->saved_data["window_right"].toInt(),
                ctx->saved_data["softcap"].toDouble()};
    }
};

std::tuple<at::Tensor, at::Tensor> call_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const options &o) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::attention_fwd", "").typed<fwd_fn>();
    return op.call(q, k, v, o.causal, o.scale, o.window_left, o.window_right, o.softcap);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> call_bwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                                        const at::Tensor &o, const at::Tensor &dout,
                                                        const at::Tensor &lse, const options &opt) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::attention_bwd", "").typed<bwd_fn>();
    return op.call(q, k, v, o, dout, lse, opt.causal, opt.scale, opt.window_left, opt.window_right, opt.softcap);
}

// (dQ, dK) in fp32 of sum_i grad_lse_i * LSE_i (see the top of the file). `grad_rows` is grad_lse laid out like q's
// rows (q's shape without the head dimension); backward(v', o', dout') is one backward call with those replaced.
template <typename Backward>
std::tuple<at::Tensor, at::Tensor> lse_term(const at::Tensor &q, const at::Tensor &v, const at::Tensor &grad_rows,
                                            Backward &&backward) {
    const c10::SymInt d = q.sym_size(-1);
    const at::Tensor g = grad_rows.to(at::kFloat);
    const at::Tensor m = g.abs().amax().clamp_min(FLT_MIN);
    const at::Tensor dout = at::constant_pad_nd_symint((g / m).to(q.scalar_type()).unsqueeze(-1), {0, d - 1});
    c10::SymDimVector unit_shape(v.sym_sizes().begin(), v.sym_sizes().end());
    unit_shape.back() = 1;
    const at::Tensor v_unit = at::constant_pad_nd_symint(at::ones_symint(unit_shape, v.options()), {0, d - 1});
    const auto [dq, dk, dv_unused] = backward(v_unit, at::zeros_like(dout), dout);
    return {dq.to(at::kFloat) * m, dk.to(at::kFloat) * m};
}

// The gradients of (O, LSE) from the saved tensors: backward(v, o, dout) is the op's backward call.
template <typename Backward>
variable_list gradients(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                        const at::Tensor &o, const at::Tensor &grad_out, const at::Tensor &grad_lse_rows,
                        Backward &&backward) {
    // Gradients of gradients are not supported by the kernels; outside create_graph, skip the autograd layer.
    std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
    if (!at::GradMode::is_enabled()) below_autograd.emplace();
    at::Tensor dq, dk, dv;
    if (grad_out.defined()) {
        std::tie(dq, dk, dv) = backward(v, o, grad_out);
    } else {
        dv = at::zeros_like(v, at::MemoryFormat::Contiguous);
    }
    if (grad_lse_rows.defined() && grad_lse_rows.sym_numel() > 0) {
        auto [lq, lk] = lse_term(q, v, grad_lse_rows, backward);
        dq = (dq.defined() ? dq.to(at::kFloat) + lq : lq).to(q.scalar_type());
        dk = (dk.defined() ? dk.to(at::kFloat) + lk : lk).to(k.scalar_type());
    }
    return {ctx->needs_input_grad(0) ? dq : at::Tensor(), ctx->needs_input_grad(1) ? dk : at::Tensor(),
            ctx->needs_input_grad(2) ? dv : at::Tensor()};
}

struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
    static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                 bool causal, scale_t scale, int64_t window_left, int64_t window_right, double softcap) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        const options opt{causal, scale, window_left, window_right, softcap};
        auto [o, lse] = call_fwd(q, k, v, opt);
        ctx->save_for_backward({q, k, v, o, lse});
        opt.save(ctx);
        // An output that does not reach the loss (usually LSE) then arrives undefined instead of as zeros, so the
        // common case needs neither a data-dependent check (a device sync) nor a second backward call.
        ctx->set_materialize_grads(false);
        return {o, lse};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
        const options opt = options::saved(ctx);
        variable_list out = gradients(ctx, q, k, v, o, grads[0], grads[1],
                                      [&](const at::Tensor &v_, const at::Tensor &o_, const at::Tensor &dout) {
                                          return call_bwd(q, k, v_, o_, dout, lse, opt);
                                      });
        out.resize(8); // no gradient for the options
        return out;
    }
};

std::tuple<at::Tensor, at::Tensor> attention_fwd_autograd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                                          bool causal, scale_t scale, int64_t window_left,
                                                          int64_t window_right, double softcap) {
    if (!at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad())) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_fwd(q, k, v, {causal, scale, window_left, window_right, softcap});
    }
    const variable_list out = AttentionFunction::apply(q, k, v, causal, scale, window_left, window_right, softcap);
    return {out[0], out[1]};
}

// Packed documents: the same formula on the varlen ops (LSE is (Hq, total_q), so its gradient is transposed into q's
// rows for the LSE term).
using varlen_fwd_fn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                         const at::Tensor &, const at::Tensor &, int64_t, int64_t, bool,
                                                         scale_t, int64_t, int64_t, double);
using varlen_bwd_fn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
    const at::Tensor &, const at::Tensor &, const at::Tensor &, int64_t, int64_t, bool, scale_t, int64_t, int64_t, double);

struct documents {
    const at::Tensor &cu_q, &cu_k;
    int64_t max_q, max_k;
};

std::tuple<at::Tensor, at::Tensor> call_varlen_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                                   const documents &d, const options &o) {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::attention_varlen_fwd", "").typed<varlen_fwd_fn>();
    return op.call(q, k, v, d.cu_q, d.cu_k, d.max_q, d.max_k, o.causal, o.scale, o.window_left, o.window_right,
                   o.softcap);
}

struct VarlenAttentionFunction : public torch::autograd::Function<VarlenAttentionFunction> {
    static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                 const at::Tensor &cu_q, const at::Tensor &cu_k, int64_t max_q, int64_t max_k,
                                 bool causal, scale_t scale, int64_t window_left, int64_t window_right, double softcap) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        const options opt{causal, scale, window_left, window_right, softcap};
        auto [o, lse] = call_varlen_fwd(q, k, v, {cu_q, cu_k, max_q, max_k}, opt);
        ctx->save_for_backward({q, k, v, o, lse, cu_q, cu_k});
        ctx->saved_data["max_q"] = max_q;
        ctx->saved_data["max_k"] = max_k;
        opt.save(ctx);
        ctx->set_materialize_grads(false);
        return {o, lse};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4], &cu_q = saved[5],
                         &cu_k = saved[6];
        const int64_t max_q = ctx->saved_data["max_q"].toInt(), max_k = ctx->saved_data["max_k"].toInt();
        const options opt = options::saved(ctx);
        static const auto op =
            c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::attention_varlen_bwd", "").typed<varlen_bwd_fn>();
        const at::Tensor &grad_lse = grads[1];
        variable_list out = gradients(ctx, q, k, v, o, grads[0], grad_lse.defined() ? grad_lse.t() : grad_lse,
                                      [&](const at::Tensor &v_, const at::Tensor &o_, const at::Tensor &dout) {
                                          return op.call(q, k, v_, o_, dout, lse, cu_q, cu_k, max_q, max_k, opt.causal,
                                                         opt.scale, opt.window_left, opt.window_right, opt.softcap);
                                      });
        out.resize(12); // no gradient for the offsets and options
        return out;
    }
};

std::tuple<at::Tensor, at::Tensor> attention_varlen_fwd_autograd(const at::Tensor &q, const at::Tensor &k,
                                                                 const at::Tensor &v, const at::Tensor &cu_q,
                                                                 const at::Tensor &cu_k, int64_t max_seqlen_q,
                                                                 int64_t max_seqlen_k, bool causal, scale_t scale,
                                                                 int64_t window_left, int64_t window_right,
                                                                 double softcap) {
    if (!at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad())) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_varlen_fwd(q, k, v, {cu_q, cu_k, max_seqlen_q, max_seqlen_k},
                               {causal, scale, window_left, window_right, softcap});
    }
    const variable_list out = VarlenAttentionFunction::apply(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal,
                                                             scale, window_left, window_right, softcap);
    return {out[0], out[1]};
}

} // namespace

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) {
    m.impl("attention_fwd", &attention_fwd_autograd);
    m.impl("attention_varlen_fwd", &attention_varlen_fwd_autograd);
}
