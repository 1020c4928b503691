// Autograd of tk_ops::based_fwd, in C++ for the reason attention's is (kernels/attention/autograd.cpp): a formula
// registered from Python costs several times an op's own host time per call, in eager mode and inside a compiled
// backward graph alike.
//
// based_fwd(q, k, v, ..., kv0, k_sum0, output_final_state, save_den) -> (o, kv, k_sum, den). Gradients flow to q, k,
// v and the initial state from o and from the final state (kv, k_sum); den is not differentiable. One based_bwd call
// computes them all: the backward kernel walks the chunks from the last, seeded with the final state's gradient, and
// ends with the initial state's. The forward saves den (the row normalisers) for it when normalize is set, whatever
// the caller asked for: the op's own den output keeps the shape save_den gives it, so that fake and real outputs agree.
//
// The ops are called through the dispatcher, so torch.compile traces them into its forward and backward graphs
// (their Meta kernels are in binding.cpp). A call that needs no gradient skips the autograd function, as a built-in
// op does. The scale stays as given (None: the ops' default) all the way to the backward op.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "based.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using scale_t = std::optional<double>;
using opt_tensor = std::optional<at::Tensor>;
using fwd_out = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using fwd_fn = fwd_out(const at::Tensor &, const at::Tensor &, const at::Tensor &, scale_t, bool, double,
                       const opt_tensor &, const opt_tensor &, bool, bool);
using bwd_out = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using bwd_fn = bwd_out(const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const opt_tensor &, scale_t, bool, double, const opt_tensor &,
                       const opt_tensor &, const opt_tensor &, const opt_tensor &, bool);

fwd_out call_fwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, scale_t scale, bool normalize,
                 double eps, const opt_tensor &kv0, const opt_tensor &k_sum0, bool output_final_state, bool save_den) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::based_fwd", "").typed<fwd_fn>();
    return op.call(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den);
}

bwd_out call_bwd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &o,
                 const at::Tensor &d_o, const opt_tensor &den, scale_t scale, bool normalize, double eps,
                 const opt_tensor &kv0, const opt_tensor &k_sum0, const opt_tensor &d_kv, const opt_tensor &d_k_sum,
                 bool initial_state_grad) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::based_bwd", "").typed<bwd_fn>();
    return op.call(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum, initial_state_grad);
}

opt_tensor present(const at::Tensor &t) { return t.defined() ? opt_tensor(t) : std::nullopt; }

// A zero gradient for the part of the final state that did not reach the loss: (B, H, Dv, 273) for kv, (B, H, 273)
// for k_sum.
at::Tensor zero_state_part(const at::Tensor &q, const at::Tensor &v, bool kv) {
    const c10::SymInt features(tk_based::STATE_FEATURES);
    if (kv) return at::zeros_symint({q.sym_size(0), q.sym_size(1), v.sym_size(3), features}, v.options().dtype(at::kFloat));
    return at::zeros_symint({q.sym_size(0), q.sym_size(1), features}, v.options().dtype(at::kFloat));
}

