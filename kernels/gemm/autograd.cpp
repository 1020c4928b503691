// Autograd of tk_ops::matmul and tk_ops::linear, in C++: a training step calls them dozens of times, and an
// autograd formula registered from Python costs more host time per call than a small GEMM takes (even inside a
// compiled backward graph, where every op call still passes the Autograd key) where this costs what a built-in op does.
//
// matmul: C = A B;  dA = dC B^T,  dB = A^T dC  (transposed views: the kernel reads either memory order; a batched
//         A (..., M, K) contributes all its rows to dB).
// linear: y = x W^T (+ b). Backward, on the same GEMM kernels:
//   dX = dY W          (B = W read in place: its rows are the contraction)
//   dW = dY^T X        (both operands read in place; the result lands in W's own (N, K) layout, so autograd
//                       accumulates it without a transposing copy; any number of tokens, no padding)
//   db = sum of dY over the tokens
// The ops are called through the dispatcher, so torch.compile traces them into its forward and backward
// graphs like any other op (their Meta kernels are in binding.cpp). A call that needs no gradient skips the
// autograd function, as a built-in op does: recording nothing costs nothing.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using linear_fn = at::Tensor(const at::Tensor &, const at::Tensor &, const std::optional<at::Tensor> &);
using matmul_fn = at::Tensor(const at::Tensor &, const at::Tensor &);

at::Tensor call_linear(const at::Tensor &x, const at::Tensor &w, const std::optional<at::Tensor> &b) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::linear", "").typed<linear_fn>();
    return op.call(x, w, b);
}

at::Tensor call_matmul(const at::Tensor &a, const at::Tensor &b) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("tk_ops::matmul", "").typed<matmul_fn>();
    return op.call(a, b);
}

// (..., F) -> (tokens, F)
at::Tensor token_rows(const at::Tensor &t) { return t.dim() == 1 ? t.unsqueeze(0) : t.flatten(0, -2); }

struct MatmulFunction : public torch::autograd::Function<MatmulFunction> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &a, const at::Tensor &b) {
        ctx->save_for_backward({b.requires_grad() ? a : at::Tensor(), a.requires_grad() ? b : at::Tensor()});
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_matmul(a, b);
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        // Gradients of gradients (backward with create_graph=True) need the products' own autograd; a plain
        // backward skips it.
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        at::Tensor da, db;
        if (ctx->needs_input_grad(0)) da = call_matmul(grads[0], saved[1].t());
        if (ctx->needs_input_grad(1)) db = call_matmul(token_rows(saved[0]).t(), token_rows(grads[0]));
        return {da, db};
    }
};

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const at::Tensor &weight,
                              const std::optional<at::Tensor> &bias) {
        const bool has_bias = bias.has_value() && bias->defined();
        // Keep only what the gradients to come need: X for dW, W for dX.
        ctx->save_for_backward({weight.requires_grad() ? x : at::Tensor(), x.requires_grad() ? weight : at::Tensor()});
        ctx->saved_data["has_bias"] = has_bias;
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_linear(x, weight, bias);
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads) {
        const variable_list saved = ctx->get_saved_variables();
        const at::Tensor &x = saved[0], &weight = saved[1];
        const bool has_bias = ctx->saved_data["has_bias"].toBool();
        // Gradients of gradients (backward with create_graph=True) need the products' own autograd; a plain
        // backward skips it.
        std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd;
        if (!at::GradMode::is_enabled()) below_autograd.emplace();
        const at::Tensor dy = token_rows(grads[0]);
        at::Tensor dx, dw, db;
        if (ctx->needs_input_grad(0)) {
            c10::SymDimVector shape(grads[0].sym_sizes().begin(), grads[0].sym_sizes().end());
            shape.back() = weight.sym_size(1);
            dx = call_matmul(dy, weight).reshape_symint(shape);
        }
        if (ctx->needs_input_grad(1)) dw = call_matmul(dy.t(), token_rows(x));
        if (has_bias && ctx->needs_input_grad(2)) db = dy.sum(0);
        return {dx, dw, db};
    }
};

// Whether a call records a graph: grad mode on and some input requiring a gradient.
bool records(std::initializer_list<const at::Tensor *> inputs) {
    if (!at::GradMode::is_enabled()) return false;
    for (const at::Tensor *t : inputs)
        if (t->defined() && t->requires_grad()) return true;
    return false;
}

at::Tensor matmul_autograd(const at::Tensor &a, const at::Tensor &b) {
    if (!records({&a, &b})) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_matmul(a, b);
    }
    return MatmulFunction::apply(a, b);
}

at::Tensor linear_autograd(const at::Tensor &x, const at::Tensor &weight, const std::optional<at::Tensor> &bias) {
    const at::Tensor no_bias;
    if (!records({&x, &weight, bias ? &*bias : &no_bias})) {
        at::AutoDispatchBelowADInplaceOrView below_autograd;
        return call_linear(x, weight, bias);
    }
    return LinearFunction::apply(x, weight, bias);
}

} // namespace

TORCH_LIBRARY_IMPL(tk_ops, Autograd, m) {
    m.impl("matmul", &matmul_autograd);
    m.impl("linear", &linear_autograd);
}
