// Every op's CPU kernel. Its job is the CPU tests' and the user's: CPU tensors go through the op's rules (so a wrong
// shape or dtype is reported as such, and the rules are tested without a GPU), then are refused because the kernels
// need CUDA tensors. The rules are the op's Meta kernel, reached by redispatching the call to it; the refusal names
// the first CPU tensor by its schema name. One boxed function serves every op:
//
//     TORCH_LIBRARY_IMPL(tk_ops, CPU, m) { m.impl("matmul", tk_kernels::cpu_refusal()); }
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "common/checks.h"

namespace tk_kernels {

namespace detail {

inline void refuse_on_cpu(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    const std::vector<c10::Argument> &arguments = op.schema().arguments();
    const size_t first = stack->size() - arguments.size();
    // The Meta kernel consumes the arguments from the stack: find the tensor to name first.
    const char *name = nullptr;
    at::Device device(at::kCPU);
    for (size_t i = 0; i < arguments.size() && !name; i++) {
        const c10::IValue &value = (*stack)[first + i];
        if (value.isTensor() && value.toTensor().defined() && !value.toTensor().is_cuda()) {
            name = arguments[i].name().c_str();
            device = value.toTensor().device();
        }
    }
    // The Meta kernel allocates its outputs like its inputs: on the CPU they would be real (and possibly huge)
    // allocations. Floating-point operands become meta tensors of the same sizes, strides and dtype, which the rules
    // read alike; integer tensors stay, because rules read host values of some (document offsets).
    for (size_t i = first; i < stack->size(); i++) {
        c10::IValue &value = (*stack)[i];
        if (!value.isTensor()) continue;
        const at::Tensor &t = value.toTensor();
        if (t.defined() && t.is_cpu() && !c10::isIntegralType(t.scalar_type(), /*includeBool=*/true))
            value = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
    }
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack); // the rules: throws if one fails
    std::string display = op.schema().name(); // tk_ops::matmul, shown as Python spells it: tk_ops.matmul
    if (const size_t colons = display.find("::"); colons != std::string::npos) display.replace(colons, 2, ".");
    if (!name) throw c10::ValueError(message(display, ": ", NOT_ON_ONE_GPU));
    reject_cpu(display, name, device);
}

} // namespace detail

inline torch::CppFunction cpu_refusal() { return torch::CppFunction::makeFromBoxedFunction<&detail::refuse_on_cpu>(); }

} // namespace tk_kernels
