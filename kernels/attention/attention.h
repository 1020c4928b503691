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
    // Optional, for dQ converted inside the main kernel (head_dim 128): the output, and bwd_sync_ints(*this) ints
    // of scratch that the preparation zeroes. Without them (sync null) backward_convert_dq converts all of dQ.
    out4 dq{};
    int *sync = nullptr;
};

// The backward's fp32 dQ accumulator is dense: (batch, q_heads, head_dim, padded_q_len) where the kernel computes
// dQ transposed (head_dim 64, see attn_bwd_kernel.cuh), else (batch, q_heads, padded_q_len, head_dim). It holds
// dQ / scale: backward_convert_dq applies the softmax scale.
constexpr bool dq_accum_transposed(int head_dim) { return head_dim == 64; }
inline int64_t dq_accum_floats(const bwd_problem &p) {
    return int64_t(p.batch) * p.q_heads * padded_q_len(p.q_len) * p.head_dim;
}

// dQ goes from the accumulator to the output in items of BWD_CONVERT_ROWS query rows of one head. With head_dim 128
// the main kernel's blocks that run out of tasks convert the items of every (batch, kv head) whose tasks have all
// finished, flagging each; backward_convert_dq then converts the items left unflagged. The scratch: one completion
// count per (batch, kv head), the next unclaimed item, one flag per item.
constexpr int BWD_CONVERT_ROWS = 64;
// Keys per backward task. Causal tasks go heaviest first across heads when a head's key blocks fill a round and the
// heads are few (attn_bwd_kernel.cuh's get_task; measured on H100 at 8K and 16K with 16, 32 and 64 heads).
constexpr int BWD_BLOCK_K = 128;
inline bool bwd_heaviest_first(const bwd_problem &p) {
    return p.causal && (p.kv_len + BWD_BLOCK_K - 1) / BWD_BLOCK_K >= 64 && p.batch * p.kv_heads < 32;
}
// Whether the main kernel converts dQ (head_dim 128, scratch given). Not in heaviest-first order: every head's last
// task then runs in the final round, so nothing is complete before the end, and counting the tasks cost 3-5% (16K).
inline bool bwd_converts_in_kernel(const bwd_problem &p) {
    return p.head_dim == 128 && p.sync && p.dq.ptr && !bwd_heaviest_first(p);
}
inline int64_t bwd_convert_items(const bwd_problem &p) {
    return int64_t(p.batch) * p.q_heads * (padded_q_len(p.q_len) / BWD_CONVERT_ROWS);
}
inline int64_t bwd_sync_ints(const bwd_problem &p) { return int64_t(p.batch) * p.kv_heads + 1 + bwd_convert_items(p); }

// Prepares lse2 / delta, then runs the backward kernel for head_dim 64 or 128 (dQ lands in dq_accum).
cudaError_t backward(const bwd_problem &p, cudaStream_t stream);
cudaError_t backward_prepare(const bwd_problem &p, cudaStream_t stream);
// Writes dQ = scale * dq_accum in the input dtype, (batch, q_heads, q_len, head_dim) with the given strides.
cudaError_t backward_convert_dq(const bwd_problem &p, out4 dq, cudaStream_t stream);
cudaError_t backward_d64(const bwd_problem &p, cudaStream_t stream);
cudaError_t backward_d128(const bwd_problem &p, cudaStream_t stream);

} // namespace tk_attention
