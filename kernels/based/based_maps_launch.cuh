// TMA maps of the Based kernels' inputs and outputs, cached by pointer, shape and strides: outputs are fresh tensors
// per call, but a training loop cycles them through a few allocator blocks, and encoding a map is a driver call.
#pragma once

#include "based.h"
#include "common/globals_cache.cuh"

#include <cstdint>

namespace tk_based {

template <typename GL> GL output_map(void *ptr, int batch, int heads, int rows, int cols, int64_t sb, int64_t sh, int64_t sn) {
    using T = typename GL::T;
    static tk_kernels::globals_cache<GL, 8> cache;
    return cache.get({uint64_t(ptr), uint64_t(batch), uint64_t(heads), uint64_t(rows), uint64_t(cols), uint64_t(sb),
                      uint64_t(sh), uint64_t(sn)},
                     [&] { return GL(static_cast<T *>(ptr), batch, heads, rows, cols, sb, sh, sn); });
}
template <typename GL> GL output_map(const out4 &t, int batch, int heads, int rows, int cols) {
    return output_map<GL>(t.ptr, batch, heads, rows, cols, t.stride_b, t.stride_h, t.stride_n);
}
template <typename GL> GL input_map(const tensor4 &t, int batch, int heads, int rows, int cols) {
    return output_map<GL>(const_cast<void *>(t.ptr), batch, heads, rows, cols, t.stride_b, t.stride_h, t.stride_n);
}

} // namespace tk_based
