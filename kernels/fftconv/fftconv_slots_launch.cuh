// Host side of the slot kernels (the engine's forward, filter-gradient and block-path kernels): the grid, the
// shared-memory opt-in, the rows' access widths, and the dispatch by FFT size, 16-bit type and blocks held
// (fftconv_fwd_launch.cuh, fftconv_dk_launch.cuh).
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "fftconv.h"
#include "kittens.cuh"

namespace tk_fftconv {

// One block per SM (fewer when there are fewer pairs), each block's slots taking equal shares of the head-major pairs.
template <auto KERNEL, typename K, typename G> cudaError_t launch_pairs(const G &g, int64_t pairs, cudaStream_t stream) {
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    if (cudaError_t e = kittens::opt_in_shared<KERNEL>(dev, K::SHARED_BYTES); e != cudaSuccess) return e;
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

// Calls f.template operator()<HELD>() with HELD = held_blocks(blocks) (fftconv_configs.cuh).
template <typename F> void with_held(int blocks, F &&f) {
    switch (held_blocks(blocks)) {
    case 2: return f.template operator()<2>();
    case 4: return f.template operator()<4>();
    case 8: return f.template operator()<8>();
    default: return f.template operator()<MAX_BLOCKS>();
    }
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

} // namespace tk_fftconv
