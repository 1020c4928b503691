// Row and column broadcasts between a register tile and the register vectors tied to it.
//   *_row: one value per ROW of the tile, held in RT::col_vec  (dst(r, c) = op(src(r, c), v(r)))
//   *_col: one value per COLUMN of the tile, held in RT::row_vec (dst(r, c) = op(src(r, c), v(c)))
// Every lane already holds the vector elements its tile registers need (rv_layout.cuh), so no
// data moves between lanes.
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {
// The vector value (as a pair) that packed register k of base tile (i, j) lines up with.
template <bool per_row, ducks::rt::all RT, ducks::rv::all V>
__device__ __forceinline__ typename RT::T2 vec_value(const V &v, int i, int j, int k) {
    using L = typename RT::layout;
    if constexpr (per_row) return as_pair<typename RT::T2>(v.data[i][row_half<L>(k)]);
    else return as_pair<typename RT::T2>(v.data[j][col_half<L>(k)]);
}
// dst(r, c) = op(src(r, c), v(r)) when per_row, op(src(r, c), v(c)) otherwise.
template <typename op, bool per_row, ducks::rt::all RT, ducks::rv::all V>
__device__ inline void broadcast_map(RT &dst, const RT &src, const V &v) {
    using T2 = typename RT::T2;
#pragma unroll
    for (int i = 0; i < RT::height; i++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++) {
                const T2 x = vec_value<per_row, RT>(v, i, j, k);
                dst.tiles[i][j].data[k] = op::template op<T2>(src.tiles[i][j].data[k], x);
            }
}
// Fill variant: dst(r, c) = v(r) or v(c).
template <bool per_row, ducks::rt::all RT, ducks::rv::all V> __device__ inline void broadcast_fill(RT &dst, const V &v) {
#pragma unroll
    for (int i = 0; i < RT::height; i++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++)
                dst.tiles[i][j].data[k] = vec_value<per_row, RT>(v, i, j, k);
}
} // namespace detail::reg

#define KITTENS_ROW_BROADCAST(NAME, OP)                                                                          \
    template <ducks::rt::all D, ducks::rt::all S, ducks::rv::all V>                                              \
    __device__ inline void NAME(D &dst, const S &src, const V &v) {                                              \
        constexpr bool same_tile = std::same_as<D, S>, right_vec = std::same_as<V, typename D::col_vec>;         \
        static_assert(same_tile, #NAME ": dst and src must be the same tile type");                              \
        static_assert(right_vec, #NAME ": the vector must be the tile's col_vec (one value per row, same dtype)"); \
        if constexpr (same_tile && right_vec) detail::reg::broadcast_map<OP, true>(dst, src, v);                 \
    }
#define KITTENS_COL_BROADCAST(NAME, OP)                                                                          \
    template <ducks::rt::all D, ducks::rt::all S, ducks::rv::all V>                                              \
    __device__ inline void NAME(D &dst, const S &src, const V &v) {                                              \
        constexpr bool same_tile = std::same_as<D, S>, right_vec = std::same_as<V, typename D::row_vec>;         \
        static_assert(same_tile, #NAME ": dst and src must be the same tile type");                              \
        static_assert(right_vec, #NAME ": the vector must be the tile's row_vec (one value per column, same dtype)"); \
        if constexpr (same_tile && right_vec) detail::reg::broadcast_map<OP, false>(dst, src, v);                \
    }
KITTENS_ROW_BROADCAST(add_row, base_ops::sum)
KITTENS_ROW_BROADCAST(sub_row, base_ops::sub)
KITTENS_ROW_BROADCAST(mul_row, base_ops::mul)
KITTENS_ROW_BROADCAST(div_row, base_ops::div)
KITTENS_ROW_BROADCAST(max_row, base_ops::max)
KITTENS_ROW_BROADCAST(min_row, base_ops::min)
KITTENS_COL_BROADCAST(add_col, base_ops::sum)
KITTENS_COL_BROADCAST(sub_col, base_ops::sub)
KITTENS_COL_BROADCAST(mul_col, base_ops::mul)
KITTENS_COL_BROADCAST(div_col, base_ops::div)
KITTENS_COL_BROADCAST(max_col, base_ops::max)
KITTENS_COL_BROADCAST(min_col, base_ops::min)
#undef KITTENS_ROW_BROADCAST
#undef KITTENS_COL_BROADCAST

// dst(r, c) = v(r): every row filled with its own value.
template <ducks::rt::all D, ducks::rv::all V> __device__ inline void broadcast_row(D &dst, const V &v) {
    constexpr bool ok = std::same_as<V, typename D::col_vec>;
    static_assert(ok, "broadcast_row: the vector must be the tile's col_vec (one value per row, same dtype)");
    if constexpr (ok) detail::reg::broadcast_fill<true>(dst, v);
}
// dst(r, c) = v(c): every column filled with its own value.
template <ducks::rt::all D, ducks::rv::all V> __device__ inline void broadcast_col(D &dst, const V &v) {
    constexpr bool ok = std::same_as<V, typename D::row_vec>;
    static_assert(ok, "broadcast_col: the vector must be the tile's row_vec (one value per column, same dtype)");
    if constexpr (ok) detail::reg::broadcast_fill<false>(dst, v);
}

} // namespace kittens
