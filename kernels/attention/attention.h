// Host entry point of the attention forward kernels. Plain CUDA types only: the torch binding (binding.cpp)
// includes this, the kernels' translation units (one per head dimension) implement it.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace tk_attention {

enum class dtype { bf16, fp16 };

// A (batch, heads, seq, head_dim) tensor in device memory: head_dim is dense, the other three axes may be
// strided (strides in elements, each a multiple of 8 so that TMA sees 16-byte steps).
struct tensor4 {
    const void *ptr;
    int64_t stride_b, stride_h, stride_n;
};

// An output laid out like tensor4 (the binding allocates it in the memory order of the matching input, so
// that a (B, N, H, D) view in gives a (B, N, H, D) tensor out and the reshapes around attention stay views).
struct out4 {
    void *ptr;
    int64_t stride_b, stride_h, stride_n;
};

struct fwd_problem {
    tensor4 q, k, v;
    out4 o;     // (batch, q_heads, q_len, head_dim)
    float *lse; // (batch, q_heads, q_len) fp32, contiguous: natural-log sum of exp of the scaled scores
    int *task_counter; // one int of device memory the launch zeroes and the kernel's blocks draw tasks from
    int batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal; // bottom-right aligned: query i sees keys j <= i + kv_len - q_len
    float scale;
    dtype type;
};

// Launches the forward for head_dim 64 or 128 (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);
cudaError_t forward_d64(const fwd_problem &p, cudaStream_t stream);
cudaError_t forward_d128(const fwd_problem &p, cudaStream_t stream);

// Row tiles of the backward's per-query-row buffers: lse2 and delta are (batch, q_heads, padded_q_len(q_len)).
constexpr int BWD_ROW_PAD = 128;
inline int padded_q_len(int q_len) { return (q_len + BWD_ROW_PAD - 1) / BWD_ROW_PAD * BWD_ROW_PAD; }

struct bwd_problem {
    tensor4 q, k, v;         // as given to the forward
    tensor4 o, dout;         // (batch, q_heads, q_len, head_dim)
    const float *lse;        // the forward's (batch, q_heads, q_len), contiguous
    float *lse2, *delta;     // scratch (batch, q_heads, padded_q_len), written by the preparation
    float *dq_accum;         // fp32 scratch, dq_accum_floats(*this), zeroed by the preparation (layout: below)
    out4 dk, dv;             // (batch, kv_heads, kv_len, head_dim), in the input dtype
    int batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal;
    float scale;
    dtype type;
};

// The backward's fp32 dQ accumulator is dense: (batch, q_heads, head_dim, padded_q_len) where the kernel computes
// dQ transposed (head_dim 64, see attn_bwd_kernel.cuh), else (batch, q_heads, padded_q_len, head_dim). It holds
// dQ / scale: backward_convert_dq applies the softmax scale.
constexpr bool dq_accum_transposed(int head_dim) { return head_dim == 64; }
inline int64_t dq_accum_floats(const bwd_problem &p) {
    return int64_t(p.batch) * p.q_heads * padded_q_len(p.q_len) * p.head_dim;
}

// Prepares lse2 / delta, then runs the backward kernel for head_dim 64 or 128 (dQ lands in dq_accum).
cudaError_t backward(const bwd_problem &p, cudaStream_t stream);
cudaError_t backward_prepare(const bwd_problem &p, cudaStream_t stream);
// Writes dQ = scale * dq_accum in the input dtype, (batch, q_heads, q_len, head_dim) with the given strides.
cudaError_t backward_convert_dq(const bwd_problem &p, out4 dq, cudaStream_t stream);
cudaError_t backward_d64(const bwd_problem &p, cudaStream_t stream);
cudaError_t backward_d128(const bwd_problem &p, cudaStream_t stream);

} // namespace tk_attention
