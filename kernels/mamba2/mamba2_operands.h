// The Mamba-2 scan's tensors on the host side, shared by binding.cpp's CUDA and Meta kernels and the backward's host
// side (mamba2_bwd_aten.cpp): the op's tensor arguments, the operands the kernels read (made from them once the op's
// rules have passed), and the forward run on those operands.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "mamba2.h"

namespace tk_mamba2 {

// The scan's tensor arguments as an op receives them, absent optional ones as undefined tensors.
struct scan_args {
    at::Tensor x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx;
    scan_args(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B, const at::Tensor &C,
              const std::optional<at::Tensor> &D, const std::optional<at::Tensor> &z,
              const std::optional<at::Tensor> &dt_bias, const std::optional<at::Tensor> &initial_states,
              const std::optional<at::Tensor> &seq_idx);
};

// A (batch, seq, heads, dim) tensor as the (batch, heads, seq, dim) view TMA reads (copied first when its strides do
// not allow it in place); undefined stays undefined.
at::Tensor heads_view(const at::Tensor &t);
// A small operand as the kernels read it: contiguous and 16-byte aligned, else copied; undefined stays undefined.
at::Tensor dense(const at::Tensor &t);

// The scan's operands as the kernels take them: x, B, C (and z) as the (b, h, l, d) views TMA reads (copied first
// where their strides do not allow it in place), the small operands contiguous and 16-byte aligned (copied otherwise).
struct scan_operands {
    at::Tensor x, z, B, C, dt, A, D, bias, init, seq;
    // with_gate: z too (the backward applies the gate itself, so its forward runs without it).
    scan_operands(const scan_args &a, bool with_gate);
    // Everything of a fwd_problem but the outputs and the workspace.
    fwd_problem problem(bool dt_softplus, double dt_min, double dt_max) const;
};

// The forward scan of `in` on the current stream: out (b, l, h, p) contiguous in x's dtype and, when defined,
// final_states (b, h, p, n) fp32 contiguous; the kernels' scratch comes from torch's caching allocator (reused across
// calls, and owned by a captured CUDA graph's pool like every other tensor). Returns the launch's status.
cudaError_t run_forward(const scan_operands &in, at::Tensor &out, const at::Tensor &final_states, bool dt_softplus,
                        double dt_min, double dt_max);

} // namespace tk_mamba2
