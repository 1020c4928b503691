// The Based backward's preparation (both algorithms): per row, the two numbers the passes read instead of o and den.
#pragma once

#include "based.h"
#include "kittens.cuh"

#include <cstdint>

namespace tk_based {
using namespace kittens;

// rinv = 1 / (den + eps) and dD = -rinv (dO . o) when normalizing, rinv = 1 and dD = 0 otherwise,
// both 0 on the padding rows up to chunks * BWD_CHUNK; (batch, heads, padded len) dense.
template <typename T> struct row_prep_args {
    const T *o, *dout;
    int64_t o_sb, o_sh, o_sn, d_sb, d_sh, d_sn;
    const float *den;
    float *rinv, *dd;
    int heads, len, padded_len, value_dim;
    int64_t rows; // batch * heads * padded_len
    float eps;
    bool normalize;
};

// Eight lanes per row, 16 bytes (8 values) of o and dO per lane and step: o and dO are TMA-readable views (16-byte
// aligned base and row strides, contiguous value columns), so every load is a full vector.
inline constexpr int BWD_ROW_LANES = 8;
template <typename T> __global__ void based_bwd_rows(const __grid_constant__ row_prep_args<T> a) {
    using T2 = typename base_types::packing<T>::packed_type;
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / BWD_ROW_LANES;
    const int lane = threadIdx.x % BWD_ROW_LANES;
    const bool exists = row < a.rows;
    int bh = 0, i = a.len;
    if (exists) {
        bh = int(row / a.padded_len);
        i = int(row - int64_t(bh) * a.padded_len);
    }
    float dot = 0.f;
    if (a.normalize && i < a.len) {
        const int b = bh / a.heads, h = bh - b * a.heads;
        const T *o = a.o + b * a.o_sb + h * a.o_sh + int64_t(i) * a.o_sn;
        const T *d = a.dout + b * a.d_sb + h * a.d_sh + int64_t(i) * a.d_sn;
        for (int c = 8 * lane; c < a.value_dim; c += 8 * BWD_ROW_LANES) {
            const uint4 ov = *reinterpret_cast<const uint4 *>(o + c), dv = *reinterpret_cast<const uint4 *>(d + c);
            const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 x = base_types::convertor<float2, T2>::convert(detail::memory::bitcast<T2>(ow[k]));
                const float2 y = base_types::convertor<float2, T2>::convert(detail::memory::bitcast<T2>(dw[k]));
                dot = fmaf(x.x, y.x, dot);
                dot = fmaf(x.y, y.y, dot);
            }
        }
    }
    // The eight lanes of a row are aligned in the warp (blockDim is a multiple of 32).
#pragma unroll
    for (int s = BWD_ROW_LANES / 2; s > 0; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
    if (!exists || lane != 0) return;
    float rinv = 0.f, dd = 0.f;
    if (i < a.len) {
        rinv = 1.f;
        if (a.normalize) {
            rinv = 1.f / (a.den[int64_t(bh) * a.len + i] + a.eps);
            dd = -rinv * dot;
        }
    }
    a.rinv[row] = rinv;
    a.dd[row] = dd;
}

} // namespace tk_based
