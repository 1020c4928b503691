// Included inside struct group<N_WARPS>: member functions only.
//
// Shared-tile ops split over the group's threads (same meaning as the per-warp ops in
// ops/warp/shared/tile): row / column broadcasts of a shared vector and reductions into one; the
// element-wise ops that tiles share with vectors are in maps.cuh. They do NOT end with a
// barrier: call sync() before another warp reads the result, and before overwriting a tile
// another warp may still be reading.

template <typename op, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ static inline void row_map(D &dst, const S &src, const V &row_values) {
    ::kittens::detail::shared_ops::broadcast_map<op, true, GROUP_THREADS>(dst, src, row_values, laneid());
}
template <typename op, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ static inline void col_map(D &dst, const S &src, const V &col_values) {
    ::kittens::detail::shared_ops::broadcast_map<op, false, GROUP_THREADS>(dst, src, col_values, laneid());
}

template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void add_row(D &dst, const S &src, const V &v) { row_map<base_ops::sum>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void sub_row(D &dst, const S &src, const V &v) { row_map<base_ops::sub>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void mul_row(D &dst, const S &src, const V &v) { row_map<base_ops::mul>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void div_row(D &dst, const S &src, const V &v) { row_map<base_ops::div>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void max_row(D &dst, const S &src, const V &v) { row_map<base_ops::max>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void min_row(D &dst, const S &src, const V &v) { row_map<base_ops::min>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void add_col(D &dst, const S &src, const V &v) { col_map<base_ops::sum>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void sub_col(D &dst, const S &src, const V &v) { col_map<base_ops::sub>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void mul_col(D &dst, const S &src, const V &v) { col_map<base_ops::mul>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void div_col(D &dst, const S &src, const V &v) { col_map<base_ops::div>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void max_col(D &dst, const S &src, const V &v) { col_map<base_ops::max>(dst, src, v); }
template <ducks::st::all D, ducks::st::all S, ducks::sv::all V> __device__ static inline void min_col(D &dst, const S &src, const V &v) { col_map<base_ops::min>(dst, src, v); }

// Row / column reductions into shared vectors (see ops/warp/shared/tile/reductions.cuh).
template <typename op, ducks::sv::all V, ducks::st::all S> __device__ static inline void row_reduce(V &dst, const S &src) {
    ::kittens::detail::shared_ops::reduce<op, true, false, GROUP_THREADS>(dst, src, dst, laneid());
}
template <typename op, ducks::sv::all V, ducks::st::all S, ducks::sv::all A>
__device__ static inline void row_reduce(V &dst, const S &src, const A &acc) {
    ::kittens::detail::shared_ops::reduce<op, true, true, GROUP_THREADS>(dst, src, acc, laneid());
}
template <typename op, ducks::sv::all V, ducks::st::all S> __device__ static inline void col_reduce(V &dst, const S &src) {
    ::kittens::detail::shared_ops::reduce<op, false, false, GROUP_THREADS>(dst, src, dst, laneid());
}
template <typename op, ducks::sv::all V, ducks::st::all S, ducks::sv::all A>
__device__ static inline void col_reduce(V &dst, const S &src, const A &acc) {
    ::kittens::detail::shared_ops::reduce<op, false, true, GROUP_THREADS>(dst, src, acc, laneid());
}
template <ducks::sv::all V, ducks::st::all S> __device__ static inline void row_sum(V &dst, const S &src) { row_reduce<base_ops::sum>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ static inline void row_max(V &dst, const S &src) { row_reduce<base_ops::max>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ static inline void row_min(V &dst, const S &src) { row_reduce<base_ops::min>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ static inline void col_sum(V &dst, const S &src) { col_reduce<base_ops::sum>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ static inline void col_max(V &dst, const S &src) { col_reduce<base_ops::max>(dst, src); }
template <ducks::sv::all V, ducks::st::all S> __device__ static inline void col_min(V &dst, const S &src) { col_reduce<base_ops::min>(dst, src); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ static inline void row_sum(V &dst, const S &src, const A &acc) { row_reduce<base_ops::sum>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ static inline void row_max(V &dst, const S &src, const A &acc) { row_reduce<base_ops::max>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ static inline void row_min(V &dst, const S &src, const A &acc) { row_reduce<base_ops::min>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ static inline void col_sum(V &dst, const S &src, const A &acc) { col_reduce<base_ops::sum>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ static inline void col_max(V &dst, const S &src, const A &acc) { col_reduce<base_ops::max>(dst, src, acc); }
template <ducks::sv::all V, ducks::st::all S, ducks::sv::all A> __device__ static inline void col_min(V &dst, const S &src, const A &acc) { col_reduce<base_ops::min>(dst, src, acc); }
