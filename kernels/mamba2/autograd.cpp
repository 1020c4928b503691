// Autograd of the Mamba-2 ops (binding.cpp), in C++ for the reason attention's is (kernels/attention/autograd.cpp): a
// formula registered from Python costs several times an op's own host time per call.
//
// mamba2_chunk_scan_fwd(x, dt, A, B, C, ..., return_final_states) -> (out, final_states). Gradients flow to x, dt, A,
// B, C, D, z, dt_bias and initial_states from out and from the final states; seq_idx and the scalars have none. One
// mamba2_chunk_scan_bwd call computes them all from the saved inputs (the output itself is not needed: with a gate
// the backward computes the scan's output before the gate again).
//
// The ops are called through the dispatcher, so torch.compile traces them into its graphs (their Meta kernels are in
// binding.cpp). A call that needs no gradient skips the autograd function, as a built-in op does.
//
// mamba2_step has no gradient; its autograd kernel is at the end.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using opt_tensor = std::optional<at::Tensor>;
using fwd_out = std::tuple<at::Tensor, at::Tensor>;
using fwd_fn = fwd_out(const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, int64_t, const opt_tensor &, const opt_tensor &, const opt_tensor &,
                       const opt_tensor &, const opt_tensor &, bool, double, double, bool);
using bwd_out = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor>;
using bwd_fn = bwd_out(const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                       const at::Tensor &, const opt_tensor &, const opt_tensor &, const opt_tensor &,
                       const opt_tensor &, const opt_tensor &, bool, double, double, const at::Tensor &,
                       const opt_tensor &);

fwd_out call_fwd(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                 const at::Tensor &C, int64_t chunk_size, const opt_tensor &D, const opt_tensor &z,
                 const opt_tensor &dt_bias, const opt_tensor &init, const opt_tensor &seq_idx, bool dt_softplus,
                 double dt_min, double dt_max, bool return_final_states) {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::mamba2_chunk_scan_fwd", "").typed<fwd_fn>();
    return op.call(x, dt, A, B, C, chunk_size, D, z, dt_bias, init, seq_idx, dt_softplus, dt_min, dt_max,
                   return_final_states);
}

opt_tensor present(const at::Tensor &t) { return t.defined() ? opt_tensor(t) : std::nullopt; }
at::Tensor given(const opt_tensor &t) { return t.has_value() ? *t : at::Tensor(); }

// The differentiable inputs, in the order of the function's edges.
constexpr int X = 0, DT = 1, A_ = 2, B_ = 3, C_ = 4, D_ = 5, Z = 6, BIAS = 7, INIT = 8, INPUTS = 9;

struct Mamba2ScanFunction : public torch::autograd::Function<Mamba2ScanFunction> {
    static variable_list forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A,
                                 const at::Tensor &B, const at::Tensor &C, const opt_tensor &D, const opt_tensor &z,
                                 const opt_tensor &dt_bias, const opt_tensor &init, const opt_tensor &seq_idx,
                                 int64_t chunk_size, bool dt_softplus, double dt_min, double dt_max,
                                 bool return_final_states) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        auto [out, final_states] = call_fwd(x, dt, A, B, C, chunk_size, D, z, dt_bias, init, seq_idx, dt_softplus,
                                            dt_min, dt_max, return_final_states);
        ctx->save_for_backward({x, dt, A, B, C, given(D), given(z), given(dt_bias), given(init), given(seq_idx)});
        ctx->saved_data["dt_softplus"] = dt_softplus;
        ctx->saved_data["dt_min"] = dt_min;
        ctx->saved_data["dt_max"] = dt_max;
        ctx->saved_data["return_final_states"] = return_final_states;
        ctx->set_materialize_grads(false);
        return {out, final_states};
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        at::Tensor d_out = grads[0], d_final;
        if (ctx->saved_data["return_final_states"].toBool()) d_final = grads[1];
        variable_list out(15);
        if (!d_out.defined() && !d_final.defined()) return out; // nothing reached the loss
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        if (!d_out.defined()) d_out = at::zeros_like(s[X]);
        if (d_final.defined()) d_final = d_final.contiguous();
        static const auto op =
            c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::mamba2_chunk_scan_bwd", "").typed<bwd_fn>();
        const bwd_out g = op.call(s[X], s[DT], s[A_], s[B_], s[C_], present(s[D_]), present(s[Z]), present(s[BIAS]),
                                  present(s[INIT]), present(s[9]), ctx->saved_data["dt_softplus"].toBool(),
                                  ctx->saved_data["dt_min"].toDouble(), ctx->saved_data["dt_max"].toDouble(), d_out,
                                  present(d_final));
        const at::Tensor grads_in[INPUTS] = {std::get<0>(g), std::get<1>(g), std::get<2>(g), std::get<3>(g),
                                             std::get<4>(g), std::get<5>(g), std::get<6>(g), std::get<7>(g),
                                             std::get<8>(g)};
        // The result is indexed by argument, needs_input_grad by edge: only the given tensors have edges.
        for (int i = 0, edge = 0; i < INPUTS; i++) {
            if (!s[i].defined()) continue;
            if (ctx->needs_input_grad(edge++)) out[i] = grads_in[i];
        }
        return out;
    }
};

fwd_out mamba2_scan_autograd(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                             const at::Tensor &C, int64_t chunk_size, const opt_tensor &D, const opt_tensor &z,
                             const opt_tensor &dt_bias, const opt_tensor &init, const opt_tensor &seq_idx,
                             bool dt_softplus, double dt_min, double dt_max, bool return_final_states) {
    const auto requires_grad = [](const opt_tensor &t) { return t.has_value() && t->defined() && t->requires_grad(); };
    const bool any = x.requires_grad() || dt.requires_grad() || A.requires_grad() || B.requires_grad() ||
                     C.requires_grad() || requires_grad(D) || requires_grad(z) || requires_grad(dt_bias) ||
                     requires_grad(init);
    if (!at::GradMode::is_enabled() || !any) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_fwd(x, dt, A, B, C, chunk_size, D, z, dt_bias, init, seq_idx, dt_softplus, dt_min, dt_max,
                        return_final_states);
    }
    const variable_list out = Mamba2ScanFunction::apply(x, dt, A, B, C, D, z, dt_bias, init, seq_idx, chunk_size,
                                                        dt_softplus, dt_min, dt_max, return_final_states);
    return {out[0], out[1]};
}

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

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) {
    m.impl("mamba2_chunk_scan_fwd", &mamba2_scan_autograd);
    m.impl("mamba2_step", &step_autograd);
}
