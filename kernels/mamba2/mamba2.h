// Host entry points of the Mamba-2 SSD (chunked state-space scan) kernels. Plain CUDA types only: the torch binding
// (binding.cpp) includes this, the kernels' translation units implement it.
//
// Semantics: mamba_ssm's mamba_chunk_scan_combined (docs/mamba2.md; python/tk_ops/reference/mamba2.py is the float64
// reference). Per batch row, head and token, with the (p x n) state h:
//     dt_t = clamp(softplus(dt_t + dt_bias) or dt_t + dt_bias, dt_min, dt_max)
//     h_t  = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,   y_t = h_t C_t + D x_t,   then y_t * silu(z_t)
#pragma once

#include "common/tensor4.h"

#include <cstddef>
#include <cuda_runtime.h>

namespace tk_mamba2 {

// The head dimension p (x's last) and the state dimension n (B's and C's last) the kernels are built for.
constexpr bool supported_dim(int d) { return d == 64 || d == 128; }
// The chunk sizes the op accepts (mamba_ssm's usual ones). The result does not depend on the chunk size, so the
// kernels walk the sequence in chunks of their own (KERNEL_CHUNK tokens; docs/mamba2.md says why).
constexpr bool supported_chunk_size(long c) { return c == 64 || c == 128 || c == 256; }
inline constexpr int KERNEL_CHUNK = 64;

enum class dtype { bf16, fp16 };

using tk_kernels::out4;
using tk_kernels::tensor4;

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
    dtype type;
    // workspace_bytes(*this) bytes of device memory, 256-byte aligned: the processed dt, its cumulative sums and the
    // padded sequence ids, handed from the first kernel to the second.
    void *workspace = nullptr;
};

// The scratch forward() needs.
size_t workspace_bytes(const fwd_problem &p);

// The forward scan, for supported head_dim and state_dim, len >= 1 (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);

} // namespace tk_mamba2
