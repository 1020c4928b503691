// Host entry point of the Mamba-2 decoding step: one new token per (batch, head) sequence, folded into the fp32 state
// in place, and that token's output read from the updated state (mamba_ssm's selective_state_update for heads). Plain
// CUDA types only: step_binding.cpp includes it, mamba2_step.cu implements it.
//
// Per batch row b and head i (reading group i / (heads / groups) of B and C), with the (p x n) state h:
//     dt = dt + dt_bias, then softplus when asked (the identity above 20); no clamp, as in mamba_ssm's step
//     h  = exp(dt A) h + dt x B^T,   y = h C + D x,   then y * silu(z)
//
// The step reads and writes the state once and does a few FLOPs per element: it is bound by memory bandwidth, so it
// is a plain CUDA kernel with 16-byte accesses to the state, not a tile kernel.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "mamba2.h"

namespace tk_mamba2 {

// The state dimensions the step kernel is built for: a row of the state is then a whole number of float4s that a
// power-of-two group of lanes shares evenly.
constexpr bool step_supported_state_dim(long n) { return n == 16 || n == 32 || n == 64 || n == 128 || n == 256; }

// A (batch, heads-or-groups, dim) tensor of one token per sequence, with any strides (in elements): the decoding step
// of a model hands over slices of one fused projection, and copying them would cost more than the step itself.
struct step_token {
    const void *ptr;
    int64_t stride_b, stride_h, stride_d;
};

struct step_problem {
    float *state;                      // (batch, heads, head_dim, state_dim) fp32, updated in place
    int64_t state_stride[4];           // its strides in elements, any
    step_token x;                      // (batch, heads, head_dim), x's dtype
    step_token z;                      // like x; z.ptr null: no gate
    step_token B, C;                   // (batch, groups, state_dim), x's dtype
    const void *dt;                    // (batch, heads), fp32 or x's dtype (dt_is_float)
    int64_t dt_stride_b, dt_stride_h;
    bool dt_is_float;
    const float *A;                    // (heads,) contiguous
    const float *D = nullptr;          // (heads,) or (heads, head_dim) contiguous, or null
    bool D_per_channel = false;
    const float *dt_bias = nullptr;    // (heads,) contiguous, or null
    bool dt_softplus = false;
    void *y;                           // (batch, heads, head_dim) contiguous, x's dtype
    int batch, heads, groups, head_dim, state_dim;
    dtype type;
};

// The step, for a supported state_dim and head_dim >= 1; the caller checked everything else.
cudaError_t step(const step_problem &p, cudaStream_t stream);

} // namespace tk_mamba2
