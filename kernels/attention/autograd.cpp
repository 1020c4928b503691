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

// (dQ, dK) in fp32 of sum_i grad_lse_i * LSE_i (see the top of the file).
std::tuple<at::Tensor, at::Tensor> lse_term(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                            const at::Tensor &lse, const at::Tensor &grad_lse, const options &opt) {
    const c10::SymInt d = q.sym_size(-1);
    const at::Tensor g = grad_lse.to(at::kFloat);
    const at::Tensor m = g.abs().amax().clamp_min(FLT_MIN);
    const at::Tensor dout = at::constant_pad_nd_symint((g / m).to(q.scalar_type()).unsqueeze(-1), {0, d - 1});
    c10::SymDimVector unit_shape(v.sym_sizes().begin(), v.sym_sizes().end());
    unit_shape.back() = 1;
    const at::Tensor v_unit = at::constant_pad_nd_symint(at::ones_symint(unit_shape, v.options()), {0, d - 1});
    const auto [dq, dk, dv_unused] = call_bwd(q, k, v_unit, at::zeros_like(dout), dout, lse, opt);
    return {dq.to(at::kFloat) * m, dk.to(at::kFloat) * m};
}

struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
    static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                 bool causal, scale_t scale, int64_t window_left, int64_t window_right, double softcap) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        auto [o, lse] = call_fwd(q, k, v, {causal, scale, window_left, window_right, softcap});
        ctx->save_for_backward({q, k, v, o, lse});
        ctx->saved_data["causal"] = causal;
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["window_left"] = window_left;
        ctx->saved_data["window_right"] = window_right;
        ctx->saved_data["softcap"] = softcap;
        // An output that does not reach the loss (usually LSE) then arrives undefined instead of as zeros, so the
        // common case needs neither a data-dependent check (a device sync) nor a second backward call.
        ctx->set_materialize_grads(false);
        return {o, lse};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
        const options opt{ctx->saved_data["causal"].toBool(), ctx->saved_data["scale"].toOptional<double>(),
                          ctx->saved_data["window_left"].toInt(), ctx->saved_data["window_right"].toInt(),
                          ctx->saved_data["softcap"].toDouble()};
        const at::Tensor &grad_out = grads[0], &grad_lse = grads[1];
        // Gradients of gradients are not supported by the kernels; outside create_graph, skip the autograd layer.
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        at::Tensor dq, dk, dv;
        if (grad_out.defined()) {
            std::tie(dq, dk, dv) = call_bwd(q, k, v, o, grad_out, lse, opt);
        } else {
            dv = at::zeros_like(v, at::MemoryFormat::Contiguous);
        }
        if (grad_lse.defined() && grad_lse.sym_numel() > 0) {
            auto [lq, lk] = lse_term(q, k, v, lse, grad_lse, opt);
            dq = (dq.defined() ? dq.to(at::kFloat) + lq : lq).to(q.scalar_type());
            dk = (dk.defined() ? dk.to(at::kFloat) + lk : lk).to(k.scalar_type());
        }
        return {ctx->needs_input_grad(0) ? dq : at::Tensor(), ctx->needs_input_grad(1) ? dk : at::Tensor(),
                ctx->needs_input_grad(2) ? dv : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
                at::Tensor()};
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

// Packed documents: the forward only. A call that would need gradients is refused (rather than returning outputs
// that silently carry none).
using varlen_fwd_fn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                         const at::Tensor &, const at::Tensor &, int64_t, int64_t, bool,
                                                         scale_t, int64_t, int64_t, double);
std::tuple<at::Tensor, at::Tensor> attention_varlen_fwd_autograd(const at::Tensor &q, const at::Tensor &k,
                                                                 const at::Tensor &v, const at::Tensor &cu_q,
                                                                 const at::Tensor &cu_k, int64_t max_seqlen_q,
                                                                 int64_t max_seqlen_k, bool causal, scale_t scale,
                                                                 int64_t window_left, int64_t window_right,
                                                                 double softcap) {
    if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))
        throw c10::NotImplementedError(
            {__func__, __FILE__, uint32_t(__LINE__)},
            "tk_ops.attention_varlen: the backward on packed documents is not built; call it under torch.no_grad() "
            "(inference), or use tk_ops.attention on a (batch, heads, seq_len, head_dim) batch for training");
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::attention_varlen_fwd", "").typed<varlen_fwd_fn>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(q, k, v, cu_q, cu_k, max_seqlen_q, max_seqlen_k, causal, scale, window_left, window_right, softcap);
}

} // namespace

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) {
    m.impl("attention_fwd", &attention_fwd_autograd);
    m.impl("attention_varlen_fwd", &attention_varlen_fwd_autograd);
}
