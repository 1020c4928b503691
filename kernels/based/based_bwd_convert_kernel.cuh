// The chunked Based backward with value splits: dq and dk from the fp32 accumulators the split tasks added into.
#pragma once

#include "based.h"
#include "kittens.cuh"

#include <cstdint>

namespace tk_based {
using namespace kittens;

// SPLIT: dq and dk from their fp32 accumulators (batch, heads, padded len, 16) to the outputs, 8 columns per thread.
template <typename T> struct grad_convert_args {
    const float *acc;
    T *out;
    int64_t sb, sh, sn;
    int heads, len, padded_len;
    int64_t items; // batch * heads * len * 2
};

template <typename T> __global__ void based_bwd_convert(const __grid_constant__ grad_convert_args<T> a) {
    using T2 = typename base_types::packing<T>::packed_type;
    const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (item >= a.items) return;
    const int half_row = int(item & 1);
    const int64_t row = item >> 1; // over (batch, heads, len)
    const int bh = int(row / a.len), i = int(row - int64_t(bh) * a.len);
    const int b = bh / a.heads, h = bh - b * a.heads;
    const float4 *src = reinterpret_cast<const float4 *>(a.acc + (int64_t(bh) * a.padded_len + i) * FEATURE_DIM + 8 * half_row);
    const float4 x = src[0], y = src[1];
    T2 packed[4] = {convert<T2>(float2{x.x, x.y}),
                    convert<T2>(float2{x.z, x.w}),
                    convert<T2>(float2{y.x, y.y}),
                    convert<T2>(float2{y.z, y.w})};
    T *dst = a.out + b * a.sb + h * a.sh + int64_t(i) * a.sn + 8 * half_row;
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(packed);
}

} // namespace tk_based
