// Host side of the filter-gradient kernels (fftconv_dk_kernel.cuh, and the block path's fftconv_long_kernel.cuh):
// globals from a problem, then the launches (from fftconv_dk.cu).
#pragma once

#include "fftconv_dk_kernel.cuh"
#include "fftconv_long_kernel.cuh"
#include "fftconv_slots_launch.cuh"

namespace tk_fftconv {

template <typename T, int L> cudaError_t launch_filter_gradient(const dk_problem &p, cudaStream_t stream) {
    using K = fftconv_dk<T, L>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.dy, p.postgate});
    const typename K::globals g{shape, static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                                static_cast<const T *>(p.dy), static_cast<const T *>(p.postgate), p.dk, p.taps,
                                sqrtf(float(L))};
    return launch_pairs<fftconv_dk_kernel<K>, K>(g, int64_t((p.batch + 1) / 2) * p.heads, stream);
}

template <typename T> cudaError_t launch_long_dk(const long_dk_problem &p, cudaStream_t stream) {
    using K = fftconv_blocks<T>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.dy, p.postgate});
    const int blocks = int(blocks_of(p.len)), kblocks = int(blocks_of(p.taps)), pairs_per_head = (p.batch + 1) / 2;
    const int64_t pairs = int64_t(pairs_per_head) * p.heads;
    const size_t spectra_bytes = long_workspace_bytes(p.batch, p.heads, p.len);
    char *ws = static_cast<char *>(p.workspace);
    auto *xs = reinterpret_cast<uint4 *>(ws), *gs = reinterpret_cast<uint4 *>(ws + spectra_bytes);
    auto *correlations = reinterpret_cast<float2 *>(ws + 2 * spectra_bytes);
    const auto spectra_of = [&](const void *x, const void *gate, uint4 *out) {
        const typename K::globals g{shape, static_cast<const T *>(x), static_cast<const T *>(gate), nullptr, nullptr, out, blocks};
        return launch_pairs<fftconv_blocks_forward<K>, K>(g, pairs * blocks, stream);
    };
    if (cudaError_t e = spectra_of(p.u, p.pregate, xs); e != cudaSuccess) return e;
    if (cudaError_t e = spectra_of(p.dy, p.postgate, gs); e != cudaSuccess) return e;
    const int grid = int((int64_t(p.heads) * BLOCK_FFT + PRODUCT_THREADS - 1) / PRODUCT_THREADS);
    const auto *x32 = reinterpret_cast<const uint32_t *>(xs), *g32 = reinterpret_cast<const uint32_t *>(gs);
    with_held(blocks, [&]<int HELD>() {
        block_correlations<T, HELD><<<grid, PRODUCT_THREADS, 0, stream>>>(x32, g32, correlations, p.heads, pairs_per_head, blocks, kblocks);
    });
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const typename K::dk_globals g{reinterpret_cast<const float4 *>(correlations), p.dk, p.heads, p.taps, kblocks,
                                   sqrtf(float(BLOCK_FFT))};
    return launch_pairs<fftconv_blocks_dk<K>, K>(g, p.heads, stream);
}

template <typename T, int L> struct filter_gradient_launch {
    static cudaError_t run(const dk_problem &p, cudaStream_t stream) { return launch_filter_gradient<T, L>(p, stream); }
};

} // namespace tk_fftconv
