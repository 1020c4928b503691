// The ops' 16-bit element types (bf16, fp16) to and from float, for the kernels written in plain CUDA (the decoding
// steps), and one element of a strided (batch, heads, dim) token view read as float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tk_kernels {

__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ T from_float(float x);
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }

// Element (b, h, d) of a token view holding T elements: any struct with ptr and stride_b, stride_h, stride_d (in
// elements).
template <typename T, typename Token> __device__ inline float load(const Token &t, int b, int h, int d) {
    return to_float(static_cast<const T *>(t.ptr)[b * t.stride_b + h * t.stride_h + d * t.stride_d]);
}

} // namespace tk_kernels
