// Included inside struct group<N_WARPS>: member functions only.
//
// Shared-tile ops split over the group's threads (same meaning as the per-warp ops in
// ops/warp/shared/tile). They do NOT end with a barrier: call sync() before another warp reads
// the result, and before overwriting a tile another warp may still be reading.

template <ducks::st::all ST> __device__ static inline void fill(ST &dst, const typename ST::T &value) {
    ::kittens::detail::shared_ops::fill<GROUP_THREADS>(dst, value, laneid());
}
template <typename op, ducks::st::all D, ducks::st::all S> __device__ static inline void unary_map(D &dst, const S &src) {
    ::kittens::detail::shared_ops::unary_map<op, GROUP_THREADS>(dst, src, laneid());
}
template <typename op, ducks::st::all D, ducks::st::all A, ducks::st::all B>
__device__ static inline void bin_map(D &dst, const A &a, const B &b) {
    ::kittens::detail::shared_ops::bin_map<op, GROUP_THREADS>(dst, a, b, laneid());
}
template <typename op, ducks::st::all D, ducks::st::all A>
__device__ static inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    ::kittens::detail::shared_ops::bin_map_scalar<op, GROUP_THREADS>(dst, a, b, laneid());
}
template <typename op, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ static inline void row_map(D &dst, const S &src, const V &row_values) {
    ::kittens::detail::shared_ops::broadcast_map<op, true, GROUP_THREADS>(dst, src, row_values, laneid());
}
template <typename op, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ static inline void col_map(D &dst, const S &src, const V &col_values) {
    ::kittens::detail::shared_ops::broadcast_map<op, false, GROUP_THREADS>(dst, src, col_values, laneid());
}
template <ducks::st::all D, ducks::st::all S> __device__ static inline void copy(D &dst, const S &src) {
    ::kittens::detail::shared_ops::copy<GROUP_THREADS>(dst, src, laneid());
}

template <ducks::st::all ST> __device__ static inline void zero(ST &dst) { fill(dst, base_types::constants<typename ST::T>::zero()); }
template <ducks::st::all ST> __device__ static inline void one(ST &dst) { fill(dst, base_types::constants<typename ST::T>::one()); }
template <ducks::st::all ST> __device__ static inline void pos_infty(ST &dst) { fill(dst, base_types::constants<typename ST::T>::pos_infty()); }
template <ducks::st::all ST> __device__ static inline void neg_infty(ST &dst) { fill(dst, base_types::constants<typename ST::T>::neg_infty()); }

template <ducks::st::all D, ducks::st::all S> __device__ static inline void exp(D &dst, const S &src) { unary_map<base_ops::exp>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ static inline void exp2(D &dst, const S &src) { unary_map<base_ops::exp2>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ static inline void log(D &dst, const S &src) { unary_map<base_ops::log>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ static inline void abs(D &dst, const S &src) { unary_map<base_ops::abs>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ static inline void relu(D &dst, const S &src) { unary_map<base_ops::relu>(dst, src); }
template <ducks::st::all D, ducks::st::all S> __device__ static inline void neg(D &dst, const S &src) { unary_map<base_ops::neg>(dst, src); }

template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ static inline void add(D &dst, const A &a, const B &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ static inline void sub(D &dst, const A &a, const B &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ static inline void mul(D &dst, const A &a, const B &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ static inline void div(D &dst, const A &a, const B &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ static inline void max(D &dst, const A &a, const B &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A, ducks::st::all B> __device__ static inline void min(D &dst, const A &a, const B &b) { bin_map<base_ops::min>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ static inline void add(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ static inline void sub(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ static inline void mul(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ static inline void div(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ static inline void max(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::st::all D, ducks::st::all A> __device__ static inline void min(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::min>(dst, a, b); }

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
