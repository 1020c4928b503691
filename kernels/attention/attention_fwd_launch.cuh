// Host side of the attention forward: build (or reuse) a kernel's globals, TMA maps included, launch it on the
// persistent grid, and pick the kernel for a head dimension (forward_for<D>, instantiated in attention_fwd_d<D>.cu).
#pragma once

#include <algorithm>
#include <cmath>

#include "attention.h"
#include "attention_fwd_kernel.cuh"
#include "attention_launch.cuh"
#include "common/globals_cache.cuh"

namespace tk_attention {

// How many (batch, query head) pairs the task order runs side by side (see attn_fwd::get_task): as many as keep
// their K and V (shared by the query heads of one kv head) within about a quarter of the 50 MB L2, in whole
// kv-head groups; causal groups hold at least 24 query heads. Smaller and larger budgets both measured slower, and
// causal groups of only a few heads lose although their K and V fit L2 (docs/attention.md has the sweep).
inline int heads_per_group(const fwd_problem &p) {
    const int group = p.q_heads / p.kv_heads;
    const int64_t kv_bytes = int64_t(p.kv_len) * p.head_dim * 2 * 2; // K and V of one kv head, 16-bit
    const int64_t budget = int64_t(12) << 20;
    int64_t kv_heads = budget / (kv_bytes > 0 ? kv_bytes : 1);
    if (kv_heads < 1) kv_heads = 1;
    if (p.window.causal()) kv_heads = std::max<int64_t>(kv_heads, (24 + group - 1) / group);
    const int64_t all = int64_t(p.batch) * p.q_heads;
    const int64_t heads = kv_heads * group;
    return int(heads < all ? heads : all);
}

// Causal, D = 64: whether the kernel with narrow tail tiles (variant::narrow_tail) runs. Each consumer's diagonal
// tile, one in every kv_len / KV, then costs what its visible keys need, while the longer kernel costs a little on
// every other tile: it wins while diagonal tiles are a large share, up to 4096 keys.
inline bool narrow_causal_tails(const fwd_problem &p) {
    return !p.varlen && p.window.causal() && p.softcap == 0.f && fwd_narrow_tails_fit(p.head_dim) && p.kv_len <= 4096;
}

template <typename K> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using T = typename K::q_gl::T;
    using G = typename K::globals;
    // The TMA maps depend on pointers, shapes and strides; the task layout (q_shift, head groups, the bound on packed
    // documents' blocks) on the band and the document count too.
    static tk_kernels::globals_cache<G, 20> cache;
    typename tk_kernels::globals_cache<G, 20>::key_t key = {
        uint64_t(p.q.ptr), uint64_t(p.k.ptr), uint64_t(p.v.ptr), uint64_t(p.window.left),
        uint64_t(p.batch), uint64_t(p.q_heads), uint64_t(p.kv_heads), uint64_t(p.q_len), uint64_t(p.kv_len),
        uint64_t(p.q.stride_b), uint64_t(p.q.stride_h), uint64_t(p.q.stride_n),
        uint64_t(p.k.stride_b), uint64_t(p.k.stride_h), uint64_t(p.k.stride_n),
        uint64_t(p.v.stride_b), uint64_t(p.v.stride_h), uint64_t(p.v.stride_n), uint64_t(p.window.right),
        uint64_t(p.varlen ? p.docs.count : -1)};
    G g = cache.get(key, [&] {
        auto ptr = [](const void *x) { return reinterpret_cast<T *>(const_cast<void *>(x)); };
        typename K::q_gl q(ptr(p.q.ptr), p.batch, p.q_heads, p.q_len, p.head_dim, p.q.stride_b, p.q.stride_h, p.q.stride_n);
        typename K::kv_gl k(ptr(p.k.ptr), p.batch, p.kv_heads, p.kv_len, p.head_dim, p.k.stride_b, p.k.stride_h, p.k.stride_n);
        typename K::kv_gl v(ptr(p.v.ptr), p.batch, p.kv_heads, p.kv_len, p.head_dim, p.v.stride_b, p.v.stride_h, p.v.stride_n);
        // Packed documents: a bound on their blocks (each adds at most one partial block); get_task reads the count.
        const int q_blocks = (p.q_len + K::BLOCK_Q - 1) / K::BLOCK_Q + (p.varlen ? p.docs.count : 0);
        const int ragged_rows = p.q_len % K::BLOCK_Q; // causal: a one-consumer last block moves to the front
        const bool shift = !p.varlen && p.window.causal() && ragged_rows > 0 && ragged_rows <= K::Q_ROWS;
        const int q_shift = shift ? K::BLOCK_Q - K::Q_ROWS : 0;
        return G{q, k, v, q, nullptr, p.q_heads, p.q_heads / p.kv_heads, p.q_len, p.kv_len, q_blocks,
                 (p.kv_len + K::KV - 1) / K::KV, p.batch * p.q_heads * q_blocks, q_shift, heads_per_group(p),
                 nullptr, p.window, 0.f, 0.f};
    });
    g.o = output_map<typename K::q_gl>(p.o, p.batch, p.q_heads, p.q_len, p.head_dim);
    // Fields that no map encodes (the LSE, the scale) are set per call.
    g.lse = p.lse;
    // With a softcap the softmax sees tanh(scale / softcap * S) at scale softcap (attention_masking.cuh).
    g.scale_log2 = (p.softcap > 0.f ? p.softcap : p.scale) * kittens::LOG2E;
    g.inv_cap = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    g.task_counter = p.task_counter;
    g.docs = p.docs;
    return kittens::lcsf::launch<K>(g, g.num_tasks, stream);
}

// The forward kernel for element type T and head dimension D, by band, softcap and packing.
template <typename T, int D, bool SOFTCAP, bool VARLEN> cudaError_t forward_variant(const fwd_problem &p, cudaStream_t stream) {
    if (!p.window.limited()) return launch_forward<attn_fwd<T, D, variant{.softcap = SOFTCAP, .varlen = VARLEN}>>(p, stream);
    if constexpr (fwd_narrow_tails_fit(D) && !SOFTCAP && !VARLEN) {
        if (narrow_causal_tails(p)) return launch_forward<attn_fwd<T, D, variant{.banded = true, .narrow_tail = true}>>(p, stream);
    }
    if (p.window.left < WINDOW_UNLIMITED) {
        if constexpr (fwd_config_for(D).kv_window > 0) {
            // A short window: narrower key tiles, and each consumer's tile cut by the band's right edge as the
            // narrowest product that holds its keys (a large share of a short window's tiles).
            if (p.window.right < WINDOW_UNLIMITED && int64_t(p.window.left) + p.window.right < fwd_config_for(D).short_window_keys)
                return launch_forward<attn_fwd<T, D, variant{.banded = true, .left_edge = true, .softcap = SOFTCAP, .narrow_tail = true,
                                                             .varlen = VARLEN, .short_window = true}>>(p, stream);
        }
        return launch_forward<attn_fwd<T, D, variant{.banded = true, .left_edge = true, .softcap = SOFTCAP, .varlen = VARLEN}>>(p, stream);
    }
    return launch_forward<attn_fwd<T, D, variant{.banded = true, .softcap = SOFTCAP, .varlen = VARLEN}>>(p, stream);
}
template <int D> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream) {
    return with_kernel_types(p, [&]<typename T, bool SOFTCAP, bool VARLEN>() {
        return forward_variant<T, D, SOFTCAP, VARLEN>(p, stream);
    });
}

} // namespace tk_attention
