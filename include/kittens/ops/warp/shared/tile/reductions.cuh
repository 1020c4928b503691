// Row and column reductions of a shared tile into a shared vector, per warp:
//   row_*(sv &dst, st src[, sv acc]): dst[r] = op(acc[r], op over c of src(r, c))   (length = rows)
//   col_*(sv &dst, st src[, sv acc]): dst[c] = op(acc[c], op over r of src(r, c))   (length = cols)
// Sums accumulate in float whatever the element type, and round once. dst may alias acc.
#pragma once

#include "../detail.cuh"

namespace kittens {

template <typename op, ducks::sv::all V, ducks::st::all S> __device__ inline void row_reduce(V &dst, const S &src) {
    detail::shared_ops::reduce<op, true, false, WARP_THREADS>(dst, src, dst, laneid());
    __syncwarp();
}
template <typename op, ducks::sv::all V, ducks::st::all S, ducks::sv::all A>
__device__ inline void row_reduce(V &dst, const S &src, const A &acc) {
    detail::shared_ops::reduce<op, true, true, WARP_THREADS>(dst, src, acc, laneid());
    __syncwarp();
}
template <typename op, ducks::sv::all V, ducks::st::all S> __device__ inline void col_reduce(V &dst, const S &src) {
    detail::shared_ops::reduce<op, false, false, WARP_THREADS>(dst, src, dst, laneid());
    __syncwarp();
}
template <typename op, ducks::sv::all V, ducks::st::all S, ducks::sv::all A>
__device__ inline void col_reduce(V &dst, const S &src, const A &acc) {
    detail::shared_ops::reduce<op, false, true, WARP_THREADS>(dst, src, acc, laneid());
    __syncwarp();
}

template <ducks::sv::all V, ducks::st::all S> __device__ inline void row_sum(V &dst, const S &src) { row_reduce<base_ops::sum>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ inline void row_max(V &dst, const S &src) { row_reduce<base_ops::max>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ inline void row_min(V &dst, const S &src) { row_reduce<base_ops::min>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ inline void col_sum(V &dst, const S &src) { col_reduce<base_ops::sum>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ inline void col_max(V &dst, const S &src) { col_reduce<base_ops::max>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ inline void col_min(V &dst, const S &src) { col_reduce<base_ops::min>(dst, src); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ inline void row_sum(V &dst, const S &src, const A &acc) { row_reduce<base_ops::sum>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ inline void row_max(V &dst, const S &src, const A &acc) { row_reduce<base_ops::max>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ inline void row_min(V &dst, const S &src, const A &acc) { row_reduce<base_ops::min>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ inline void col_sum(V &dst, const S &src, const A &acc) { col_reduce<base_ops::sum>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ inline void col_max(V &dst, const S &src, const A &acc) { col_reduce<base_ops::max>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ inline void col_min(V &dst, const S &src, const A &acc) { col_reduce<base_ops::min>(dst, src, acc); }

} // namespace kittens
