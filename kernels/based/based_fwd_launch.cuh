// Host side of the chunked Based forward: build (or reuse) the kernel's globals, TMA maps included, and launch it on
// the persistent grid (forward_for<DVT>, instantiated in based_fwd.cu).
#pragma once

#include "based.h"
#include "based_fwd_kernel.cuh"
#include "common/globals_cache.cuh"

namespace tk_based {

template <typename K> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using T = typename K::qk_gl::T;
    using G = typename K::globals;
    static tk_kernels::globals_cache<G, 20> cache; // the TMA maps depend on pointers, shapes and strides
    const typename tk_kernels::globals_cache<G, 20>::key_t key = {
        uint64_t(p.q.ptr), uint64_t(p.k.ptr), uint64_t(p.v.ptr), uint64_t(p.o.ptr),
        uint64_t(p.batch), uint64_t(p.heads), uint64_t(p.len), uint64_t(p.value_dim),
        uint64_t(p.q.stride_b), uint64_t(p.q.stride_h), uint64_t(p.q.stride_n),
        uint64_t(p.k.stride_b), uint64_t(p.k.stride_h), uint64_t(p.k.stride_n),
        uint64_t(p.v.stride_b), uint64_t(p.v.stride_h), uint64_t(p.v.stride_n),
        uint64_t(p.o.stride_b), uint64_t(p.o.stride_h), uint64_t(p.o.stride_n)};
    G g = cache.get(key, [&] {
        auto in = [](const void *x) { return reinterpret_cast<T *>(const_cast<void *>(x)); };
        typename K::qk_gl q(in(p.q.ptr), p.batch, p.heads, p.len, K::DK, p.q.stride_b, p.q.stride_h, p.q.stride_n);
        typename K::qk_gl k(in(p.k.ptr), p.batch, p.heads, p.len, K::DK, p.k.stride_b, p.k.stride_h, p.k.stride_n);
        typename K::v_gl v(in(p.v.ptr), p.batch, p.heads, p.len, p.value_dim, p.v.stride_b, p.v.stride_h, p.v.stride_n);
        typename K::v_gl o(static_cast<T *>(p.o.ptr), p.batch, p.heads, p.len, p.value_dim, p.o.stride_b, p.o.stride_h,
                           p.o.stride_n);
        const int chunks = (p.len + K::CHUNK - 1) / K::CHUNK;
        const int value_blocks = (p.value_dim + K::DV_BLOCK - 1) / K::DV_BLOCK;
        return G{q, k, v, o, p.heads, p.len, chunks, p.value_dim, value_blocks, p.batch * p.heads * value_blocks,
                 0.f, 0.f, 0, nullptr, nullptr, nullptr, nullptr, nullptr};
    });
    // Fields that no map encodes are set per call.
    g.scale = p.scale;
    g.eps = p.eps;
    g.normalize = p.normalize ? 1 : 0;
    g.kv0 = p.kv0;
    g.k_sum0 = p.k_sum0;
    g.kv_final = p.kv_final;
    g.k_sum_final = p.k_sum_final;
    g.den = p.den;
    return kittens::lcsf::launch<K>(g, g.num_tasks, stream);
}

template <int DVT> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream) {
    if (p.type == dtype::bf16) return launch_forward<based_fwd<kittens::bf16, DVT>>(p, stream);
    return launch_forward<based_fwd<kittens::half, DVT>>(p, stream);
}

} // namespace tk_based
