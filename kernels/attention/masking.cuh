// Which (query, key) pairs a kernel computes, and the score transform: the band of attention.h (causal, sliding
// windows, the sequence ends) as ranges of rows and keys, the masking of score tiles, and the softcap.
//
// Ranges are worked out in 64-bit integers: a row plus diag plus a side at WINDOW_UNLIMITED fits 32 bits, but the
// sums over whole tasks (a block's last row, one more side) need not.
#pragma once

#include "attention.h"
#include "kittens.cuh"

namespace tk_attention {
using namespace kittens;

// An inclusive range [first, last]; empty when first > last.
struct index_range {
    int first, last;
    __device__ inline bool empty() const { return first > last; }
};

// The keys that any of the query rows [row0, row1] sees, clipped to [0, kv_len).
__device__ inline index_range keys_seen(int row0, int row1, int q_len, int kv_len, band w) {
    const int64_t diag = int64_t(kv_len) - q_len;
    const int64_t first = max(int64_t(0), row0 + diag - w.left), last = min(int64_t(kv_len) - 1, row1 + diag + w.right);
    return {int(min(first, int64_t(kv_len))), int(max(last, int64_t(-1)))};
}

// The query rows that see any of the keys [key0, key1], clipped to [0, q_len).
__device__ inline index_range rows_seeing(int key0, int key1, int q_len, int kv_len, band w) {
    const int64_t diag = int64_t(kv_len) - q_len;
    const int64_t first = max(int64_t(0), key0 - diag - w.right), last = min(int64_t(q_len) - 1, key1 - diag + w.left);
    return {int(min(first, int64_t(q_len))), int(max(last, int64_t(-1)))};
}

// Whether a (rows x keys) tile holds a pair outside the band or past kv_len, i.e. needs masking.
__device__ inline bool tile_needs_mask(int row0, int row1, int key0, int key1, int q_len, int kv_len, band w) {
    const int64_t diag = int64_t(kv_len) - q_len;
    return key1 >= kv_len || key1 > row0 + diag + w.right || key0 < row1 + diag - w.left;
}

// Whether a (rows x keys) tile holds no visible pair at all.
__device__ inline bool tile_outside_band(int row0, int row1, int key0, int key1, int q_len, int kv_len, band w) {
    const int64_t diag = int64_t(kv_len) - q_len;
    return key0 > row1 + diag + w.right || key1 < row0 + diag - w.left;
}

// Scores of the keys a lane's row lane_row(0, half) does not see (outside keys[half]) become -inf. `key0` is the key
// index of column 0.
template <int KV> __device__ inline void mask_scores(rt_fl<16, KV> &s, int key0, const index_range (&keys)[2]) {
    for_each_pair(
        [&](pair_pos p, float2 &v) {
            const int col = key0 + p.col;
            const index_range k = keys[p.half];
            if (col < k.first || col > k.last) v.x = -INFINITY;
            if (col + 1 < k.first || col + 1 > k.last) v.y = -INFINITY;
        },
        s);
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
