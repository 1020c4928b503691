// Host entry points of the Mamba-2 kernels: the SSD chunked scan (forward and backward) and the decoding step. Plain
// CUDA types only: the torch side (binding.cpp, mamba2_bwd_aten.cpp) includes this, the kernels' translation units
// implement it.
//
// The scan: mamba_ssm's mamba_chunk_scan_combined (docs/mamba2.md; python/tk_ops/reference/mamba2.py is the float64
// reference). Per batch row, head and token, with the (p x n) state h:
//     dt_t = clamp(softplus(dt_t + dt_bias) or dt_t + dt_bias, dt_min, dt_max)
//     h_t  = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,   y_t = h_t C_t + D x_t,   then y_t * silu(z_t)
//
// The step: one new token per (batch, head) sequence, folded into the fp32 state in place, and that token's output read
// from the updated state (mamba_ssm's selective_state_update for heads). Per batch row b and head i (reading group
// i / (heads / groups) of B and C):
//     dt = dt + dt_bias, then softplus when asked (the identity above its threshold); no clamp, as in mamba_ssm's step
//     h  = exp(dt A) h + dt x B^T,   y = h C + D x,   then y * silu(z)
// It reads and writes the state once and does a few FLOPs per element: it is bound by memory bandwidth, so it is a
// plain CUDA kernel with 16-byte accesses to the state, not a tile kernel.
#pragma once

#include "common/dtype.h"
#include "common/tensor4.h"

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace tk_mamba2 {

using tk_kernels::dtype;
using tk_kernels::out4;
using tk_kernels::tensor4;

// The head dimension p (x's last) and the state dimension n (B's and C's last) the scan kernels are built for.
constexpr bool supported_dim(int d) { return d == 64 || d == 128; }
// The scan kernels walk the sequence in chunks of KERNEL_CHUNK tokens, whatever chunk size the op was given: the
// result does not depend on it (docs/mamba2.md says why this one).
inline constexpr int KERNEL_CHUNK = 64;
// Above it mamba_ssm's softplus of dt is the identity (torch's default threshold), in the scan and in the step.
inline constexpr float SOFTPLUS_THRESHOLD = 20.f;

// ---------------------------------------------------------------- the scan

struct fwd_problem {
    // x and z (b, l, h, p) and the output viewed as (b, h, l, p); B and C (b, l, g, n) viewed as (b, g, l, n). Strides
    // in elements, each a multiple of 8.
    tensor4 x, B, C;
    tensor4 z{};  // z.ptr null: no gate
    out4 out;
    // fp32, contiguous: dt (b, l, h), A (h,), D (h,) or (h, p) or null, dt_bias (h,) or null.
    const float *dt, *A;
    const float *D = nullptr;
    bool D_per_channel = false;
    const float *dt_bias = nullptr;
    bool dt_softplus = false;
    float dt_min = 0.f, dt_max = __builtin_huge_valf();
    const float *initial_states = nullptr; // (b, h, p, n) fp32 contiguous, or null for zeros
    const int *seq_idx = nullptr;          // (b, l) int32 contiguous, or null
    float *final_states = nullptr;         // (b, h, p, n) fp32 contiguous, or null
    int batch, len, heads, groups, head_dim, state_dim;
    dtype type;                            // bf16 or fp16
    // workspace_bytes(*this) bytes of device memory, 256-byte aligned: the processed dt, its cumulative sums and the
    // padded sequence ids, handed from the first kernel to the second.
    void *workspace = nullptr;
};

// The scratch forward() needs.
size_t workspace_bytes(const fwd_problem &p);

// The forward scan, for supported head_dim and state_dim, len >= 1 (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);

// The backward's kernels: the dt pass again, then the two walks (mamba2_bwd_kernel.cuh). What they leave is finished
// on the host side with tensor operations (mamba2_bwd_aten.cpp): the dt chain and the reverse cumulative sum of
// dL/dcum, the casts of the fp32 sums. `f` holds the forward's inputs (its out, final_states and workspace unused).
struct bwd_problem {
    fwd_problem f;
    tensor4 dy;                        // (b, h, l, p) view: the gradient of the scan before D and the gate
    void *dx;                          // (b, l, h, p) contiguous, x's dtype
    const float *d_final_states = nullptr;  // (b, h, p, n) or null
    float *d_initial_states = nullptr;      // (b, h, p, n) or null
    float *dD = nullptr;                    // (h, p) fp32, zeroed, or null
    // fp32, zeroed: dB and dC as (b, g, padded_len, n), and per (b, h, padded_len) dL/dcum and the token sums
    // x . (g B) (padded_len below).
    float *dB, *dC, *d_cum, *x_dot;
    // workspace_bytes(f) bytes: the prepared dt, cum and ids, as in the forward.
    void *workspace;
};

// Tokens per (batch, head) row of the backward's per-token buffers: the length rounded up to whole kernel chunks.
inline int padded_len(int len) { return (len + KERNEL_CHUNK - 1) / KERNEL_CHUNK * KERNEL_CHUNK; }

cudaError_t backward(const bwd_problem &p, cudaStream_t stream);

// ---------------------------------------------------------------- the decoding step

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
    dtype type;                        // bf16 or fp16
};

// The step, for a supported state_dim and head_dim >= 1; the caller checked everything else.
cudaError_t step(const step_problem &p, cudaStream_t stream);

} // namespace tk_mamba2
