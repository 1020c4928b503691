// Element-wise ops on shared tiles and shared vectors alike, per warp: initialisers, copy, unary
// and binary maps (operand-operand and operand-scalar). Operands are all tiles or all vectors;
// the bodies in detail.cuh pick the tile or vector walk. dst may alias any source. Every op ends
// with __syncwarp(), so the warp may use the result at once.
#pragma once

#include "detail.cuh"

namespace kittens {

namespace ducks::shared {
// A shared tile or a shared vector.
template <typename T> concept all = st::all<T> || sv::all<T>;
// The same kind of shared operand as Ref (tile with tile, vector with vector), so a mix is
// rejected at the call.
template <typename T, typename Ref> concept like = (st::all<Ref> && st::all<T>) || (sv::all<Ref> && sv::all<T>);
} // namespace ducks::shared

// ----- generic forms: any base_ops functor -----
template <ducks::shared::all S> __device__ inline void fill(S &dst, const typename S::T &value) {
    detail::shared_ops::fill<WARP_THREADS>(dst, value, laneid());
    __syncwarp();
}
template <typename op, ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void unary_map(D &dst, const S &src) {
    detail::shared_ops::unary_map<op, WARP_THREADS>(dst, src, laneid());
    __syncwarp();
}
template <typename op, ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B>
__device__ inline void bin_map(D &dst, const A &a, const B &b) {
    detail::shared_ops::bin_map<op, WARP_THREADS>(dst, a, b, laneid());
    __syncwarp();
}
template <typename op, ducks::shared::all D, ducks::shared::like<D> A>
__device__ inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    detail::shared_ops::bin_map_scalar<op, WARP_THREADS>(dst, a, b, laneid());
    __syncwarp();
}
// Same shape; element types may differ (values convert).
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void copy(D &dst, const S &src) {
    detail::shared_ops::copy<WARP_THREADS>(dst, src, laneid());
    __syncwarp();
}

// ----- initialisers -----
template <ducks::shared::all S> __device__ inline void zero(S &dst) { fill(dst, base_types::constants<typename S::T>::zero()); }
template <ducks::shared::all S> __device__ inline void one(S &dst) { fill(dst, base_types::constants<typename S::T>::one()); }
template <ducks::shared::all S> __device__ inline void pos_infty(S &dst) { fill(dst, base_types::constants<typename S::T>::pos_infty()); }
template <ducks::shared::all S> __device__ inline void neg_infty(S &dst) { fill(dst, base_types::constants<typename S::T>::neg_infty()); }

// ----- unary -----
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void exp(D &dst, const S &src) { unary_map<base_ops::exp>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void exp2(D &dst, const S &src) { unary_map<base_ops::exp2>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void log(D &dst, const S &src) { unary_map<base_ops::log>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void abs(D &dst, const S &src) { unary_map<base_ops::abs>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void relu(D &dst, const S &src) { unary_map<base_ops::relu>(dst, src); }
template <ducks::shared::all D, ducks::shared::like<D> S> __device__ inline void neg(D &dst, const S &src) { unary_map<base_ops::neg>(dst, src); }

// ----- binary: operand-operand and operand-scalar -----
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ inline void add(D &dst, const A &a, const B &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ inline void sub(D &dst, const A &a, const B &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ inline void mul(D &dst, const A &a, const B &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ inline void div(D &dst, const A &a, const B &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ inline void max(D &dst, const A &a, const B &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A, ducks::shared::like<D> B> __device__ inline void min(D &dst, const A &a, const B &b) { bin_map<base_ops::min>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ inline void add(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sum>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ inline void sub(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::sub>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ inline void mul(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::mul>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ inline void div(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::div>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ inline void max(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::max>(dst, a, b); }
template <ducks::shared::all D, ducks::shared::like<D> A> __device__ inline void min(D &dst, const A &a, const typename D::T &b) { bin_map<base_ops::min>(dst, a, b); }

} // namespace kittens
