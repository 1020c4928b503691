// Host side of the attention backward's main kernel: build (or reuse) a kernel's globals, TMA maps included,
// launch attn_bwd_kernel on the persistent grid, and pick the kernel for a head dimension (backward_for<D>,
// instantiated in attention_bwd_d<D>.cu).
#pragma once

#include "attention.h"
#include "attention_bwd_kernel.cuh"
#include "attention_launch.cuh"
#include "common/globals_cache.cuh"

namespace tk_attention {

template <typename K> cudaError_t launch_backward(const bwd_problem &p, cudaStream_t stream) {
    using T = typename K::q_gl::T;
    using G = typename K::globals;
    static_assert(BWD_ROW_PAD % K::BLOCK_Q == 0, "the row buffers must be padded to whole query tiles");
    const bwd_scratch_layout scratch = bwd_scratch(p);
    // Keyed exactly by what the TMA maps encode: pointers, shapes and the strides of every mapped tensor.
    // (The document count of packed documents sizes the row buffers and bounds the tasks.)
    static tk_kernels::globals_cache<G, 25> cache;
    const typename tk_kernels::globals_cache<G, 25>::key_t key = {
        uint64_t(p.q.ptr), uint64_t(p.k.ptr), uint64_t(p.v.ptr), uint64_t(p.dout.ptr), uint64_t(p.lse2),
        uint64_t(p.delta), uint64_t(p.dq_accum), uint64_t(p.batch), uint64_t(p.q_heads), uint64_t(p.kv_heads),
        uint64_t(p.q_len), uint64_t(p.kv_len),
        uint64_t(p.q.stride_b), uint64_t(p.q.stride_h), uint64_t(p.q.stride_n),
        uint64_t(p.k.stride_b), uint64_t(p.k.stride_h), uint64_t(p.k.stride_n),
        uint64_t(p.v.stride_b), uint64_t(p.v.stride_h), uint64_t(p.v.stride_n),
        uint64_t(p.dout.stride_b), uint64_t(p.dout.stride_h), uint64_t(p.dout.stride_n),
        uint64_t(p.varlen ? p.docs.count : -1)};
    G g = cache.get(key, [&] {
        auto ptr = [](const void *x) { return reinterpret_cast<T *>(const_cast<void *>(x)); };
        const int D = p.head_dim, rows = scratch.rows;
        typename K::q_gl q(ptr(p.q.ptr), p.batch, p.q_heads, p.q_len, D, p.q.stride_b, p.q.stride_h, p.q.stride_n);
        typename K::q_gl dout(ptr(p.dout.ptr), p.batch, p.q_heads, p.q_len, D, p.dout.stride_b, p.dout.stride_h,
                              p.dout.stride_n);
        typename K::kv_gl k(ptr(p.k.ptr), p.batch, p.kv_heads, p.kv_len, D, p.k.stride_b, p.k.stride_h, p.k.stride_n);
        typename K::kv_gl v(ptr(p.v.ptr), p.batch, p.kv_heads, p.kv_len, D, p.v.stride_b, p.v.stride_h, p.v.stride_n);
        typename K::row_gl lse2(p.lse2, 1, p.batch, p.q_heads, rows);
        typename K::row_gl delta(p.delta, 1, p.batch, p.q_heads, rows);
        const int64_t head_floats = int64_t(rows) * D; // the dense accumulator, see attention.h
        typename K::dq_gl dq = K::DQ_TRANSPOSED
            ? typename K::dq_gl(p.dq_accum, p.batch, p.q_heads, D, rows, p.q_heads * head_floats, head_floats, rows)
            : typename K::dq_gl(p.dq_accum, p.batch, p.q_heads, p.varlen ? rows : p.q_len, D, p.q_heads * head_floats,
                                head_floats, D);
        // Packed documents: a bound on their key blocks (each adds at most one partial block); get_task reads the count.
        const int k_blocks = (p.kv_len + K::BLOCK_K - 1) / K::BLOCK_K + (p.varlen ? p.docs.count : 0);
        const bool heaviest_first = bwd_heaviest_first(p);
        return G{q, dout, k, v, lse2, delta, dq, k, v, p.kv_heads, p.q_heads / p.kv_heads, p.q_len, p.kv_len,
                 rows / K::BLOCK_Q, k_blocks, p.batch * p.kv_heads * k_blocks, heaviest_first, p.window, 0.f, 0.f, 0.f};
    });
    g.dk = output_map<typename K::kv_gl>(p.dk, p.batch, p.kv_heads, p.kv_len, p.head_dim);
    g.dv = output_map<typename K::kv_gl>(p.dv, p.batch, p.kv_heads, p.kv_len, p.head_dim);
    // Fields that no TMA map encodes are set per call.
    g.scale = p.scale;
    g.window = p.window;
    g.docs = p.docs;
    g.heaviest_first = bwd_heaviest_first(p);
    g.scale_log2 = (p.softcap > 0.f ? p.softcap : p.scale) * kittens::LOG2E; // as the forward's (attention_masking.cuh)
    g.inv_cap = p.softcap > 0.f ? p.scale / p.softcap : 0.f;
    typename K::dq_conversion cv{};
    if (K::CONVERT_IN_KERNEL && bwd_converts_in_kernel(p)) {
        cv.sync = bwd_sync_of(p);
        cv.accum = p.dq_accum;
        cv.out = static_cast<T *>(p.dq.ptr);
        cv.stride_b = p.dq.stride_b;
        cv.stride_h = p.dq.stride_h;
        cv.stride_n = p.dq.stride_n;
        cv.items = int(scratch.convert_items);
        cv.items_per_head = scratch.items_per_head;
    }
    g.convert = cv;
    return kittens::lcsf::launch_kernel<K, &attn_bwd_kernel<K>, kittens::lcsf::shared_bytes<K>()>(g, g.num_tasks, stream);
}

template <typename T, int D, bool SOFTCAP, bool VARLEN> cudaError_t backward_variant(const bwd_problem &p, cudaStream_t stream) {
    if (p.window.limited())
        return launch_backward<attn_bwd<T, D, variant{.banded = true, .softcap = SOFTCAP, .varlen = VARLEN}>>(p, stream);
    return launch_backward<attn_bwd<T, D, variant{.softcap = SOFTCAP, .varlen = VARLEN}>>(p, stream);
}
template <int D> cudaError_t backward_for(const bwd_problem &p, cudaStream_t stream) {
    return with_kernel_types(p, [&]<typename T, bool SOFTCAP, bool VARLEN>() {
        return backward_variant<T, D, SOFTCAP, VARLEN>(p, stream);
    });
}

} // namespace tk_attention
