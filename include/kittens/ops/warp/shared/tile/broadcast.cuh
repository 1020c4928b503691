// Row and column broadcasts of a shared vector onto a shared tile, per warp: the generic
// row_map / col_map (any base_ops functor) and the named add_row .. min_col. dst may alias src.
// Every op ends with __syncwarp(), so the warp may use the result at once. The element-wise ops
// that tiles share with vectors are in ../maps.cuh.
#pragma once

#include "../detail.cuh"

namespace kittens {

// dst(r, c) = op(src(r, c), row_values[r]): one value per row, broadcast along the row.
template <typename op, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ inline void row_map(D &dst, const S &src, const V &row_values) {
    detail::shared_ops::broadcast_map<op, true, WARP_THREADS>(dst, src, row_values, laneid());
    __syncwarp();
}
// dst(r, c) = op(src(r, c), col_values[c]): one value per column, broadcast down the column.
template <typename op, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ inline void col_map(D &dst, const S &src, const V &col_values) {
    detail::shared_ops::broadcast_map<op, false, WARP_THREADS>(dst, src, col_values, laneid());
    __syncwarp();
}

// ----- row / column broadcasts of a shared vector -----
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void add_row(D &dst, const S &src, const V &v) { row_map<base_ops::sum>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void sub_row(D &dst, const S &src, const V &v) { row_map<base_ops::sub>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void mul_row(D &dst, const S &src, const V &v) { row_map<base_ops::mul>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void div_row(D &dst, const S &src, const V &v) { row_map<base_ops::div>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void max_row(D &dst, const S &src, const V &v) { row_map<base_ops::max>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void min_row(D &dst, const S &src, const V &v) { row_map<base_ops::min>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void add_col(D &dst, const S &src, const V &v) { col_map<base_ops::sum>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void sub_col(D &dst, const S &src, const V &v) { col_map<base_ops::sub>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void mul_col(D &dst, const S &src, const V &v) { col_map<base_ops::mul>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void div_col(D &dst, const S &src, const V &v) { col_map<base_ops::div>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void max_col(D &dst, const S &src, const V &v) { col_map<base_ops::max>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ inline void min_col(D &dst, const S &src, const V &v) { col_map<base_ops::min>(dst, src, v); }

} // namespace kittens
