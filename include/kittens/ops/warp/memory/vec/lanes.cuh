// Which lane holds which element of a register vector (layouts in rv_layout.cuh), written once
// for every vector load and store. Loads fill every copy a lane holds (ortho and align layouts
// replicate each element over 4 or 8 lanes); stores write each element from one lane only.
#pragma once

#include "../util.cuh"

namespace kittens {
namespace detail {
namespace memory {

// read(i) returns element i already converted to RV::T; it is called only for i < length.
template <ducks::rv::all RV, typename Read> __device__ inline void rv_fill(RV &dst, Read &&read) {
    using T = typename RV::T;
    const int lane = laneid(), g = lane / 4, t = lane % 4;
    if constexpr (ducks::rv::naive_layout<RV>) {
#pragma unroll
        for (int s = 0; s < RV::outer_dim; s++) {
            const int i = s * WARP_THREADS + lane;
            dst.data[s][0] = i < RV::length ? read(i) : base_types::constants<T>::zero();
        }
    } else if constexpr (ducks::rv::ortho_layout<RV>) {
#pragma unroll
        for (int k = 0; k < RV::tiles; k++) {
            dst.data[k][0] = read(k * TILE_DIM + g);
            dst.data[k][1] = read(k * TILE_DIM + g + 8);
        }
    } else {
#pragma unroll
        for (int k = 0; k < RV::tiles; k++) {
#pragma unroll
            for (int half_ = 0; half_ < 2; half_++) {
                const int i = k * TILE_DIM + 2 * t + 8 * half_;
                T *e = reinterpret_cast<T *>(&dst.data[k][half_]);
                e[0] = read(i);
                e[1] = read(i + 1);
            }
        }
    }
}

// write(i, value) stores element i (value has type RV::T); exactly one lane calls it per element.
template <ducks::rv::all RV, typename Write> __device__ inline void rv_drain(const RV &src, Write &&write) {
    using T = typename RV::T;
    const int lane = laneid(), g = lane / 4, t = lane % 4;
    if constexpr (ducks::rv::naive_layout<RV>) {
#pragma unroll
        for (int s = 0; s < RV::outer_dim; s++) {
            const int i = s * WARP_THREADS + lane;
            if (i < RV::length) write(i, src.data[s][0]);
        }
    } else if constexpr (ducks::rv::ortho_layout<RV>) {
        if (t == 0) { // lanes 0, 4, ..., 28 hold rows g and g+8 once each
#pragma unroll
            for (int k = 0; k < RV::tiles; k++) {
                write(k * TILE_DIM + g, src.data[k][0]);
                write(k * TILE_DIM + g + 8, src.data[k][1]);
            }
        }
    } else {
        if (g == 0) { // lanes 0..3 hold every pair once
#pragma unroll
            for (int k = 0; k < RV::tiles; k++) {
#pragma unroll
                for (int half_ = 0; half_ < 2; half_++) {
                    const int i = k * TILE_DIM + 2 * t + 8 * half_;
                    const T *e = reinterpret_cast<const T *>(&src.data[k][half_]);
                    write(i, e[0]);
                    write(i + 1, e[1]);
                }
            }
        }
    }
}

} // namespace memory
} // namespace detail
} // namespace kittens
