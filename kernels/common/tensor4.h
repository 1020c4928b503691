// How the plain-CUDA interfaces of the families describe a (batch, heads, seq, dim) tensor: no torch types, so device
// code builds and is checked without torch.
#pragma once

#include <cstdint>

namespace tk_kernels {

// A (batch, heads, seq, dim) tensor in device memory: dim is dense, the other three axes may be strided (strides in
// elements, each a multiple of 8 so that TMA sees 16-byte steps).
struct tensor4 {
    const void *ptr;
    int64_t stride_b, stride_h, stride_n;
};

// An output laid out like tensor4 (the bindings allocate it in the memory order of the matching input, so that a
// (B, N, H, D) view in gives a (B, N, H, D) tensor out and the reshapes around the op stay views).
struct out4 {
    void *ptr;
    int64_t stride_b, stride_h, stride_n;
};

} // namespace tk_kernels
