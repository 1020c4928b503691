// Host plumbing shared by the GEMM entry points: build (or reuse) a kernel's globals and launch it.
#pragma once

#include "common/globals_cache.cuh"
#include "gemm_kernel.cuh"

namespace tk_gemm {

template <typename G>
cudaError_t launch_gemm(const void *a, const void *b, void *c, int M, int N, int K, const float *scale_a,
                        const float *scale_b, cudaStream_t stream, const void *bias = nullptr, int splits = 1,
                        int scale_a_step = 0) {
    using TI = typename G::a_gl::T;
    using TO = typename G::c_gl::T;
    // The resident B panel holds RESIDENT_SLICES K-slices: a longer contraction would load past it.
    if (G::RESIDENT_SLICES && (K + G::BK - 1) / G::BK > G::RESIDENT_SLICES) return cudaErrorInvalidValue;
    using cache_t = tk_kernels::globals_cache<typename G::globals, 6>;
    static cache_t cache;
    const typename cache_t::key_t key = {uint64_t(a), uint64_t(b), uint64_t(c), uint64_t(M), uint64_t(N), uint64_t(K)};
    typename G::globals g = cache.get(key, [&] {
        auto *pa = reinterpret_cast<TI *>(const_cast<void *>(a));
        auto *pb = reinterpret_cast<TI *>(const_cast<void *>(b));
        typename G::a_gl ga = G::A_KMAJOR ? typename G::a_gl(pa, 1, 1, M, K) : typename G::a_gl(pa, 1, 1, K, M);
        typename G::b_gl gb = G::B_KMAJOR ? typename G::b_gl(pb, 1, 1, N, K) : typename G::b_gl(pb, 1, 1, K, N);
        typename G::c_gl gc(reinterpret_cast<TO *>(c), 1, 1, M, N);
        return typename G::globals{ga, gb, gc, (M + G::BM - 1) / G::BM, (N + G::BN - 1) / G::BN,
                                   (K + G::BK - 1) / G::BK, 1, (K + G::BK - 1) / G::BK, nullptr, nullptr,
                                   typename G::bias_gl(nullptr, 1, 1, 1, N)};
    });
    // No TMA map encodes these, so they are set per call and stay out of the key (a training step's fp8 scales are
    // new tensors each step, whose addresses need not repeat: keyed on them, the operands' maps would be re-encoded).
    g.bias.raw_ptr = static_cast<TO *>(const_cast<void *>(bias));
    g.scale_a = scale_a;
    g.scale_b = scale_b;
    g.scale_a_step = scale_a_step;
    if constexpr (G::VECTOR_SCALES) g.col_scale = typename G::scale_gl(const_cast<float *>(scale_b), 1, 1, 1, N);
    // Contraction ranges of whole K-slices, none empty.
    g.k_per_split = (g.k_iters + splits - 1) / splits;
    g.splits = (g.k_iters + g.k_per_split - 1) / g.k_per_split;
    return launch<G>(g, g.tiles_m * g.tiles_n * g.splits, stream);
}

} // namespace tk_gemm
