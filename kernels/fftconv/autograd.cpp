// Autograd of tk_ops::fftconv_fwd, in C++ for the reason attention's is (kernels/attention/autograd.cpp): a formula
// registered from Python costs several times an op's own host time per call.
//
// fftconv_fwd(u, k, pregate, postgate, k_f) -> y. Gradients flow to u, k, pregate and postgate; one fftconv_bwd call
// (binding.cpp) computes those that autograd asks for from the saved inputs and dy. k_f, the filter's spectrum
// precomputed for inference, gets none: one that requires a gradient is refused with the advice to pass k, and so
// is fftconv_spectrum of a filter that requires one (its result would silently cut the filter off the graph). With a
// k_f that needs no gradient, u and the gates still get theirs.
//
// The ops are called through the dispatcher, so torch.compile traces them into its graphs (their Meta kernels are in
// binding.cpp). A call that needs no gradient skips the autograd function, as a built-in op does.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "common/checks.h"
#include "fftconv_rules.h"

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using opt_tensor = std::optional<at::Tensor>;
using fwd_fn = at::Tensor(const at::Tensor &, const opt_tensor &, const opt_tensor &, const opt_tensor &,
                          const opt_tensor &);
using bwd_out = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using bwd_fn = bwd_out(const at::Tensor &, const opt_tensor &, const opt_tensor &, const opt_tensor &,
                       const opt_tensor &, const at::Tensor &, std::array<bool, 4>);
using spectrum_fn = at::Tensor(const at::Tensor &, int64_t);

at::Tensor call_fwd(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate, const opt_tensor &postgate,
                    const opt_tensor &k_f) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::fftconv_fwd", "").typed<fwd_fn>();
    return op.call(u, k, pregate, postgate, k_f);
}

opt_tensor present(const at::Tensor &t) { return t.defined() ? opt_tensor(t) : std::nullopt; }

at::Tensor call_spectrum(const at::Tensor &k, int64_t n) {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::fftconv_spectrum", "").typed<spectrum_fn>();
    return op.call(k, n);
}
// Whether the forward computes k's spectrum itself: k given, and u and k where the kernels run (elsewhere the forward
// op raises the error that says what to change).
bool computes_spectrum(const at::Tensor &u, const opt_tensor &k) {
    return k.has_value() && k->defined() && !u.is_cpu() && k->device() == u.device();
}
at::Tensor given(const opt_tensor &t) { return t.has_value() ? *t : at::Tensor(); }
bool requires_grad(const opt_tensor &t) { return t.has_value() && t->defined() && t->requires_grad(); }

// The function's tensor arguments in order: U, K, PRE and POST are also the order of fftconv_bwd's output_mask and
// results; K_F is never differentiated.
constexpr int U = 0, K = 1, PRE = 2, POST = 3, K_F = 4, INPUTS = 5;

struct FftconvFunction : public torch::autograd::Function<FftconvFunction> {
    // With k, its spectrum is computed here, once for the forward and the backward's convolutions (fftconv_bwd takes
    // k and its spectrum together).
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate,
                              const opt_tensor &postgate, const opt_tensor &k_f) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        at::Tensor spectrum = given(k_f);
        if (computes_spectrum(u, k)) {
            tk_fftconv::fwd_rules(u, *k, given(pregate), given(postgate), spectrum); // the op's own messages first
            spectrum = call_spectrum(*k, u.sym_size(2).guard_int(__FILE__, __LINE__));
        }
        at::Tensor y = call_fwd(u, spectrum.defined() ? std::nullopt : k, pregate, postgate, present(spectrum));
        ctx->save_for_backward({u, given(k), given(pregate), given(postgate), spectrum});
        ctx->saved_data["k_f_given"] = given(k_f).defined(); // the spectrum saved for k is not an input with an edge
        return y;
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        // The result is indexed by argument, needs_input_grad by edge: only the given tensors have edges.
        bool wanted[INPUTS] = {};
        const bool given_input[INPUTS] = {true, s[K].defined(), s[PRE].defined(), s[POST].defined(),
                                          ctx->saved_data["k_f_given"].toBool()};
        for (int i = 0, edge = 0; i < INPUTS; i++) {
            if (given_input[i]) wanted[i] = ctx->needs_input_grad(edge++);
        }
        variable_list out(INPUTS);
        const std::array<bool, 4> mask = {wanted[U], wanted[K], wanted[PRE], wanted[POST]};
        if (!(mask[U] || mask[K] || mask[PRE] || mask[POST])) return out;
        // Under create_graph the call goes through autograd, whose fallback marks the results as having no formula
        // of their own (a second derivative is not built).
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        static const auto op =
            c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::fftconv_bwd", "").typed<bwd_fn>();
        const auto [du, dk, dpregate, dpostgate] =
            op.call(s[U], present(s[K]), present(s[PRE]), present(s[POST]), present(s[K_F]), grads[0], mask);
        const at::Tensor results[4] = {du, dk, dpregate, dpostgate};
        for (int i = 0; i < 4; i++) {
            if (mask[i]) out[i] = results[i];
        }
        return out;
    }
};

at::Tensor fftconv_autograd(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate,
                            const opt_tensor &postgate, const opt_tensor &k_f) {
    const bool grad_mode = at::GradMode::is_enabled();
    tk_kernels::check_input(!grad_mode || !requires_grad(k_f), "tk_ops.fftconv: k_f, the filter's precomputed "
                            "spectrum, gets no gradient, and this one requires one; to train the filter pass k itself "
                            "(k_f is for inference: compute it under torch.no_grad() or detach it)");
    if (!grad_mode || !(u.requires_grad() || requires_grad(k) || requires_grad(pregate) || requires_grad(postgate))) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_fwd(u, k, pregate, postgate, k_f);
    }
    return FftconvFunction::apply(u, k, pregate, postgate, k_f);
}

at::Tensor spectrum_autograd(const at::Tensor &k, int64_t n) {
    tk_kernels::check_input(!at::GradMode::is_enabled() || !k.requires_grad(), "tk_ops.fftconv_spectrum: the spectrum "
                            "gets no gradient, so its filter may not require one; to train the filter pass k itself to "
                            "tk_ops.fftconv (the spectrum is for inference: compute it under torch.no_grad() or from "
                            "k.detach())");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return call_spectrum(k, n);
}

} // namespace

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) {
    m.impl("fftconv_fwd", &fftconv_autograd);
    m.impl("fftconv_spectrum", &spectrum_autograd);
}
