// Host entry point of the Based linear-attention forward. Plain CUDA types only: the torch binding (binding.cpp)
// includes this, the kernel's translation unit (based_fwd.cu) implements it.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace tk_based {

// The feature dimension of q and k: the Taylor feature map's 1 + 16 + 256 features are built for it.
inline constexpr int FEATURE_DIM = 16;
// The value dimensions the forward is built for (based_fwd.cu instantiates each).
inline constexpr int VALUE_DIMS[] = {64};
constexpr bool supported_value_dim(int d) {
    for (int x : VALUE_DIMS)
        if (x == d) return true;
    return false;
}

enum class dtype { bf16, fp16 };

// A (batch, heads, seq, dim) tensor in device memory: dim is dense, the other three axes may be strided (strides
// in elements, each a multiple of 8 so that TMA sees 16-byte steps).
struct tensor4 {
    const void *ptr;
    int64_t stride_b, stride_h, stride_n;
};

// The output, laid out like tensor4.
struct out4 {
    void *ptr;
    int64_t stride_b, stride_h, stride_n;
};

struct fwd_problem {
    tensor4 q, k; // (batch, heads, len, FEATURE_DIM)
    tensor4 v;    // (batch, heads, len, value_dim)
    out4 o;       // (batch, heads, len, value_dim)
    int batch, heads, len, value_dim;
    float scale;    // multiplies the queries only
    bool normalize; // o = num / (den + eps), else num
    float eps;
    dtype type;
};

// Launches the causal forward for a supported value_dim and len >= 1 (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);
// The forward for one value dimension DV (based_launch.cuh, instantiated in based_fwd.cu).
template <int DV> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream);

} // namespace tk_based
