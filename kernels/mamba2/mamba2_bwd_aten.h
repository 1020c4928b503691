// The Mamba-2 scan's backward as binding.cpp's CUDA kernel runs it once the op's rules have passed: with a gate, the
// forward again for the output before the gate; the backward's kernels (mamba2.h's backward); then tensor operations
// finish what the kernels leave (docs/mamba2.md, "Backward"). The Meta kernel shapes its results the same way.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "mamba2_operands.h"

namespace tk_mamba2 {

// dx, ddt, dA, dB, dC, dD, dz, ddt_bias, d_initial_states: each shaped like its input, or absent_gradient() where the
// input is absent (a schema's outputs are always tensors).
using gradients = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor>;

// An absent input's gradient: an empty (0,) float32 tensor on x's device.
at::Tensor absent_gradient(const at::Tensor &x);

// The gradients of the scan of `a` (on one GPU, batch and heads not zero) from the output's gradient d_out (x's shape
// and dtype) and the final states' d_final ((b, h, p, n) fp32 in any layout, made dense here; or undefined).
gradients backward_aten(const scan_args &a, bool dt_softplus, double dt_min, double dt_max, const at::Tensor &d_out,
                        const at::Tensor &d_final);

} // namespace tk_mamba2
