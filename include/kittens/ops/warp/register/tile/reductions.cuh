// Row and column reductions of a register tile into the register vector tied to it.
//   row_*(col_vec &dst, src[, acc]): one value per ROW   (dst(r) = op(acc(r), op over c of src(r, c)))
//   col_*(row_vec &dst, src[, acc]): one value per COLUMN
// The result is replicated in every lane that holds that vector element, as the vector layout
// requires, so it can be broadcast straight back onto the tile. dst may alias acc.
//
// How: each lane first folds the registers it holds that share a kept index. Then one of two
// cases, fixed by the tile layout:
//  * the two elements of each packed pair lie along the reduced direction (row layout reducing
//    rows, col layout reducing columns): fold the pair's halves, then combine across the 4 lanes
//    of a quad (shuffle xor 1, 2). The result is one scalar per lane group: the ortho layout.
//  * the pair lies along the kept direction: keep pairs, combine across the 8 quads (shuffle xor
//    4, 8, 16). The result is one pair per lane: the align layout.
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {

// Base tile j along the reduced direction of kept tile i.
template <bool per_row, ducks::rt::all RT> __device__ __forceinline__ const typename RT::base &reduced_base(const RT &src, int i, int j) {
    if constexpr (per_row) return src.tiles[i][j];
    else return src.tiles[j][i];
}

template <typename op, bool per_row, bool has_acc, ducks::rv::all V, ducks::rt::all RT>
__device__ inline void reduce_tile(V &dst, const RT &src, const V &acc) {
    using T = typename RT::T;
    using T2 = typename RT::T2;
    using L = typename RT::layout;
    // per_row keeps the row index; pairs run along rows in the row layout.
    constexpr bool pair_along_reduced = per_row == std::same_as<L, row_l>;
    constexpr int kept_tiles = per_row ? RT::height : RT::width;
    constexpr int reduced_tiles = per_row ? RT::width : RT::height;
    auto kept_half = [](int k) { return per_row ? row_half<L>(k) : col_half<L>(k); };
#pragma unroll
    for (int i = 0; i < kept_tiles; i++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            T2 folded;
            bool first = true;
#pragma unroll
            for (int j = 0; j < reduced_tiles; j++) {
                const auto &base = reduced_base<per_row>(src, i, j);
#pragma unroll
                for (int k = 0; k < RT::packed_per_tile; k++) {
                    if (kept_half(k) != h) continue;
                    folded = first ? base.data[k] : op::template op<T2>(folded, base.data[k]);
                    first = false;
                }
            }
            if constexpr (pair_along_reduced) {
                T s = op::template op<T>(elem(folded, 0), elem(folded, 1));
                s = op::template op<T>(s, shfl_xor(s, 1));
                s = op::template op<T>(s, shfl_xor(s, 2));
                if constexpr (has_acc) s = op::template op<T>(acc.data[i][h], s);
                dst.data[i][h] = s;
            } else {
                folded = op::template op<T2>(folded, shfl_xor(folded, 4));
                folded = op::template op<T2>(folded, shfl_xor(folded, 8));
                folded = op::template op<T2>(folded, shfl_xor(folded, 16));
                if constexpr (has_acc) folded = op::template op<T2>(acc.data[i][h], folded);
                dst.data[i][h] = folded;
            }
        }
    }
}

} // namespace detail::reg

// Generic forms over any base_ops binary functor (associative and commutative).
template <typename op, ducks::rv::all V, ducks::rt::all RT> __device__ inline void row_reduce(V &dst, const RT &src) {
    constexpr bool ok = std::same_as<V, typename RT::col_vec>;
    static_assert(ok, "row reductions write the tile's col_vec (one value per row, same dtype)");
    if constexpr (ok) detail::reg::reduce_tile<op, true, false>(dst, src, dst);
}
template <typename op, ducks::rv::all V, ducks::rt::all RT>
__device__ inline void row_reduce(V &dst, const RT &src, const V &acc) {
    constexpr bool ok = std::same_as<V, typename RT::col_vec>;
    static_assert(ok, "row reductions write the tile's col_vec (one value per row, same dtype)");
    if constexpr (ok) detail::reg::reduce_tile<op, true, true>(dst, src, acc);
}
template <typename op, ducks::rv::all V, ducks::rt::all RT> __device__ inline void col_reduce(V &dst, const RT &src) {
    constexpr bool ok = std::same_as<V, typename RT::row_vec>;
    static_assert(ok, "column reductions write the tile's row_vec (one value per column, same dtype)");
    if constexpr (ok) detail::reg::reduce_tile<op, false, false>(dst, src, dst);
}
template <typename op, ducks::rv::all V, ducks::rt::all RT>
__device__ inline void col_reduce(V &dst, const RT &src, const V &acc) {
    constexpr bool ok = std::same_as<V, typename RT::row_vec>;
    static_assert(ok, "column reductions write the tile's row_vec (one value per column, same dtype)");
    if constexpr (ok) detail::reg::reduce_tile<op, false, true>(dst, src, acc);
}

#define KITTENS_TILE_REDUCTION(NAME, KIND, OP)                                                                   \
    template <ducks::rv::all V, ducks::rt::all RT> __device__ inline void NAME(V &dst, const RT &src) {        \
        KIND<OP>(dst, src);                                                                                      \
    }                                                                                                            \
    template <ducks::rv::all V, ducks::rt::all RT>                                                              \
    __device__ inline void NAME(V &dst, const RT &src, const V &acc) {                                           \
        KIND<OP>(dst, src, acc);                                                                                 \
    }
KITTENS_TILE_REDUCTION(row_max, row_reduce, base_ops::max)
KITTENS_TILE_REDUCTION(row_min, row_reduce, base_ops::min)
KITTENS_TILE_REDUCTION(row_sum, row_reduce, base_ops::sum)
KITTENS_TILE_REDUCTION(row_prod, row_reduce, base_ops::mul)
KITTENS_TILE_REDUCTION(col_max, col_reduce, base_ops::max)
KITTENS_TILE_REDUCTION(col_min, col_reduce, base_ops::min)
KITTENS_TILE_REDUCTION(col_sum, col_reduce, base_ops::sum)
KITTENS_TILE_REDUCTION(col_prod, col_reduce, base_ops::mul)
#undef KITTENS_TILE_REDUCTION

} // namespace kittens