// Inputs q, k, v (edges 0..2) and, when given, the initial state kv0, k_sum0 (edges 3 and 4: both or neither, the
// op's rule).
struct BasedFunction : public torch::autograd::Function<BasedFunction> {
    static variable_list forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                 const opt_tensor &kv0, const opt_tensor &k_sum0, scale_t scale, bool normalize,
                                 double eps, bool output_final_state, bool save_den) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        auto [o, kv, k_sum, den] =
            call_fwd(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den || normalize);
        ctx->save_for_backward({q, k, v, o, normalize ? den : at::Tensor(), kv0.value_or(at::Tensor()),
                                k_sum0.value_or(at::Tensor())});
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["normalize"] = normalize;
        ctx->saved_data["eps"] = eps;
        ctx->saved_data["output_final_state"] = output_final_state;
        // The den the caller sees has the shape its save_den gives, as the Meta kernel says.
        const at::Tensor den_out = save_den ? den : den.new_empty_symint({c10::SymInt(0)});
        ctx->mark_non_differentiable({den_out});
        // Outputs that do not reach the loss (the final state, often) then arrive undefined instead of as zeros.
        ctx->set_materialize_grads(false);
        return {o, kv, k_sum, den_out};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &den = saved[4],
                         &kv0 = saved[5], &k_sum0 = saved[6];
        const scale_t scale = ctx->saved_data["scale"].toOptional<double>();
        const bool normalize = ctx->saved_data["normalize"].toBool();
        const double eps = ctx->saved_data["eps"].toDouble();
        at::Tensor d_o = grads[0], d_kv, d_k_sum;
        if (ctx->saved_data["output_final_state"].toBool()) {
            d_kv = grads[1];
            d_k_sum = grads[2];
        }
        const bool state_grad = kv0.defined() && (ctx->needs_input_grad(3) || ctx->needs_input_grad(4));
        variable_list out(10);
        if (!d_o.defined() && !d_kv.defined() && !d_k_sum.defined()) return out; // nothing reached the loss
        // Gradients of gradients are not supported by the kernels; outside create_graph, skip the autograd layer.
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        if (!d_o.defined()) d_o = at::zeros_like(o);
        // The kernel takes the final state's gradient whole (both parts, dense) or not at all; a sum over the state
        // gives a broadcast (zero-stride) gradient.
        if (d_kv.defined() || d_k_sum.defined()) {
            d_kv = d_kv.defined() ? d_kv.contiguous() : zero_state_part(q, v, true);
            d_k_sum = d_k_sum.defined() ? d_k_sum.contiguous() : zero_state_part(q, v, false);
        }
        auto [dq, dk, dv, d_kv0, d_k_sum0] = call_bwd(q, k, v, o, d_o, present(den), scale, normalize, eps,
                                                      present(kv0), present(k_sum0), present(d_kv), present(d_k_sum),
                                                      state_grad);
        out[0] = ctx->needs_input_grad(0) ? dq : at::Tensor();
        out[1] = ctx->needs_input_grad(1) ? dk : at::Tensor();
        out[2] = ctx->needs_input_grad(2) ? dv : at::Tensor();
        if (state_grad) {
            out[3] = ctx->needs_input_grad(3) ? d_kv0 : at::Tensor();
            out[4] = ctx->needs_input_grad(4) ? d_k_sum0 : at::Tensor();
        }
        return out;
    }
};

fwd_out based_fwd_autograd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, scale_t scale,
                           bool normalize, double eps, const opt_tensor &kv0, const opt_tensor &k_sum0,
                           bool output_final_state, bool save_den) {
    const auto requires_grad = [](const opt_tensor &t) { return t.has_value() && t->defined() && t->requires_grad(); };
    if (!at::GradMode::is_enabled() ||
        !(q.requires_grad() || k.requires_grad() || v.requires_grad() || requires_grad(kv0) || requires_grad(k_sum0))) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_fwd(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den);
    }
    const variable_list out =
        BasedFunction::apply(q, k, v, kv0, k_sum0, scale, normalize, eps, output_final_state, save_den);
    return {out[0], out[1], out[2], out[3]};
}

// based_step has no gradient: it is for decoding. Its own autograd kernel keeps a step taken in grad mode (a model
// decoding outside torch.no_grad()) cheap and honest: the output has no gradient, where the fallback for ops without
// one would give it a gradient function that silently yields nothing. The state is still marked as modified, so that
// a forward which saved it for its backward notices the change. A state that is itself part of a graph (the final
// state of a forward that had gradients) is refused: changed in place without a record, it would pass wrong
// gradients on.
at::Tensor based_step_autograd(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, at::Tensor &kv,
                               at::Tensor &k_sum, scale_t scale, bool normalize, double eps) {
    if (at::GradMode::is_enabled() && (kv.requires_grad() || k_sum.requires_grad()))
        throw c10::ValueError("tk_ops.based_step: the state requires grad (it came from a forward with gradients on), "
                              "but the step updates it in place and has no gradient; decode under torch.no_grad() or "
                              "pass the state .detach()ed");
    using step_fn = at::Tensor(const at::Tensor &, const at::Tensor &, const at::Tensor &, at::Tensor &, at::Tensor &,
                               scale_t, bool, double);
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::based_step", "").typed<step_fn>();
    at::Tensor o;
    {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        o = op.call(q, k, v, kv, k_sum, scale, normalize, eps);
    }
    for (const at::Tensor *t : {&kv, &k_sum})
        if (!t->is_inference()) torch::autograd::impl::bump_version(*t);
    return o;
}

} // namespace

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) {
    m.impl("based_fwd", &based_fwd_autograd);
    m.impl("based_step", &based_step_autograd);
}
