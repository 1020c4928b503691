// Included inside struct group<N_WARPS>: member functions only.
// Shared-vector ops split over the group's threads (no trailing barrier: call sync()).

template <ducks::sv::all SV> __device__ static inline void fill(SV &dst, const typename SV::T &value) {
    ::kittens::detail::shared_ops::fill<GROUP_THREADS>(dst, value, laneid());
}
template <typename op, ducks::sv::all D, ducks::sv::all S> __device__ static inline void unary_map(D &dst, const S &src) {
    ::kittens::detail::shared_ops::unary_map<op, GROUP_THREADS>(dst, src, laneid());
}
template <typename op, ducks::sv::all D, ducks::sv::all A, ducks::sv::all B>
__device__ static inline void bin_map(D &dst, const A &a, const B &b) {
    ::kittens::detail::shared_ops::bin_map<op, GROUP_THREADS>(dst, a, b, laneid());
}
template <typename op, ducks::sv::all D, ducks::sv::all A>
__device__ static inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    ::kittens::detail::shared_ops::bin_map_scalar<op, GROUP_THREADS>(dst, a, b, laneid());
}
template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void copy(D &dst, const S &src) {
    ::kittens::detail::shared_ops::copy<GROUP_THREADS>(dst, src, laneid());
}

template <ducks::sv::all SV> __device__ static inline void zero(SV &dst) { fill(dst, base_types::constants<typename SV::T>::zero()); }
template <ducks::sv::all SV> __device__ static inline void one(SV &dst) { fill(dst, base_types::constants<typename SV::T>::one()); }
template <ducks::sv::all SV> __device__ static inline void pos_infty(SV &dst) { fill(dst, base_types::constants<typename SV::T>::pos_infty()); }
template <ducks::sv::all SV> __device__ static inline void neg_infty(SV &dst) { fill(dst, base_types::constants<typename SV::T>::neg_infty()); }

template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void exp(D &dst, const S &src) { unary_map<base_ops::exp>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void exp2(D &dst, const S &src) { unary_map<base_ops::exp2>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void log(D &dst, const S &src) { unary_map<base_ops::log>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void abs(D &dst, const S &src) { unary_map<base_ops::abs>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void relu(D &dst, const S &src) { unary_map<base_ops::relu>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ static inline void neg(D &dst, const S &src) { unary_map<base_ops::neg>(dst, src); }

template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ static inline void add(D &dst, const A &a, const B &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ static inline void sub(D &dst, const A &a, const B &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ static inline void mul(D &dst, const A &a, const B &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ static inline void div(D &dst, const A &a, const B &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ static inline void max(D &dst, const A &a, const B &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ static inline void min(D &dst, const A &a, const B &b) { bin_map<base_ops::min>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ static inline void add(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ static inline void sub(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ static inline void mul(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ static inline void div(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ static inline void max(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ static inline void min(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::min>(dst, a, b); }
