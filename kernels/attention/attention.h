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

struct fwd_problem {
    tensor4 q, k, v;
    void *o;   // (batch, q_heads, q_len, head_dim), contiguous
    float *lse; // (batch, q_heads, q_len) fp32, contiguous: natural-log sum of exp of the scaled scores
    int batch, q_heads, kv_heads, q_len, kv_len, head_dim;
    bool causal; // bottom-right aligned: query i sees keys j <= i + kv_len - q_len
    float scale;
    dtype type;
};

// Launches the forward for head_dim 64 or 128 (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);
cudaError_t forward_d64(const fwd_problem &p, cudaStream_t stream);
cudaError_t forward_d128(const fwd_problem &p, cudaStream_t stream);

} // namespace tk_attention
