// Element-wise ops on shared vectors, per warp: initialisers, copy, unary and binary maps
// (vector-vector and vector-scalar). dst may alias any source. Every op ends with __syncwarp().
#pragma once

#include "../detail.cuh"

namespace kittens {

template <ducks::sv::all SV> __device__ inline void fill(SV &dst, const typename SV::T &value) {
    detail::shared_ops::fill<WARP_THREADS>(dst, value, laneid());
    __syncwarp();
}
template <typename op, ducks::sv::all D, ducks::sv::all S> __device__ inline void unary_map(D &dst, const S &src) {
    detail::shared_ops::unary_map<op, WARP_THREADS>(dst, src, laneid());
    __syncwarp();
}
template <typename op, ducks::sv::all D, ducks::sv::all A, ducks::sv::all B>
__device__ inline void bin_map(D &dst, const A &a, const B &b) {
    detail::shared_ops::bin_map<op, WARP_THREADS>(dst, a, b, laneid());
    __syncwarp();
}
template <typename op, ducks::sv::all D, ducks::sv::all A>
__device__ inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    detail::shared_ops::bin_map_scalar<op, WARP_THREADS>(dst, a, b, laneid());
    __syncwarp();
}
// Same length; element types may differ (values convert).
template <ducks::sv::all D, ducks::sv::all S> __device__ inline void copy(D &dst, const S &src) {
    detail::shared_ops::copy<WARP_THREADS>(dst, src, laneid());
    __syncwarp();
}

template <ducks::sv::all SV> __device__ inline void zero(SV &dst) { fill(dst, base_types::constants<typename SV::T>::zero()); }
template <ducks::sv::all SV> __device__ inline void one(SV &dst) { fill(dst, base_types::constants<typename SV::T>::one()); }
template <ducks::sv::all SV> __device__ inline void pos_infty(SV &dst) { fill(dst, base_types::constants<typename SV::T>::pos_infty()); }
template <ducks::sv::all SV> __device__ inline void neg_infty(SV &dst) { fill(dst, base_types::constants<typename SV::T>::neg_infty()); }

template <ducks::sv::all D, ducks::sv::all S> __device__ inline void exp(D &dst, const S &src) { unary_map<base_ops::exp>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ inline void exp2(D &dst, const S &src) { unary_map<base_ops::exp2>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ inline void log(D &dst, const S &src) { unary_map<base_ops::log>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ inline void abs(D &dst, const S &src) { unary_map<base_ops::abs>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ inline void relu(D &dst, const S &src) { unary_map<base_ops::relu>(dst, src); }
template <ducks::sv::all D, ducks::sv::all S> __device__ inline void neg(D &dst, const S &src) { unary_map<base_ops::neg>(dst, src); }

template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ inline void add(D &dst, const A &a, const B &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ inline void sub(D &dst, const A &a, const B &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ inline void mul(D &dst, const A &a, const B &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ inline void div(D &dst, const A &a, const B &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ inline void max(D &dst, const A &a, const B &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A, ducks::sv::all B> __device__ inline void min(D &dst, const A &a, const B &b) { bin_map<base_ops::min>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ inline void add(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ inline void sub(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ inline void mul(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ inline void div(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ inline void max(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::sv::all D, ducks::sv::all A> __device__ inline void min(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::min>(dst, a, b); }

} // namespace kittens
