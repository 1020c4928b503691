// Which (query, key) pairs a kernel computes, and the score transform: the band of attention.h (causal, sliding
// windows, the sequence ends) as ranges of rows and keys, the masking of score tiles, the zeroing of shared rows
// outside a packed document, and the softcap.
//
// Plain 32-bit arithmetic: rows and keys are below MAX_SEQ_LEN (2^28, the binding's limit) and the sides at most
// WINDOW_UNLIMITED (2^30), so any row (a block's rows run at most a block past the sequence) plus diag plus or minus a
// side stays inside int32.
#pragma once

#include "attention.h"
#include "kittens.cuh"

namespace tk_attention {
using namespace kittens;

static_assert(int64_t(MAX_SEQ_LEN) * 2 + 1024 + WINDOW_UNLIMITED < (int64_t(1) << 31),
              "row + diag + side must fit int32 (attention_masking.cuh)");

// An inclusive range [first, last]; empty when first > last.
struct index_range {
    int first, last;
    __device__ inline bool empty() const { return first > last; }
};

// The keys that any of the query rows [row0, row1] sees, clipped to [0, kv_len).
__device__ inline index_range keys_seen(int row0, int row1, int q_len, int kv_len, band w) {
    const int diag = kv_len - q_len;
    return {max(0, row0 + diag - w.left), min(kv_len - 1, row1 + diag + w.right)};
}

// The query rows that see any of the keys [key0, key1], clipped to [0, q_len).
__device__ inline index_range rows_seeing(int key0, int key1, int q_len, int kv_len, band w) {
    const int diag = kv_len - q_len;
    return {max(0, key0 - diag - w.right), min(q_len - 1, key1 - diag + w.left)};
}

// Whether a (rows x keys) tile holds a pair outside the band or past kv_len, i.e. needs masking. LEFT = false: the
// band has no left limit (as mask_scores' LEFT), so that edge is not tested.
template <bool LEFT = true>
__device__ inline bool tile_needs_mask(int row0, int row1, int key0, int key1, int q_len, int kv_len, band w) {
    const int diag = kv_len - q_len;
    return key1 >= kv_len || key1 > row0 + diag + w.right || (LEFT && key0 < row1 + diag - w.left);
}

// Whether a (rows x keys) tile holds no visible pair at all.
template <bool LEFT = true>
__device__ inline bool tile_outside_band(int row0, int row1, int key0, int key1, int q_len, int kv_len, band w) {
    const int diag = kv_len - q_len;
    return key0 > row1 + diag + w.right || (LEFT && key1 < row0 + diag - w.left);
}

// Scores of the keys a lane's row lane_row(0, half) does not see (outside keys[half]) become -inf. `key0` is the key
// index of column 0. The left edge is tested only with LEFT (a band limited on the left: a sliding window), and each
// edge only where it cuts into the tile for some row of the warp (a warp-uniform test): a causal diagonal tile pays
// for its right edge alone, and the kernels without windows carry no code for the left edge.
template <bool LEFT, int KV> __device__ inline void mask_scores(rt_fl<16, KV> &s, int key0, const index_range (&keys)[2]) {
    if (LEFT && __any_sync(0xffffffffu, max(keys[0].first, keys[1].first) > key0)) {
        for_each_pair(
            [&](pair_pos p, float2 &v) {
                const int col = key0 + p.col, first = keys[p.half].first;
                if (col < first) v.x = -INFINITY;
                if (col + 1 < first) v.y = -INFINITY;
            },
            s);
    }
    for_each_pair(
        [&](pair_pos p, float2 &v) {
            const int col = key0 + p.col, last = keys[p.half].last;
            if (col > last) v.x = -INFINITY;
            if (col + 1 > last) v.y = -INFINITY;
        },
        s);
}

// Rows [first, last) of a shared tile become zeros, written by the THREADS threads of a group (`thread`: the caller's
// index in it). Packed documents need this where a tile loaded whole reaches past its document: masking sets P (or
// dS) to 0 there, but the tensor cores still multiply the rows outside the document, and 0 x NaN is NaN.
// The swizzle permutes 16-byte units within a row, so rows first .. last - 1 of a column chunk are one contiguous run
// of units, written without it. Unit u of a chunk always goes to thread u mod THREADS, whatever the range, so the
// same address is only ever written by the same thread: calls for different tiles of one buffer need no ordering
// among the group's threads, and compute-sanitizer's racecheck sees no two threads writing one address.
template <int THREADS, ducks::st::all ST> __device__ inline void zero_rows(ST &t, int first, int last, int thread) {
    static_assert(THREADS > 0 && (THREADS & (THREADS - 1)) == 0, "zero_rows: a power-of-two group of threads");
    constexpr int ROW_UNITS = ST::swizzle_bytes / 16;
    const int begin = first * ROW_UNITS, end = last * ROW_UNITS;
    const int u0 = begin + ((thread - begin) & (THREADS - 1)); // this thread's first unit at or after begin
    const uint32_t base = smem_addr(t.data);
#pragma unroll
    for (int k = 0; k < ST::chunks; k++) {
#pragma unroll 1
        for (int u = u0; u < end; u += THREADS) fill_shared_16(base + uint32_t(k * ST::chunk_bytes + 16 * u), 0);
    }
}

// tanh by the hardware's approximation (relative error about 2^-11): the softcap costs one more MUFU op per score
// next to the softmax's exp2.
__device__ inline float fast_tanh(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Softcapped scores, up to the factor softcap: s -> tanh(s * inv_cap), where inv_cap = scale / softcap (the softmax
// scale folded in). The softmax then runs with scale softcap (times log2 e): softcap * tanh(scale * s / softcap).
template <int C> __device__ inline void softcap_scores(rt_fl<16, C> &s, float inv_cap) {
    for_each_pair(
        [&](pair_pos, float2 &v) {
            v.x = fast_tanh(v.x * inv_cap);
            v.y = fast_tanh(v.y * inv_cap);
        },
        s);
}

} // namespace tk_attention
