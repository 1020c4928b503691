// Register vector conversions: copy(dst, src) across element types and across the three vector
// layouts (rv_layout.cuh). A change of layout is a gather: every lane fetches, by warp shuffle,
// each element it must hold from a lane of src that holds it.
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {

// Source lanes. naive: element e sits in lane e % 32 of slot e / 32. ortho: element r of a
// 16-element tile sits in data[i][r / 8] of every lane with g == r % 8 (lane 4 * (r % 8) is
// one). align: element r sits in data[i][r / 8], pair half r % 2, of every lane with
// t == (r % 8) / 2 (lane (r % 8) / 2 is one).

// Element 16 * i + r of a naive vector; r may differ per lane (0..15).
template <ducks::rv::naive_layout S> __device__ __forceinline__ typename S::T naive_elem(const S &src, int i, int r) {
    return shfl_idx(src.data[i / 2][0], 16 * (i & 1) + r);
}
// Element 16 * i + r of an ortho or align vector; r may differ per lane (0..15). Both halves
// are fetched and the right one kept, because a shuffle reads one register for the whole warp.
template <ducks::rv::tile_layout S> __device__ __forceinline__ typename S::T tile_vec_elem(const S &src, int i, int r) {
    const int q = r & 7;
    if constexpr (ducks::rv::ortho_layout<S>) {
        const auto lo = shfl_idx(src.data[i][0], 4 * q);
        const auto hi = shfl_idx(src.data[i][1], 4 * q);
        return r < 8 ? lo : hi;
    } else {
        const auto lo = shfl_idx(src.data[i][0], q / 2);
        const auto hi = shfl_idx(src.data[i][1], q / 2);
        return elem(r < 8 ? lo : hi, r & 1);
    }
}
template <ducks::rv::all S> __device__ __forceinline__ typename S::T any_elem(const S &src, int i, int r) {
    if constexpr (ducks::rv::naive_layout<S>) return naive_elem(src, i, r);
    else return tile_vec_elem(src, i, r);
}

template <ducks::rv::all D, ducks::rv::all S> __device__ inline void relayout(D &dst, const S &src) {
    using DT = typename D::T;
    const int lane = laneid(), g = lane >> 2, t = lane & 3;
    if constexpr (ducks::rv::ortho_layout<D>) {
        // This lane holds elements g and g + 8 of each 16-element tile.
#pragma unroll
        for (int i = 0; i < D::tiles; i++) {
            dst.data[i][0] = convert<DT>(any_elem(src, i, g));
            dst.data[i][1] = convert<DT>(any_elem(src, i, g + 8));
        }
    } else if constexpr (ducks::rv::align_layout<D>) {
        // This lane holds pairs (2t, 2t + 1) and (2t + 8, 2t + 9) of each tile.
#pragma unroll
        for (int i = 0; i < D::tiles; i++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const auto x = any_elem(src, i, 2 * t + 8 * h);
                const auto y = any_elem(src, i, 2 * t + 8 * h + 1);
                dst.data[i][h] = make_pair<typename D::T2>(convert<DT>(x), convert<DT>(y));
            }
        }
    } else {
        // naive: slot s of this lane is element 32 s + lane, i.e. element lane % 16 of tile
        // 2 s + lane / 16. The tile index differs across the warp, so both candidate tiles are
        // gathered and the right one kept (past the end, the lane keeps padding).
        static_assert(ducks::rv::tile_layout<S>, "relayout: naive -> naive is a plain copy");
        const int r = lane & 15, upper = lane >> 4;
#pragma unroll
        for (int s = 0; s < D::outer_dim; s++) {
            typename S::T v = tile_vec_elem(src, 2 * s, r);
            if (2 * s + 1 < S::tiles) { // warp-uniform: the slot's upper half exists
                const auto w = tile_vec_elem(src, 2 * s + 1, r);
                if (upper) v = w;
            }
            dst.data[s][0] = convert<DT>(v);
        }
    }
}

} // namespace detail::reg

// dst = src, converted to dst's element type and layout (naive / ortho / align, any pair).
template <ducks::rv::all D, ducks::rv::all S> __device__ inline void copy(D &dst, const S &src) {
    constexpr bool same_length = D::length == S::length;
    static_assert(same_length, "copy: register vectors must have the same length");
    if constexpr (same_length && std::same_as<typename D::layout, typename S::layout>) {
#pragma unroll
        for (int i = 0; i < D::outer_dim; i++)
#pragma unroll
            for (int j = 0; j < D::inner_dim; j++) dst.data[i][j] = convert<typename D::dtype>(src.data[i][j]);
    } else if constexpr (same_length) {
        detail::reg::relayout(dst, src);
    }
}

} // namespace kittens
