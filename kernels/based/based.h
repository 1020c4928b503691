// Host entry points of the Based linear-attention kernels. Plain CUDA types only: the torch binding (binding.cpp)
// and autograd (autograd.cpp) include this, the kernels' translation units implement it.
//
// The recurrent state, as every interface of the family exchanges it (docs/based.md): kv (B, H, Dv, STATE_FEATURES)
// and k_sum (B, H, STATE_FEATURES), fp32, contiguous, features in the order [1, k_0..k_15, k_a k_b / sqrt(2) for
// a, b in 0..15 row-major]. It holds phi of the unscaled keys, so it does not depend on `scale`.
#pragma once

#include "common/tensor4.h"

#include <cuda_runtime.h>

namespace tk_based {

// The feature dimension of q and k: the Taylor feature map's 1 + 16 + 256 features are built for it.
inline constexpr int FEATURE_DIM = 16;
inline constexpr int STATE_FEATURES = 1 + FEATURE_DIM + FEATURE_DIM * FEATURE_DIM; // 273
// The value dimension: any multiple of 16 from 16 to MAX_VALUE_DIM.
inline constexpr int MAX_VALUE_DIM = 128;
constexpr bool supported_value_dim(int d) { return d >= 16 && d <= MAX_VALUE_DIM && d % 16 == 0; }

enum class dtype { bf16, fp16 };

using tk_kernels::out4;
using tk_kernels::tensor4;

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
    // Sequences up to this length without a state take the quadratic kernels (based_quad.h); 0: always chunked. The
    // binding passes the process setting, read once per call so that every decision of the call agrees.
    int quadratic_max_len = 0;
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
    int quadratic_max_len = 0;   // as fwd_problem's (it also sizes the workspace: backward_workspace_bytes)
};

// Gradients of the forward above for q, k, v and the initial state.
cudaError_t backward(const bwd_problem &p, cudaStream_t stream);
// The scratch the backward of p needs (0 when it launches no kernel).
size_t backward_workspace_bytes(const bwd_problem &p);

} // namespace tk_based
