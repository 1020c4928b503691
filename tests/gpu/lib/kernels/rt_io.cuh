// Test-only movement of register tiles and vectors to and from dense row-major global arrays,
// written from the documented register layouts (rt_layout.cuh, rv_layout.cuh) rather than from
// the library's own loads. Tests that push these tiles through hardware instructions with a
// fixed fragment order (mma.sync, movmatrix) therefore also check that the documents are right.
#pragma once

#include "kittens.cuh"

namespace rt_io {
using namespace kittens;

// (row, col) inside a 16x16 base tile of element `half` (0/1) of packed register k, this lane.
template <typename L> __device__ inline int2 base_coord(int k, int half) {
    const int g = laneid() / 4, t = laneid() % 4;
    if constexpr (std::same_as<L, row_l>) return {g + 8 * (k & 1), 2 * t + 8 * (k >> 1) + half};
    else return {2 * t + 8 * (k >> 1) + half, g + 8 * (k & 1)};
}

// Calls f(element reference, row, col) for every element this lane holds.
template <ducks::rt::all RT, typename F> __device__ inline void for_each_element(RT &tile, F &&f) {
    using T = typename RT::T;
    // Fully unrolled so every register index is a constant and the tile stays in registers.
#pragma unroll
    for (int i = 0; i < RT::height; i++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int2 rc = base_coord<typename RT::layout>(k, h);
                    T *pair = reinterpret_cast<T *>(&tile.tiles[i][j].data[k]);
                    f(pair[h], 16 * i + rc.x, 16 * j + rc.y);
                }
}

// src: dense row-major RT::rows x RT::cols array of the tile's element type.
template <ducks::rt::all RT> __device__ inline void load(RT &dst, const typename RT::T *src) {
    for_each_element(dst, [&](typename RT::T &e, int r, int c) { e = src[r * RT::cols + c]; });
}
template <ducks::rt::all RT> __device__ inline void store(typename RT::T *dst, const RT &src) {
    for_each_element(const_cast<RT &>(src), [&](typename RT::T &e, int r, int c) { dst[r * RT::cols + c] = e; });
}

// Vectors. Each element is held by `replicas` lanes: 1 for naive, 4 for ortho (the lanes of a
// quad), 8 for align (one per quad).
template <ducks::rv::all RV> constexpr int replicas() {
    if constexpr (ducks::rv::naive_layout<RV>) return 1;
    else if constexpr (ducks::rv::ortho_layout<RV>) return 4;
    else return 8;
}
// Which replica this lane is, among the lanes holding the same elements.
template <ducks::rv::all RV> __device__ inline int replica_id() {
    if constexpr (ducks::rv::naive_layout<RV>) return 0;
    else if constexpr (ducks::rv::ortho_layout<RV>) return laneid() % 4;
    else return laneid() / 4;
}

// Calls f(element reference, index) for every element this lane holds (naive padding skipped).
template <ducks::rv::all RV, typename F> __device__ inline void for_each_element(RV &v, F &&f) {
    using T = typename RV::T;
    const int g = laneid() / 4, t = laneid() % 4;
#pragma unroll
    for (int i = 0; i < RV::outer_dim; i++)
#pragma unroll
        for (int j = 0; j < RV::inner_dim; j++) {
            T *vals = reinterpret_cast<T *>(&v.data[i][j]);
            if constexpr (ducks::rv::naive_layout<RV>) {
                const int e = 32 * i + laneid();
                if (e < RV::length) f(vals[0], e);
            } else if constexpr (ducks::rv::ortho_layout<RV>) {
                f(vals[0], 16 * i + 8 * j + g);
            } else {
                f(vals[0], 16 * i + 8 * j + 2 * t);
                f(vals[1], 16 * i + 8 * j + 2 * t + 1);
            }
        }
}

// src: dense array of RV::length elements.
template <ducks::rv::all RV> __device__ inline void load(RV &dst, const typename RV::T *src) {
    for_each_element(dst, [&](typename RV::T &e, int i) { e = src[i]; });
}
// dst: replicas<RV>() x RV::length; every lane writes its copy to its replica's row, so the
// test sees whether all copies agree.
template <ducks::rv::all RV> __device__ inline void store_replicas(typename RV::T *dst, const RV &src) {
    const int rep = replica_id<RV>();
    for_each_element(const_cast<RV &>(src), [&](typename RV::T &e, int i) { dst[rep * RV::length + i] = e; });
}

} // namespace rt_io
