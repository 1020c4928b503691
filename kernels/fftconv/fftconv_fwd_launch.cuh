// Host side of the forward kernels (fftconv_fwd_kernel.cuh, and the block path's fftconv_long_kernel.cuh): globals
// from a problem, then the launches (from fftconv_fwd.cu).
#pragma once

#include "fftconv_fwd_kernel.cuh"
#include "fftconv_long_kernel.cuh"
#include "fftconv_slots_launch.cuh"

namespace tk_fftconv {

template <typename T, int L, bool REVERSED> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using K = fftconv_fwd<T, L, REVERSED>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.postgate, p.y});
    const bool staged = K::STAGED && p.len % 8 == 0 && aligned(p.u, 16) && aligned(p.pregate, 16);
    const typename K::globals g{shape, static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                                static_cast<const T *>(p.postgate), p.k_f, static_cast<T *>(p.y), staged ? 1 : 0};
    return launch_pairs<fftconv_fwd_kernel<K>, K>(g, int64_t((p.batch + 1) / 2) * p.heads, stream);
}

template <typename T, bool REVERSED> cudaError_t launch_long(const long_problem &p, cudaStream_t stream) {
    using K = fftconv_blocks<T, REVERSED>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.postgate, p.y});
    const int blocks = int(blocks_of(p.len)), pairs = (p.batch + 1) / 2 * p.heads;
    const typename K::globals g{shape, static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                                static_cast<const T *>(p.postgate), static_cast<T *>(p.y),
                                static_cast<uint4 *>(p.workspace), blocks};
    if (cudaError_t e = launch_pairs<fftconv_blocks_forward<K>, K>(g, int64_t(pairs) * blocks, stream); e != cudaSuccess) return e;
    const int grid = int((int64_t(p.heads) * BLOCK_FFT + PRODUCT_THREADS - 1) / PRODUCT_THREADS), pairs_per_head = (p.batch + 1) / 2;
    auto *spectra = static_cast<uint32_t *>(p.workspace);
    with_held(blocks, [&]<int HELD>() {
        block_products<T, HELD><<<grid, PRODUCT_THREADS, 0, stream>>>(spectra, p.k_f, p.heads, pairs_per_head, blocks, p.kblocks);
    });
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return launch_pairs<fftconv_blocks_inverse<K>, K>(g, pairs, stream);
}

template <typename T, int L> struct forward_launch {
    static cudaError_t run(const fwd_problem &p, cudaStream_t stream) {
        return p.reversed ? launch_forward<T, L, true>(p, stream) : launch_forward<T, L, false>(p, stream);
    }
};

} // namespace tk_fftconv
