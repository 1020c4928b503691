// The plain-CUDA interface of the Based linear-attention kernels: the problems that describe a call and the entry
// points that compute them. No torch types: the torch binding (binding.cpp) and autograd (autograd.cpp) include this,
// the translation units (based_*.cu) implement it.
//
// The recurrent state, as every interface of the family exchanges it (docs/based.md): kv (B, H, Dv, STATE_FEATURES)
// and k_sum (B, H, STATE_FEATURES), fp32, contiguous, features in the order [1, k_0..k_15, k_a k_b / sqrt(2) for
// a, b in 0..15 row-major]. It holds phi of the unscaled keys, so it does not depend on `scale`.
#pragma once

#include "common/dtype.h"
#include "common/tensor4.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace tk_based {

// The feature dimension of q and k: the Taylor feature map's 1 + 16 + 256 features are built for it.
inline constexpr int FEATURE_DIM = 16;
inline constexpr int STATE_FEATURES = 1 + FEATURE_DIM + FEATURE_DIM * FEATURE_DIM; // 273
// The value dimension: any multiple of 16 from 16 to MAX_VALUE_DIM.
inline constexpr int MAX_VALUE_DIM = 128;
constexpr bool supported_value_dim(int d) { return d >= 16 && d <= MAX_VALUE_DIM && d % 16 == 0; }

using tk_kernels::dtype; // bf16 or fp16 (the binding's rules admit no other)
using tk_kernels::out4;
using tk_kernels::tensor4;

// Which kernels compute a forward or backward (docs/based.md, "Two algorithms"): the choice by shape that every
// public call makes (based_configs.cuh), or one of the two forced (the tk_ops_testing ops, for tests and tools).
enum class algorithm_choice { automatic, chunked, quadratic };

// ---------------------------------------------------------------- forward and backward over whole sequences

struct fwd_problem {
    tensor4 q, k; // (batch, heads, len, FEATURE_DIM)
    tensor4 v;    // (batch, heads, len, value_dim)
    out4 o;       // (batch, heads, len, value_dim)
    int batch, heads, len, value_dim;
    float scale;    // multiplies the queries only
    bool normalize; // o = num / (den + eps), else num
    float eps;
    dtype type;
    const float *kv0 = nullptr, *k_sum0 = nullptr; // the initial state, or null for zeros (both or neither)
    float *kv_final = nullptr, *k_sum_final = nullptr; // the state after the last token, or null (both or neither)
    float *den = nullptr; // (batch, heads, len) contiguous: den_i without eps (what the backward divides by), or null
    int *task_counter = nullptr; // 2 ints of device memory, zero at launch and left zero: the quadratic kernels' schedule
    // Forced quadratic: the problem must be one the quadratic kernels can take (no state in or out), or the entry
    // point returns cudaErrorInvalidValue.
    algorithm_choice algorithm = algorithm_choice::automatic;
};

// The causal forward, for a supported value_dim (the caller checked everything else). len == 0 writes the final state
// (a copy of the initial one, or zeros) and nothing else.
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);

struct bwd_problem {
    tensor4 q, k, v, o, d_o; // the forward's inputs and output, and the output's gradient
    out4 dq, dk, dv;         // in the inputs' dtype
    const float *den = nullptr; // the forward's den (normalize only)
    const float *kv0 = nullptr, *k_sum0 = nullptr;               // the forward's initial state, or null
    const float *d_kv_final = nullptr, *d_k_sum_final = nullptr; // gradient of the final state, or null
    float *d_kv0 = nullptr, *d_k_sum0 = nullptr;                 // gradient of the initial state, or null
    int batch, heads, len, value_dim;
    float scale;
    bool normalize;
    float eps;
    dtype type;
    // backward_workspace_bytes(*this) bytes of device memory for the kernels' fp32 scratch (256-byte aligned), or
    // null: backward() then allocates its own on the stream and frees it there.
    void *workspace = nullptr;
    int *task_counter = nullptr; // as fwd_problem's
    algorithm_choice algorithm = algorithm_choice::automatic; // as fwd_problem's (it also sizes the workspace)
};

// Gradients of the forward above for q, k, v and the initial state. len == 0 gives the initial state's gradient (a
// copy of the final state's, or zeros) and nothing else.
cudaError_t backward(const bwd_problem &p, cudaStream_t stream);
// The scratch the backward of p needs (0 when it launches no kernel).
size_t backward_workspace_bytes(const bwd_problem &p);

// The quadratic kernels' own entry points (based_quad_fwd.cu, based_quad_bwd.cu), which forward() and backward() call
// for the problems based_configs.cuh gives them. The backward's two passes read the preparation's rinv and dD
// ((batch, heads, padded_len) fp32 each, padded_len a multiple of 128, zero past the end), which backward() computes
// for either algorithm.
cudaError_t quadratic_forward(const fwd_problem &p, cudaStream_t stream);
cudaError_t quadratic_backward(const bwd_problem &p, const float *rinv, const float *dd, int padded_len,
                               cudaStream_t stream);

// ---------------------------------------------------------------- the decoding step
// One new token per (batch, head) sequence, added to the recurrent state in place, and that token's output read from
// the updated state.

// A (batch, heads, dim) tensor of one token per sequence, with any strides (in elements): the projections of a
// decoding step hand over slices of one fused output, and copying them would cost more than the step reads.
struct token3 {
    const void *ptr;
    int64_t stride_b, stride_h, stride_d;
};

struct step_problem {
    token3 q, k;       // (batch, heads, FEATURE_DIM)
    token3 v;          // (batch, heads, value_dim)
    void *o;           // (batch, heads, value_dim), contiguous, v's dtype
    float *kv, *k_sum; // the state in the layout above, updated in place
    int batch, heads, value_dim;
    float scale;    // multiplies the query only
    bool normalize; // o = num / (den + eps), else num
    float eps;
    dtype type;
};

// kv += v phi(k)^T and k_sum += phi(k), then o = kv phi(scale q) (/ (k_sum . phi(scale q) + eps)): the output sees
// the token itself, as in the forward. For a supported value_dim; the caller checked everything else.
cudaError_t step(const step_problem &p, cudaStream_t stream);

} // namespace tk_based
