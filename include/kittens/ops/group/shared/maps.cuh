// Included inside struct group<N_WARPS>: member functions only.
//
// Element-wise ops on shared tiles and shared vectors alike, split over the group's threads (same
// meaning as the per-warp ops in ops/warp/shared/maps.cuh, whose concepts they use). They do NOT
// end with a barrier: call sync() before another warp reads the result, and before overwriting
// an operand another warp may still be reading.

template <ducks::shared::all S> __device__ static inline void fill(S &dst, const typename S::T &value) {
    ::kittens::detail::shared_ops::fill<GROUP_THREADS>(dst, value, laneid());
}
template <typename op, ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void unary_map(D &dst, const S &src) {
    ::kittens::detail::shared_ops::unary_map<op, GROUP_THREADS>(dst, src, laneid());
}
template <typename op, ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B>
__device__ static inline void bin_map(D &dst, const A &a, const B &b) {
    ::kittens::detail::shared_ops::bin_map<op, GROUP_THREADS>(dst, a, b, laneid());
}
template <typename op, ducks::shared::all D, ducks::shared::like<D> A>
__device__ static inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    ::kittens::detail::shared_ops::bin_map_scalar<op, GROUP_THREADS>(dst, a, b, laneid());
}
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void copy(D &dst, const S &src) {
    ::kittens::detail::shared_ops::copy<GROUP_THREADS>(dst, src, laneid());
}

template <ducks::shared::all S> __device__ static inline void zero(S &dst) { fill(dst, base_types::constants<typename S::T>::zero()); }
template <ducks::shared::all S> __device__ static inline void one(S &dst) { fill(dst, base_types::constants<typename S::T>::one()); }
template <ducks::shared::all S> __device__ static inline void pos_infty(S &dst) { fill(dst, base_types::constants<typename S::T>::pos_infty()); }
template <ducks::shared::all S> __device__ static inline void neg_infty(S &dst) { fill(dst, base_types::constants<typename S::T>::neg_infty()); }

template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void exp(D &dst, const S &src) { unary_map<base_ops::exp>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void exp2(D &dst, const S &src) { unary_map<base_ops::exp2>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void log(D &dst, const S &src) { unary_map<base_ops::log>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void abs(D &dst, const S &src) { unary_map<base_ops::abs>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void relu(D &dst, const S &src) { unary_map<base_ops::relu>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ static inline void neg(D &dst, const S &src) { unary_map<base_ops::neg>(dst, src); }

template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ static inline void add(D &dst, const A &a, const B &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ static inline void sub(D &dst, const A &a, const B &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ static inline void mul(D &dst, const A &a, const B &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ static inline void div(D &dst, const A &a, const B &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ static inline void max(D &dst, const A &a, const B &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ static inline void min(D &dst, const A &a, const B &b) { bin_map<base_ops::min>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ static inline void add(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ static inline void sub(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ static inline void mul(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ static inline void div(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ static inline void max(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ static inline void min(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::min>(dst, a, b); }

