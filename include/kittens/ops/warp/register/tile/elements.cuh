// Visiting a register tile's elements with their (row, column): the one place outside the layout code that
// knows which lane holds which element, so that kernels which mask, scale or index elements (causal masks,
// per-row or per-column scales, bias vectors, ragged edges) never spell the fragment layout out.
//
//   for_each_pair([&](pair_pos p, float2 &s) { if (p.col > limit) s.x = -inf; ... }, scores);
//   for_each_pair([&](pair_pos p, const float2 &acc, bf16_2 &out) { out = ...; }, acc_tile, out_tile);
//
// The callback sees each packed pair the lane holds once, with pair_pos: the tile-relative row and column of
// the pair's first element (the second is one column further in the row layout, one row further in the column
// layout), the base tile (i, j), the pair index k, and `half`, which of the lane's two rows (row layout) or
// columns (column layout) of the base tile the pair is on, so per-row (or per-column) values kept two per lane
// can be indexed without arithmetic. Every tile passed must have the first tile's shape and layout; the loops
// are unrolled, so i, j and k are compile-time constants in the callback.
#pragma once

#include "../lanes.cuh"

namespace kittens {

struct pair_pos {
    int row, col; // of the pair's first element, within the tile
    int i, j, k;  // base tile (row, column) and pair index within it
    int half;     // 0 or 1: which of the lane's two rows (row layout) or columns (column layout) of the base tile
};

namespace detail::reg {
// The position of pair k of base tile (i, j), for the calling lane (rt_layout.cuh).
template <ducks::rt_layout::all L> __device__ __forceinline__ pair_pos pair_position(int i, int j, int k) {
    if constexpr (std::same_as<L, row_l>) {
        return {TILE_DIM * i + frag_g() + 8 * row_half<L>(k), TILE_DIM * j + 2 * frag_t() + 8 * col_half<L>(k), i, j, k,
                row_half<L>(k)};
    } else {
        return {TILE_DIM * i + 2 * frag_t() + 8 * row_half<L>(k), TILE_DIM * j + frag_g() + 8 * col_half<L>(k), i, j, k,
                col_half<L>(k)};
    }
}
template <ducks::rt::all A, ducks::rt::all B> constexpr bool same_pair_grid =
    A::rows == B::rows && A::cols == B::cols && std::same_as<typename A::layout, typename B::layout>;
} // namespace detail::reg

// f(pair_pos, first's pair, more's pairs...) for every packed pair of the tiles, in (i, j, k) order.
template <typename F, ducks::rt::all RT, ducks::rt::all... More>
__device__ inline void for_each_pair(F &&f, RT &first, More &...more) {
    static_assert((detail::reg::same_pair_grid<RT, More> && ...),
                  "for_each_pair: every tile must have the first tile's rows, columns and layout");
#pragma unroll
    for (int i = 0; i < RT::height; i++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++)
                f(detail::reg::pair_position<typename RT::layout>(i, j, k), first.tiles[i][j].data[k],
                  more.tiles[i][j].data[k]...);
}

// The four lanes that share a row of a row-layout tile are adjacent (lanes 4g .. 4g + 3), so a per-row reduction
// is two xor-shuffles.
// The tile-relative rows this lane holds elements of in base-tile row i of a row-layout tile: lane_row(i, 0) and
// lane_row(i, 1) = lane_row(i, 0) + 8 (one value per row of a column vector sits in those two slots).
__device__ __forceinline__ int lane_row(int i, int half) { return TILE_DIM * i + detail::reg::frag_g() + 8 * half; }
// Whether this lane is the first of the four that share its rows in a row-layout tile: the one that writes a
// per-row value (a row sum, a log-sum-exp) out, once per row.
__device__ __forceinline__ bool leads_row() { return detail::reg::frag_t() == 0; }
// The tile-relative columns this lane holds the first element of a pair in, in base-tile column j of a row-layout
// tile: lane_col(j, 0) and lane_col(j, 1) = lane_col(j, 0) + 8 (the pair's second element is one column further).
__device__ __forceinline__ int lane_col(int j, int half) { return TILE_DIM * j + 2 * detail::reg::frag_t() + 8 * half; }
// Whether this lane is the first of the eight that share its columns in a row-layout tile: the one that writes a
// per-column value (a column sum) out, once per column pair.
__device__ __forceinline__ bool leads_col() { return laneid() < 4; } // frag_g() == 0

// A per-row value (a lane's partial maximum or sum over its elements of the row, row layout) combined over the
// four lanes that hold parts of that row; every one of the four gets the result.
__device__ __forceinline__ float row_lanes_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_lanes_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

} // namespace kittens
