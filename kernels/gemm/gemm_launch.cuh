// Host plumbing shared by the GEMM entry points: build (or reuse) a kernel's globals from a problem (gemm.h) and
// launch it, and the SM count the configuration picks (gemm_configs.cuh) are made for.
#pragma once

#include "common/globals_cache.cuh"
#include "gemm.h"
#include "gemm_kernel.cuh"

namespace tk_gemm {

// The current device's SM count (132, an H100's, where it cannot be read).
inline int device_sms() {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 132;
}

// Kernel G's globals for these operands and output, with no bias and no scales: the tensor maps are encoded once per
// (pointers, sizes) and reused.
template <typename G> typename G::globals gemm_globals(const void *a, const void *b, void *c, int M, int N, int K) {
    using TI = typename G::a_gl::T;
    using TO = typename G::c_gl::T;
    using cache_t = tk_kernels::globals_cache<typename G::globals, 6>;
    static cache_t cache;
    const typename cache_t::key_t key = {uint64_t(a), uint64_t(b), uint64_t(c), uint64_t(M), uint64_t(N), uint64_t(K)};
    return cache.get(key, [&] {
        auto *pa = reinterpret_cast<TI *>(const_cast<void *>(a));
        auto *pb = reinterpret_cast<TI *>(const_cast<void *>(b));
        typename G::a_gl ga = G::A_KMAJOR ? typename G::a_gl(pa, 1, 1, M, K) : typename G::a_gl(pa, 1, 1, K, M);
        typename G::b_gl gb = G::B_KMAJOR ? typename G::b_gl(pb, 1, 1, N, K) : typename G::b_gl(pb, 1, 1, K, N);
        typename G::c_gl gc(reinterpret_cast<TO *>(c), 1, 1, M, N);
        return typename G::globals{ga, gb, gc, (M + G::BM - 1) / G::BM, (N + G::BN - 1) / G::BN,
                                   (K + G::BK - 1) / G::BK, 1, (K + G::BK - 1) / G::BK, nullptr, nullptr,
                                   typename G::bias_gl(nullptr, 1, 1, 1, N)};
    });
}

// G over every task of g, its contraction cut into `splits` ranges of whole K-slices, none empty.
template <typename G> cudaError_t launch_tasks(typename G::globals g, int splits, cudaStream_t stream) {
    g.k_per_split = (g.k_iters + splits - 1) / splits;
    g.splits = (g.k_iters + g.k_per_split - 1) / g.k_per_split;
    return launch<G>(g, g.tiles_m * g.tiles_n * g.splits, stream);
}

// The bias is set per call and stays out of the globals' key: no TMA map encodes it.
template <typename G> cudaError_t launch_gemm(const gemm_problem &p, cudaStream_t stream) {
    // The resident B panel holds RESIDENT_SLICES K-slices: a longer contraction would load past it.
    if (G::RESIDENT_SLICES && (p.K + G::BK - 1) / G::BK > G::RESIDENT_SLICES) return cudaErrorInvalidValue;
    typename G::globals g = gemm_globals<G>(p.a, p.b, p.c, p.M, p.N, p.K);
    using TO = typename G::c_gl::T;
    g.bias.raw_ptr = static_cast<TO *>(const_cast<void *>(p.bias));
    return launch_tasks<G>(g, p.splits, stream);
}

// The scales are set per call and stay out of the key: no TMA map encodes them, and a training step's fp8 scales
// are new tensors each step, whose addresses need not repeat (keyed on them, the operands' maps would be re-encoded).
template <typename G> cudaError_t launch_gemm(const scaled_mm_problem &p, cudaStream_t stream) {
    typename G::globals g = gemm_globals<G>(p.a, p.b, p.c, p.M, p.N, p.K);
    g.scale_a = p.scale_a;
    g.scale_b = p.scale_b;
    // Vector scales: one value of scale_a for every row (step 0), or one per row (step 1).
    g.scale_a_step = p.scaling == scales::per_row_and_column ? 1 : 0;
    if constexpr (G::VECTOR_SCALES) g.col_scale = typename G::scale_gl(const_cast<float *>(p.scale_b), 1, 1, 1, p.N);
    return launch_tasks<G>(g, 1, stream);
}

} // namespace tk_gemm
