// Per-chunk pieces shared by the Mamba-2 scans (the forward, and the two walks of the backward): a chunk is
// KERNEL_CHUNK tokens, its 64 rows spread over a consumer warpgroup as wgmma accumulators are (warp w: rows 16 w ..,
// each lane two of them), and per token the prepared dt, the log-decay cum from the chunk start and the sequence id
// sit in shared vectors next to the tiles.
//
// The decay between tokens j <= i of one sequence is exp(cum_i - cum_j); between sequences there is none (the pair
// drops out). Factors are applied by selection, never by multiplying with 0: a dropped term must not turn an
// overflowing decay into NaN.
#pragma once

#include "kittens.cuh"
#include "mamba2.h"

namespace tk_mamba2::chunk {
using namespace kittens;

using vec = sv_fl<KERNEL_CHUNK>;

__device__ inline int seq_at(const vec &seq, bool has_seq, int t) { return has_seq ? __float_as_int(seq.data[t]) : 0; }

// exp(x) of a log-decay: one multiply and one SFU instruction (weights below about 1e-38 flush to 0).
__device__ inline float decay_exp(float x) { return fast_exp2(x * LOG2E); }

// The chunk rows (tokens) this lane holds in a 64-row accumulator of its warpgroup: lane_row(0, r) of its warp.
struct lane_rows {
    int t[2];
    float cum[2];
    int seq[2];
};
__device__ inline lane_rows rows_of_lane(const vec &cum, const vec &seq, bool has_seq) {
    lane_rows r;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        r.t[k] = warpgroup::warp_row0() + lane_row(0, k);
        r.cum[k] = cum.data[r.t[k]];
        r.seq[k] = seq_at(seq, has_seq, r.t[k]);
    }
    return r;
}

// Per row of this lane, the weights that carry state across the chunk's ends: from_prev = exp(cum) for a token of the
// sequence the carried state belongs to (else 0), to_end = exp(cum_last - cum) for a token of the chunk's last
// sequence (else 0), and to_end_dt = to_end dt, the weight of its x in the state the chunk leaves. Every walk takes
// them from here: the backward's carried terms cancel only if both walks weight a token identically.
struct row_weights {
    float from_prev[2], to_end[2], to_end_dt[2];
};
__device__ inline row_weights weights_of_rows(const lane_rows &r, const vec &dt, float cum_last, int prev_seq,
                                              int seq_last) {
    row_weights w;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const float to_end = decay_exp(cum_last - r.cum[k]);
        w.from_prev[k] = r.seq[k] == prev_seq ? decay_exp(r.cum[k]) : 0.f;
        w.to_end_dt[k] = r.seq[k] == seq_last ? to_end * dt.data[r.t[k]] : 0.f;
        w.to_end[k] = r.seq[k] == seq_last ? to_end : 0.f;
    }
    return w;
}

// The pair weights of a (rows, columns) product of one chunk, v *= exp(c_row - c_col) f, kept where keep(row, col)
// holds and both tokens are of one sequence, else 0 (FORWARD: c = cum, f = dt of the column, keep = col <= row; else
// the transpose, c = -cum, f = f_row, keep = col >= row). Every element computes its weight and a selection drops the
// masked ones: with no branch around the exponential the compiler interleaves the elements' dependent chains. A
// masked weight may overflow; it is never multiplied into a kept value. HAS_SEQ is a template argument so that the
// common case carries no id comparisons at all.
template <bool FORWARD, bool HAS_SEQ, typename RT>
__device__ inline void pair_decay(RT &s, const vec &cum, const vec &dt, const vec &seq, const lane_rows &r,
                                  const float (&f)[2]) {
    constexpr float sign = FORWARD ? 1.f : -1.f;
    const float c_row[2] = {sign * r.cum[0] * LOG2E, sign * r.cum[1] * LOG2E};
    for_each_pair([&](pair_pos p, float2 &v) {
        const int i = warpgroup::warp_row0() + p.row, j = p.col;
        const float2 cj = *reinterpret_cast<const float2 *>(&cum.data[j]);
        bool ok0 = FORWARD ? j <= i : j >= i, ok1 = FORWARD ? j + 1 <= i : j + 1 >= i;
        if constexpr (HAS_SEQ) {
            ok0 = ok0 && seq_at(seq, true, j) == r.seq[p.half];
            ok1 = ok1 && seq_at(seq, true, j + 1) == r.seq[p.half];
        }
        float f0 = f[p.half], f1 = f[p.half];
        if constexpr (FORWARD) {
            const float2 dj = *reinterpret_cast<const float2 *>(&dt.data[j]);
            f0 = dj.x;
            f1 = dj.y;
        }
        const float w0 = fast_exp2(fmaf(cj.x, -sign * LOG2E, c_row[p.half])) * f0;
        const float w1 = fast_exp2(fmaf(cj.y, -sign * LOG2E, c_row[p.half])) * f1;
        v.x = ok0 ? v.x * w0 : 0.f;
        v.y = ok1 ? v.y * w1 : 0.f;
    }, s);
}

// The forward's intra-chunk weights on a (rows i) x (columns j) product: v *= exp(cum_i - cum_j) dt_j where j <= i in
// the same sequence, else 0.
template <typename RT>
__device__ inline void causal_decay(RT &s, const vec &cum, const vec &dt, const vec &seq, bool has_seq,
                                    const lane_rows &r) {
    constexpr float unused[2] = {0.f, 0.f};
    if (has_seq) pair_decay<true, true>(s, cum, dt, seq, r, unused);
    else pair_decay<true, false>(s, cum, dt, seq, r, unused);
}

