// Writing a warp's accumulator rows straight from registers to a (batch, heads, rows, C) tensor whose three
// outer axes may be strided: the kernels' outputs O, dK and dV take the memory order of the matching input.
#pragma once

#include "kittens.cuh"

namespace tk_attention {
using namespace kittens;

// Base pointer and element strides of one (batch, heads, rows, C) output; C is dense.
template <typename T> struct strided_rows {
    T *ptr;
    int64_t stride_b, stride_h, stride_n;
    __device__ inline T *head(int b, int h) const { return ptr + b * stride_b + h * stride_h; }
};

// Writes a warp's 16 accumulator rows (fp32, first row `row`, accumulator order of rt_layout.cuh) to the
// rows of one head, converting on the way; rows at or past `rows` are skipped. Each lane writes 4-byte pairs,
// so a quad covers 16 contiguous bytes of a row per instruction: for outputs small next to the work that made
// them, cheaper than a trip through shared memory.
template <typename T, int C>
__device__ inline void store_rows(T *head, int64_t row_stride, const rt_fl<16, C> &acc, int row, int rows) {
    using T2 = typename rt<T, 16, C>::T2;
    const int col0 = 2 * (laneid() % 4);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int r = row + ((k & 1) ? 8 : 0);
        if (r >= rows) continue;
        T *dst = head + r * row_stride + col0 + ((k & 2) ? 8 : 0);
#pragma unroll
        for (int j = 0; j < C / 16; j++) *reinterpret_cast<T2 *>(dst + 16 * j) = convert<T2>(acc.tiles[0][j].data[k]);
    }
}

} // namespace tk_attention
