// Element-wise ops on shared tiles, per warp: initialisers, copy, unary and binary maps (tile-tile
// and tile-scalar) and row / column broadcasts of a shared vector. dst may alias any source.
// Every op ends with __syncwarp(), so the warp may use the result at once.
#pragma once

#include "../detail.cuh"

namespace kittens {

// ----- generic forms: any base_ops functor -----
template <ducks::st::all ST> __device__ inline void fill(ST &dst, const typename ST::T &value) {
    detail::shared_ops::fill<WARP_THREADS>(dst, value, laneid());
    __syncwarp();
}
template <typename op, ducks::st::all D, ducks::st::all S> __device__ inline void unary_map(D &dst, const S &src) {
    detail::shared_ops::unary_map<op, WARP_THREADS>(dst, src, laneid());
    __syncwarp();
}
template <typename op, ducks::st::all D, ducks::st::all A, ducks::st::all B>
__device__ inline void bin_map(D &dst, const A &a, const B &b) {
    detail::shared_ops::bin_map<op, WARP_THREADS>(dst, a, b, laneid());
    __syncwarp();
}
template <typename op, ducks::st::all D, ducks::st::all A>
__device__ inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    detail::shared_ops::bin_map_scalar<op, WARP_THREADS>(dst, a, b, laneid());
    __syncwarp();
}
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
// Same shape; element types may differ (values convert).
template <ducks::st::all D, ducks::st::all S> __device__ inline void copy(D &dst, const S &src) {
    detail::shared_ops::copy<WARP_THREADS>(dst, src, laneid());
    __syncwarp();
}

// ----- initialisers -----
template <ducks::st::all ST> __device__ inline void zero(ST &dst) { fill(dst, base_types::constants<typename ST::T>::zero()); }
template <ducks::st::all ST> __device__ inline void one(ST &dst) { fill(dst, base_types::constants<typename ST::T>::one()); }
template <ducks::st::all ST> __device__ inline void pos_infty(ST &dst) { fill(dst, base_types::constants<typename ST::T>::pos_infty()); }
template <ducks::st::all ST> __device__ inline void neg_infty(ST &dst) { fill(dst, base_types::constants<typename ST::T>::neg_infty()); }

// ----- unary -----
template <ducks::st::all D, ducks::st::all S> __device__ inline void exp(D &dst, const S &src) { unary_map<base_ops::exp>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ inline void exp2(D &dst, const S &src) { unary_map<base_ops::exp2>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ inline void log(D &dst, const S &src) { unary_map<base_ops::log>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ inline void abs(D &dst, const S &src) { unary_map<base_ops::abs>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ inline void relu(D &dst, const S &src) { unary_map<base_ops::relu>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ inline void neg(D &dst, const S &src) { unary_map<base_ops::neg>(dst, src); }

// ----- binary: tile-tile and tile-scalar -----
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ inline void add(D &dst, const A &a, const B &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ inline void sub(D &dst, const A &a, const B &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ inline void mul(D &dst, const A &a, const B &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ inline void div(D &dst, const A &a, const B &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ inline void max(D &dst, const A &a, const B &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ inline void min(D &dst, const A &a, const B &b) { bin_map<base_ops::min>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ inline void add(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ inline void sub(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ inline void mul(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ inline void div(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ inline void max(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ inline void min(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::min>(dst, a, b); }

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