// The transposed weights, for the backward's products indexed (row t, column s) with t the earlier token:
// v *= exp(cum_s - cum_t) f_t where s >= t in the same sequence, else 0.
template <typename RT>
__device__ inline void anticausal_decay(RT &s, const vec &cum, const vec &seq, bool has_seq, const lane_rows &r,
                                        const float (&f)[2]) {
    if (has_seq) pair_decay<false, true>(s, cum, cum, seq, r, f);
    else pair_decay<false, false>(s, cum, cum, seq, r, f);
}

// The carried state (H^T or G^T) across the chunk, from one end to the other: decayed by exp(cum_last), or dropped when
// the chunk's last token is in another sequence than the token before the chunk.
template <typename RT> __device__ inline void carry_across(RT &state, float cum_last, int seq_last, int prev_seq) {
    const bool carry = seq_last == prev_seq;
    const float decay = decay_exp(cum_last);
    for_each_pair([&](pair_pos, float2 &v) {
        v.x = carry ? v.x * decay : 0.f;
        v.y = carry ? v.y * decay : 0.f;
    }, state);
}

// Row k of this lane times f[k]; a zero factor drops the row.
template <typename RT> __device__ inline void scale_rows(RT &t, const float (&f)[2]) {
    for_each_pair([&](pair_pos p, float2 &v) {
        v.x = f[p.half] != 0.f ? v.x * f[p.half] : 0.f;
        v.y = f[p.half] != 0.f ? v.y * f[p.half] : 0.f;
    }, t);
}

// A weighted pair w v of 16-bit values, rounded to 16 bits once (fp32 product), as packed 16 bits or back in fp32:
// every walk that needs the same weighted rows computes them this way, so that they agree bit for bit.
template <typename T2> __device__ inline T2 weighted_bits(const T2 &v, float w) {
    float2 f = base_types::convertor<float2, T2>::convert(v);
    f.x *= w;
    f.y *= w;
    return base_types::convertor<T2, float2>::convert(f);
}
template <typename T2> __device__ inline float2 weighted_pair(const T2 &v, float w) {
    return base_types::convertor<float2, T2>::convert(weighted_bits(v, w));
}

// diag(w) src for a 16-bit register tile (weighted_bits per pair).
template <typename RT> __device__ inline RT weighted_rows(const RT &src, const float (&w)[2]) {
    using T2 = typename RT::T2;
    RT weighted;
    for_each_pair([&](pair_pos p, const T2 &v, T2 &o) { o = weighted_bits(v, w[p.half]); }, src, weighted);
    return weighted;
}

// dst = weighted_rows(src, w) in shared memory, an operand for a later product; the writers' fence is included, the
// barrier before the product is the caller's.
template <typename ST, typename RT> __device__ inline void store_weighted_rows(ST &dst, const RT &src, const float (&w)[2]) {
    warpgroup::store(dst, weighted_rows(src, w));
    async_proxy_fence();
}

// Columns 64 k .. 64 k + 63 of a row-layout accumulator, as a tile of their own (a renaming of registers).
template <int K, int ROWS, int COLS> __device__ inline rt_fl<ROWS, 64> column_block(const rt_fl<ROWS, COLS> &t) {
    static_assert(COLS % 64 == 0 && K >= 0 && K < COLS / 64, "column_block: 64-column blocks of the tile");
    rt_fl<ROWS, 64> out;
#pragma unroll
    for (int i = 0; i < rt_fl<ROWS, 64>::height; i++)
#pragma unroll
        for (int j = 0; j < rt_fl<ROWS, 64>::width; j++) out.tiles[i][j] = t.tiles[i][j + K * rt_fl<ROWS, 64>::width];
    return out;
}

// Sum over the four lanes that hold one row's columns (the lanes of an accumulator row differ in bits 0 and 1).
__device__ inline float row_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

// Adds the column sums of a warpgroup's 64 x 64 accumulator into dst[0 .. 63]: each warp sums its 16 rows (its lanes
// with one column pair differ in bits 2..4), then one lane per column pair adds the warp's sums.
__device__ inline void add_column_sums(float *dst, const rt_fl<TILE_DIM, 64> &q) {
    constexpr int W = rt_fl<TILE_DIM, 64>::width;
    float2 part[2 * W];
#pragma unroll
    for (int j = 0; j < W; j++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float2 a = q.tiles[0][j].data[2 * h], b = q.tiles[0][j].data[2 * h + 1]; // the lane's two rows
            part[2 * j + h] = make_float2(a.x + b.x, a.y + b.y);
        }
    }
#pragma unroll
    for (int k = 0; k < 2 * W; k++) {
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            part[k].x += __shfl_xor_sync(0xffffffffu, part[k].x, o);
            part[k].y += __shfl_xor_sync(0xffffffffu, part[k].y, o);
        }
        if (laneid() < 4) {
            const int col = 16 * (k >> 1) + 8 * (k & 1) + 2 * laneid();
            atomicAdd(dst + col, part[k].x);
            atomicAdd(dst + col + 1, part[k].y);
        }
    }
}

} // namespace tk_mamba2::chunk
