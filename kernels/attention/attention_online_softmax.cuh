// Online softmax over the rows of a warpgroup's score tile, in the registers wgmma left it in.
//
// A consumer warp holds 16 query rows of S = Q K^T as an rt_fl<16, KV>. Each lane holds elements of two of those
// rows (lane_row(0, 0) and lane_row(0, 1): elements.cuh), so per-row values are kept two per lane and indexed by
// pair_pos::half; the four lanes that share a pair of rows combine a row with row_lanes_max / row_lanes_sum. Everything works in
// the base-2 domain: each probability is ex2(score * scale * log2(e) - max), one FMA and one ex2 instruction.
#pragma once

#include "kittens.cuh"

namespace tk_attention {
using namespace kittens;

// Running statistics of this lane's two rows (indexed by pair_pos::half). `max` is the row's reference
// maximum in scaled base-2 units (at most LAZY_SLACK below the true maximum of every score seen so far);
// `sum` is only this lane's share of the row sum against that reference (the four row lanes' shares are added
// once, at the end), which is valid because every rescaling factor is the same for the whole row.
struct row_stats {
    float max[2], sum[2];
    __device__ inline void reset() {
        max[0] = max[1] = -INFINITY;
        sum[0] = sum[1] = 0.f;
    }
};

// Folds one tile of raw scores into the statistics: scores -> unnormalised probabilities (in place), and
// `rescale[half]`, the factor that the running output of the lane's row `half` must be multiplied by. The softmax scale (times
// log2 e, > 0) is applied inside each exponent as one FMA, and row maxima are taken on the raw scores
// (scaling by a positive number keeps the maximum where it is). A row that has seen only masked keys keeps
// max = -inf; it is exponentiated against 0 instead, so its probabilities are 0, not NaN.
//
// Lazy rescaling: a row keeps its reference maximum until a tile raises it by more than LAZY_SLACK (base 2),
// so most tiles rescale nothing; probabilities then reach at most 2^LAZY_SLACK, harmless in fp32 sums and
// in the 16-bit P (the final division by the row sum, taken against the same reference, is exact either way).
// Returns whether any row of this warp moved its reference: only then must O be rescaled (warp-uniform, so
// the skipped multiplies cost no divergence).
constexpr float LAZY_SLACK = 8.f;
template <int KV>
__device__ inline bool softmax_step(rt_fl<16, KV> &s, row_stats &st, float scale_log2, float (&rescale)[2]) {
    float tile_max[2] = {-INFINITY, -INFINITY};
    for_each_pair([&](pair_pos p, const float2 &v) { tile_max[p.half] = fmaxf(tile_max[p.half], fmaxf(v.x, v.y)); }, s);
    float base[2];
    bool moved = false;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float raw = row_lanes_max(tile_max[r]);
        float m = fmaxf(st.max[r], raw * scale_log2); // -inf stays -inf: the scale is > 0
        const bool move = m > st.max[r] + LAZY_SLACK;  // -inf + slack = -inf: a first finite max moves
        m = move ? m : st.max[r];
        moved |= move;
        base[r] = m == -INFINITY ? 0.f : m;
        rescale[r] = fast_exp2(st.max[r] - base[r]);
        st.max[r] = m;
    }
    float tile_sum[2] = {0.f, 0.f};
    for_each_pair(
        [&](pair_pos p, float2 &v) {
            v.x = fast_exp2(fmaf(v.x, scale_log2, -base[p.half]));
            v.y = fast_exp2(fmaf(v.y, scale_log2, -base[p.half]));
            tile_sum[p.half] += v.x + v.y;
        },
        s);
#pragma unroll
    for (int r = 0; r < 2; r++) st.sum[r] = st.sum[r] * rescale[r] + tile_sum[r];
    return __any_sync(0xffffffffu, moved);
}

// Multiplies the lane's rows of an accumulator tile by f[half] (lane_row(0, half)).
template <int C> __device__ inline void scale_rows(rt_fl<16, C> &o, const float (&f)[2]) {
    for_each_pair(
        [&](pair_pos p, float2 &v) {
            v.x *= f[p.half];
            v.y *= f[p.half];
        },
        o);
}

} // namespace tk_attention
