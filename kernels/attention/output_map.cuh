// The TMA map of a kernel output (batch, heads, rows, D) in the memory order the binding chose. Outputs are fresh
// tensors on every call, but a training loop cycles them through a few allocator blocks, so the maps are cached
// by pointer, shape and strides (a hit builds the same map: see globals_cache.cuh).
#pragma once

#include "attention.h"
#include "common/globals_cache.cuh"

namespace tk_attention {

template <typename GL> GL output_map(const out4 &t, int batch, int heads, int rows, int head_dim) {
    using T = typename GL::T;
    static tk_kernels::globals_cache<GL, 8> cache;
    return cache.get({uint64_t(t.ptr), uint64_t(batch), uint64_t(heads), uint64_t(rows), uint64_t(t.stride_b),
                      uint64_t(t.stride_h), uint64_t(t.stride_n), uint64_t(head_dim)},
                     [&] { return GL(static_cast<T *>(t.ptr), batch, heads, rows, head_dim, t.stride_b, t.stride_h, t.stride_n); });
}

} // namespace tk_attention
