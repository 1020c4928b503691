// The end of a forward row block, the same for both algorithms (based_fwd_kernel.cuh, based_quad_fwd_kernel.cuh):
// each row's den (the sum of its pair weights, which the backward reads) and O / (den + eps) when normalizing.
#pragma once

#include "kittens.cuh"

namespace tk_based {
using namespace kittens;

// den[r]: the full sums of this lane's rows r = 0, 1 (warp rows lane_row(0, r)); rows0: the warp's first row in the
// sequence. den (null: not wanted) + sequence gets each row before len; o is divided by den + eps where normalize.
template <typename RT>
__device__ inline void finish_rows(RT &o, const float (&den)[2], float *den_rows, size_t sequence, int rows0, int len,
                                   bool normalize, float eps) {
    if (den_rows && leads_row()) {
        float *den_out = den_rows + sequence;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = rows0 + lane_row(0, r);
            if (row < len) den_out[row] = den[r];
        }
    }
    if (normalize) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) inv[r] = 1.f / (den[r] + eps);
        for_each_pair([&](pair_pos p, float2 &v) {
            v.x *= inv[p.half];
            v.y *= inv[p.half];
        }, o);
    }
}

} // namespace tk_based
