// Online softmax over the rows of a warpgroup's score tile, in the registers wgmma left it in.
//
// A consumer warp holds 16 query rows of S = Q K^T as an rt_fl<16, KV> in the accumulator order of
// rt_layout.cuh: lane (g = lane / 4, t = lane % 4) holds rows g and g + 8, and in base tile j the columns
// 16j + 2t, +1 (pairs 0, 1) and 16j + 2t + 8, +9 (pairs 2, 3); pairs 0 and 2 are row g, pairs 1 and 3 row g + 8.
// The four lanes of a quad share their rows, so a full row reduction is the lane's own values plus two
// xor-shuffles. Everything works in the base-2 domain: each probability is ex2(score * scale * log2(e) - max),
// one FMA and one ex2 instruction.
#pragma once

#include "kittens.cuh"

namespace tk_attention {
using namespace kittens;

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x)); // ex2(-inf) = +0, which is what masking relies on
    return y;
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Running statistics of this lane's two rows (index 0: row g, 1: row g + 8). `max` is the row's reference
// maximum in scaled base-2 units (at most LAZY_SLACK below the true maximum of every score seen so far);
// `sum` is only this lane's share of the row sum against that reference (the quad's four shares are added
// once, at the end), which is valid because every rescaling factor is the same for the whole row.
struct row_stats {
    float max[2], sum[2];
    __device__ inline void reset() {
        max[0] = max[1] = -INFINITY;
        sum[0] = sum[1] = 0.f;
    }
};

// Scores of keys past `last_key[r]` (the last key row r may see: the ragged end of the sequence
// or the causal diagonal) become -inf. `key0` is the key index of column 0.
template <int KV> __device__ inline void mask_scores(rt_fl<16, KV> &s, int key0, const int (&last_key)[2]) {
    const int t = laneid() % 4;
#pragma unroll
    for (int j = 0; j < KV / 16; j++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 &v = s.tiles[0][j].data[k];
            const int col = key0 + 16 * j + 2 * t + ((k & 2) ? 8 : 0);
            const int last = last_key[k & 1];
            if (col > last) v.x = -INFINITY;
            if (col + 1 > last) v.y = -INFINITY;
        }
}

// Folds one tile of raw scores into the statistics: scores -> unnormalised probabilities (in place), and
// `rescale[r]`, the factor that the running output of row r must be multiplied by. The softmax scale (times
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
#pragma unroll
    for (int j = 0; j < KV / 16; j++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 v = s.tiles[0][j].data[k];
            tile_max[k & 1] = fmaxf(tile_max[k & 1], fmaxf(v.x, v.y));
        }
    float base[2];
    bool moved = false;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float raw = quad_max(tile_max[r]);
        float m = fmaxf(st.max[r], raw * scale_log2); // -inf stays -inf: the scale is > 0
        const bool move = m > st.max[r] + LAZY_SLACK;  // -inf + slack = -inf: a first finite max moves
        m = move ? m : st.max[r];
        moved |= move;
        base[r] = m == -INFINITY ? 0.f : m;
        rescale[r] = fast_exp2(st.max[r] - base[r]);
        st.max[r] = m;
    }
    float tile_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < KV / 16; j++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 &v = s.tiles[0][j].data[k];
            v.x = fast_exp2(fmaf(v.x, scale_log2, -base[k & 1]));
            v.y = fast_exp2(fmaf(v.y, scale_log2, -base[k & 1]));
            tile_sum[k & 1] += v.x + v.y;
        }
#pragma unroll
    for (int r = 0; r < 2; r++) st.sum[r] = st.sum[r] * rescale[r] + tile_sum[r];
    return __any_sync(0xffffffffu, moved);
}

// Multiplies row g of an accumulator tile by f[0] and row g + 8 by f[1].
template <int C> __device__ inline void scale_rows(rt_fl<16, C> &o, const float (&f)[2]) {
#pragma unroll
    for (int j = 0; j < C / 16; j++)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 &v = o.tiles[0][j].data[k];
            v.x *= f[k & 1];
            v.y *= f[k & 1];
        }
}

// Element-type conversion of a whole tile (fp32 accumulators -> the 16-bit wgmma operand / output type).
template <typename T, int C> __device__ inline void to_type(rt<T, 16, C> &dst, const rt_fl<16, C> &src) {
#pragma unroll
    for (int j = 0; j < C / 16; j++)
#pragma unroll
        for (int k = 0; k < 4; k++) dst.tiles[0][j].data[k] = convert<typename rt<T, 16, C>::T2>(src.tiles[0][j].data[k]);
}

} // namespace tk_attention
