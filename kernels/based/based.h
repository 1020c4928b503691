// Host entry point of the Based linear-attention forward. Plain CUDA types only: the torch binding (binding.cpp)
// includes this, the kernel's translation unit (based_fwd.cu) implements it.
#pragma once

#include "common/tensor4.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

namespace tk_based {

// The feature dimension of q and k: the Taylor feature map's 1 + 16 + 256 features are built for it.
inline constexpr int FEATURE_DIM = 16;
// The value dimensions the forward is built for (based_fwd.cu instantiates each; every dispatch goes through
// with_value_dim). The fp32 state lives in one warpgroup's registers, which holds it up to 64 (based_fwd_kernel.cuh).
inline constexpr int VALUE_DIMS[] = {16, 32, 48, 64};
constexpr bool supported_value_dim(int d) {
    for (int x : VALUE_DIMS)
        if (x == d) return true;
    return false;
}

// f(std::integral_constant<int, DV>{}) for the listed DV equal to d; cudaErrorInvalidValue for any other d.
template <std::size_t I = 0, typename F> cudaError_t with_value_dim(int d, F &&f) {
    if constexpr (I == std::size(VALUE_DIMS)) {
        return cudaErrorInvalidValue;
    } else {
        if (d == VALUE_DIMS[I]) return f(std::integral_constant<int, VALUE_DIMS[I]>{});
        return with_value_dim<I + 1>(d, std::forward<F>(f));
    }
}

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
};

// Launches the causal forward for a supported value_dim and len >= 1 (the caller checked everything else).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);
// The forward for one value dimension DV (based_launch.cuh, instantiated in based_fwd.cu).
template <int DV> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream);

} // namespace tk_based
