// Register tile conversions: element type (copy), lane distribution (swap_layout) and matrix
// transpose (transpose_sep).
//
// The fact all three layout ops rest on: a row-layout tile of X and a column-layout tile of X^T
// hold identical registers (compare the two orders in rt_layout.cuh). Changing the layout of the
// same matrix, or transposing it within one layout, is therefore one 8x8 transpose per packed
// register plus a renaming of which register holds which 8x8 quarter.
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {
// The 8x8 quarters of a base tile as the other layout (or the transposed matrix) wants them:
// quarters 1 and 2 trade places, each quarter is transposed. The map is its own inverse, so it
// serves row->col, col->row and both transposes.
template <typename P> __device__ __forceinline__ void transpose_quarters(P (&dst)[4], const P (&src)[4]) {
    dst[0] = transpose_8x8(src[0]);
    dst[1] = transpose_8x8(src[2]);
    dst[2] = transpose_8x8(src[1]);
    dst[3] = transpose_8x8(src[3]);
}
} // namespace detail::reg

// dst = src converted element-wise to dst's type (fp32, bf16, fp16, fp8). Same shape and layout.
template <ducks::rt::all D, ducks::rt::all S> __device__ inline void copy(D &dst, const S &src) {
    constexpr bool same_shape = D::rows == S::rows && D::cols == S::cols;
    constexpr bool same_layout = std::same_as<typename D::layout, typename S::layout>;
    static_assert(same_shape, "copy: register tiles must have the same shape");
    static_assert(same_layout, "copy: register tiles must have the same layout (use swap_layout to change it)");
    if constexpr (same_shape && same_layout) {
#pragma unroll
        for (int i = 0; i < D::height; i++)
#pragma unroll
            for (int j = 0; j < D::width; j++)
#pragma unroll
                for (int k = 0; k < D::packed_per_tile; k++)
                    dst.tiles[i][j].data[k] = convert<typename D::T2>(src.tiles[i][j].data[k]);
    }
}

// The same matrix in the other register layout (row <-> col). dst and src are different types,
// so they cannot be the same object.
template <ducks::rt::all D, ducks::rt::all S> __device__ inline void swap_layout(D &dst, const S &src) {
    constexpr bool same_type = std::same_as<typename D::T, typename S::T>;
    constexpr bool same_shape = D::rows == S::rows && D::cols == S::cols;
    constexpr bool opposite = std::same_as<typename D::layout, ducks::rt_layout::transpose<typename S::layout>>;
    static_assert(same_type, "swap_layout: dst and src must have the same element type (copy() converts types)");
    static_assert(same_shape, "swap_layout: dst and src must have the same shape");
    static_assert(opposite, "swap_layout: dst must have the opposite layout of src (row <-> col)");
    if constexpr (same_type && same_shape && opposite) {
#pragma unroll
        for (int i = 0; i < D::height; i++)
#pragma unroll
            for (int j = 0; j < D::width; j++)
                detail::reg::transpose_quarters(dst.tiles[i][j].data, src.tiles[i][j].data);
    }
}

// dst = src^T, in the same layout: rt<T,R,C,L> -> rt<T,C,R,L>. Base tile (i, j) of src feeds base
// tile (j, i) of dst, so in-place use would overwrite inputs still to be read: dst and src must
// be separate objects.
template <ducks::rt::all D, ducks::rt::all S> __device__ inline void transpose_sep(D &dst, const S &src) {
    constexpr bool same_type = std::same_as<typename D::T, typename S::T>;
    constexpr bool transposed = D::rows == S::cols && D::cols == S::rows;
    constexpr bool same_layout = std::same_as<typename D::layout, typename S::layout>;
    static_assert(same_type, "transpose_sep: dst and src must have the same element type");
    static_assert(transposed, "transpose_sep: dst must have src's shape transposed (rt<T,R,C> -> rt<T,C,R>)");
    static_assert(same_layout, "transpose_sep: dst and src must have the same layout (swap_layout changes layouts)");
    if constexpr (same_type && transposed && same_layout) {
#pragma unroll
        for (int i = 0; i < S::height; i++)
#pragma unroll
            for (int j = 0; j < S::width; j++)
                detail::reg::transpose_quarters(dst.tiles[j][i].data, src.tiles[i][j].data);
    }
}

} // namespace kittens
