// Host side of the FFT convolution kernels: grids and dispatch by FFT size and type (launched from fftconv_fwd.cu and
// fftconv_dk.cu).
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "fftconv.h"
#include "fftconv_dk_kernel.cuh"
#include "fftconv_fwd_kernel.cuh"
#include "fftconv_long_kernel.cuh"

namespace tk_fftconv {

// One block per SM (fewer when there are fewer pairs), each block's slots taking equal shares of the head-major pairs.
template <auto KERNEL, typename K, typename G> cudaError_t launch_pairs(const G &g, int64_t pairs, cudaStream_t stream) {
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    if (cudaError_t e = allow_shared<KERNEL>(dev, K::SHARED_BYTES); e != cudaSuccess) return e;
    KERNEL<<<int(std::min<int64_t>(sms, pairs)), K::THREADS, K::SHARED_BYTES, stream>>>(g);
    return cudaGetLastError();
}

inline bool aligned(const void *ptr, int bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; } // null: yes

// The shape and access widths of rows read or written through the given pointers.
template <typename layout> layout rows_layout(int batch, int heads, int len, std::initializer_list<const void *> rows) {
    bool words = true, vectors = true;
    for (const void *r : rows) {
        words = words && aligned(r, 4);
        vectors = vectors && aligned(r, 16);
    }
    return layout{batch, heads, len, len % 2 == 0 && words, len % 8 == 0 && vectors};
}

template <typename T, int L, bool REVERSED> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using K = fftconv_fwd<T, L, REVERSED>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.postgate, p.y});
    const bool staged = K::STAGED && p.len % 8 == 0 && aligned(p.u, 16) && aligned(p.pregate, 16);
    const typename K::globals g{shape, static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                                static_cast<const T *>(p.postgate), p.k_f, static_cast<T *>(p.y), staged ? 1 : 0};
    return launch_pairs<fftconv_fwd_kernel<K>, K>(g, int64_t((p.batch + 1) / 2) * p.heads, stream);
}

template <typename T, int L> cudaError_t launch_filter_gradient(const dk_problem &p, cudaStream_t stream) {
    using K = fftconv_dk<T, L>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.dy, p.postgate});
    const typename K::globals g{shape, static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                                static_cast<const T *>(p.dy), static_cast<const T *>(p.postgate), p.dk, p.taps,
                                sqrtf(float(L))};
    return launch_pairs<fftconv_dk_kernel<K>, K>(g, int64_t((p.batch + 1) / 2) * p.heads, stream);
}

// Calls f.template operator()<HELD>() with the fewest blocks held in registers that covers `blocks` (2, 4, 8 or
// MAX_BLOCKS, which the block path never exceeds: fewer registers, more threads in flight).
template <typename F> void with_held(int blocks, F &&f) {
    if (blocks <= 2) f.template operator()<2>();
    else if (blocks <= 4) f.template operator()<4>();
    else if (blocks <= 8) f.template operator()<8>();
    else f.template operator()<MAX_BLOCKS>();
}

template <typename T, bool REVERSED> cudaError_t launch_long(const long_problem &p, cudaStream_t stream) {
    using K = fftconv_blocks<T, REVERSED>;
    const auto shape = rows_layout<typename K::layout>(p.batch, p.heads, p.len, {p.u, p.pregate, p.postgate, p.y});
    const int blocks = int(blocks_of(p.len)), pairs = (p.batch + 1) / 2 * p.heads;
    const typename K::globals g{shape, static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                                static_cast<const T *>(p.postgate), static_cast<T *>(p.y),
                                static_cast<uint4 *>(p.workspace), blocks};
    if (cudaError_t e = launch_pairs<fftconv_blocks_forward<K>, K>(g, int64_t(pairs) * blocks, stream); e != cudaSuccess) return e;
    const int grid = int((int64_t(p.heads) * BLOCK_FFT + 255) / 256), pairs_per_head = (p.batch + 1) / 2;
    auto *spectra = static_cast<uint32_t *>(p.workspace);
    with_held(blocks, [&]<int HELD>() {
        block_products<T, HELD><<<grid, 256, 0, stream>>>(spectra, p.k_f, p.heads, pairs_per_head, blocks, p.kblocks);
    });
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    return launch_pairs<fftconv_blocks_inverse<K>, K>(g, pairs, stream);
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
    const int grid = int((int64_t(p.heads) * BLOCK_FFT + 255) / 256);
    const auto *x32 = reinterpret_cast<const uint32_t *>(xs), *g32 = reinterpret_cast<const uint32_t *>(gs);
    with_held(blocks, [&]<int HELD>() {
        block_correlations<T, HELD><<<grid, 256, 0, stream>>>(x32, g32, correlations, p.heads, pairs_per_head, blocks, kblocks);
    });
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const typename K::dk_globals g{reinterpret_cast<const float4 *>(correlations), p.dk, p.heads, p.taps, kblocks,
                                   sqrtf(float(BLOCK_FFT))};
    return launch_pairs<fftconv_blocks_dk<K>, K>(g, p.heads, stream);
}

// Dispatch by the FFT size and the 16-bit type.
template <template <typename, int> typename LAUNCH, typename P> cudaError_t for_each_size(const P &p, cudaStream_t stream) {
    const auto typed = [&]<typename T>() -> cudaError_t {
        switch (p.fft) {
        case 256: return LAUNCH<T, 256>::run(p, stream);
        case 512: return LAUNCH<T, 512>::run(p, stream);
        case 1024: return LAUNCH<T, 1024>::run(p, stream);
        case 2048: return LAUNCH<T, 2048>::run(p, stream);
        case 4096: return LAUNCH<T, 4096>::run(p, stream);
        case 8192: return LAUNCH<T, 8192>::run(p, stream);
        default: return cudaErrorInvalidValue;
        }
    };
    if (p.type == dtype::bf16) return typed.template operator()<kittens::bf16>();
    if (p.type == dtype::fp16) return typed.template operator()<kittens::half>();
    return cudaErrorInvalidValue;
}
template <typename T, int L> struct forward_launch {
    static cudaError_t run(const fwd_problem &p, cudaStream_t stream) {
        return p.reversed ? launch_forward<T, L, true>(p, stream) : launch_forward<T, L, false>(p, stream);
    }
};
template <typename T, int L> struct filter_gradient_launch {
    static cudaError_t run(const dk_problem &p, cudaStream_t stream) { return launch_filter_gradient<T, L>(p, stream); }
};

} // namespace tk_fftconv
