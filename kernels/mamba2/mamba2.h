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
// Above it mamba_ssm's softplus of dt is the identity (torch's default threshold).
inline constexpr float SOFTPLUS_THRESHOLD = 20.f;

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

// The backward's kernels: the dt pass again, then the two walks (mamba2_bwd_kernel.cuh). What they leave is finished
// by the binding with tensor operations: the dt chain and the reverse cumulative sum of dL/dcum, the casts of the fp32
// sums. `f` holds the forward's inputs (its out, final_states and workspace unused).
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

} // namespace tk_mamba2
