// What the launches of both directions share: the TMA maps of the outputs, and the choice of a kernel by the
// problem's element type, softcap and packing.
#pragma once

#include "attention.h"
#include "common/globals_cache.cuh"
#include "kittens.cuh"

namespace tk_attention {

// The TMA map of a kernel output (batch, heads, rows, D) in the memory order the binding chose. Outputs are fresh
// tensors on every call, but a training loop cycles them through a few allocator blocks, so the maps are cached
// by pointer, shape and strides (a hit builds the same map: see globals_cache.cuh).
template <typename GL> GL output_map(const out4 &t, int batch, int heads, int rows, int head_dim) {
    using T = typename GL::T;
    static tk_kernels::globals_cache<GL, 8> cache;
    return cache.get({uint64_t(t.ptr), uint64_t(batch), uint64_t(heads), uint64_t(rows), uint64_t(t.stride_b),
                      uint64_t(t.stride_h), uint64_t(t.stride_n), uint64_t(head_dim)},
                     [&] { return GL(static_cast<T *>(t.ptr), batch, heads, rows, head_dim, t.stride_b, t.stride_h, t.stride_n); });
}

// launch.template operator()<T, SOFTCAP, VARLEN>() for the problem's element type T, softcap and packing: the
// compile-time choices that the forward and backward kernels both take (the band's are each direction's own).
template <typename Problem, typename Launch> cudaError_t with_kernel_types(const Problem &p, Launch &&launch) {
    const auto packed = [&]<typename T, bool SOFTCAP>() {
        if (p.varlen) return launch.template operator()<T, SOFTCAP, true>();
        return launch.template operator()<T, SOFTCAP, false>();
    };
    const auto capped = [&]<typename T>() {
        if (p.softcap > 0.f) return packed.template operator()<T, true>();
        return packed.template operator()<T, false>();
    };
    if (p.type == dtype::bf16) return capped.template operator()<kittens::bf16>();
    return capped.template operator()<kittens::half>();
}

} // namespace tk_attention
