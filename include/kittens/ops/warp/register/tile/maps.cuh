// Element-wise maps over register tiles: every lane applies a base_ops functor to the packed
// pairs it holds, so 16-bit tiles use the paired (bf16x2 / half2) instructions.
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {
template <ducks::rt::all D, ducks::rt::all S> constexpr bool same_tile_shape_layout =
    D::rows == S::rows && D::cols == S::cols && std::same_as<typename D::layout, typename S::layout>;
} // namespace detail::reg

// Every element of dst set to `value` (a scalar of the tile's type).
template <ducks::rt::all RT> __device__ inline void fill(RT &dst, const typename RT::T &value) {
    const auto v = base_types::constants<typename RT::T2>::pair(value);
#pragma unroll
    for (int i = 0; i < RT::height; i++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++) dst.tiles[i][j].data[k] = v;
}

// dst = op(src), element-wise. Both tiles have the same type.
template <typename op, ducks::rt::all D, ducks::rt::all S> __device__ inline void unary_map(D &dst, const S &src) {
    constexpr bool ok = std::same_as<D, S>;
    static_assert(ok, "unary_map: dst and src must be the same tile type (use copy() to convert)");
    if constexpr (ok) {
#pragma unroll
        for (int i = 0; i < D::height; i++)
#pragma unroll
            for (int j = 0; j < D::width; j++)
#pragma unroll
                for (int k = 0; k < D::packed_per_tile; k++)
                    dst.tiles[i][j].data[k] = op::template op<typename D::T2>(src.tiles[i][j].data[k]);
    }
}

// dst = op(a, b), element-wise over two tiles of the same type.
template <typename op, ducks::rt::all D, ducks::rt::all A, ducks::rt::all B>
__device__ inline void bin_map(D &dst, const A &a, const B &b) {
    constexpr bool ok = std::same_as<D, A> && std::same_as<D, B>;
    static_assert(ok, "bin_map: dst, a and b must be the same tile type (same dtype, shape and layout)");
    if constexpr (ok) {
#pragma unroll
        for (int i = 0; i < D::height; i++)
#pragma unroll
            for (int j = 0; j < D::width; j++)
#pragma unroll
                for (int k = 0; k < D::packed_per_tile; k++)
                    dst.tiles[i][j].data[k] = op::template op<typename D::T2>(a.tiles[i][j].data[k], b.tiles[i][j].data[k]);
    }
}

// dst = op(a, b) with one scalar b for every element.
template <typename op, ducks::rt::all D, ducks::rt::all A>
__device__ inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    constexpr bool ok = std::same_as<D, A>;
    static_assert(ok, "bin_map: dst and a must be the same tile type (same dtype, shape and layout)");
    const auto b2 = base_types::constants<typename D::T2>::pair(b);
    if constexpr (ok) {
#pragma unroll
        for (int i = 0; i < D::height; i++)
#pragma unroll
            for (int j = 0; j < D::width; j++)
#pragma unroll
                for (int k = 0; k < D::packed_per_tile; k++)
                    dst.tiles[i][j].data[k] = op::template op<typename D::T2>(a.tiles[i][j].data[k], b2);
    }
}

} // namespace kittens
