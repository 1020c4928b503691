// Element-wise maps over register vectors. A lane applies the functor to every value it holds:
// scalars for naive and ortho vectors, packed pairs for align vectors. Lanes of a naive vector
// whose last slot lies past the end hold padding; maps may compute garbage there, and nothing
// reads it as data (reductions and conversions skip it).
#pragma once

#include "../lanes.cuh"

namespace kittens {

// Every element of dst set to `value`.
template <ducks::rv::all RV> __device__ inline void fill(RV &dst, const typename RV::T &value) {
    using dtype = typename RV::dtype;
    dtype v;
    if constexpr (base_types::T2<dtype>) v = base_types::constants<dtype>::pair(value);
    else v = value;
#pragma unroll
    for (int i = 0; i < RV::outer_dim; i++)
#pragma unroll
        for (int j = 0; j < RV::inner_dim; j++) dst.data[i][j] = v;
}

// dst = op(src), element-wise; both vectors of the same type.
template <typename op, ducks::rv::all D, ducks::rv::all S> __device__ inline void unary_map(D &dst, const S &src) {
    constexpr bool ok = std::same_as<D, S>;
    static_assert(ok, "unary_map: dst and src must be the same vector type (use copy() to convert)");
    if constexpr (ok) {
#pragma unroll
        for (int i = 0; i < D::outer_dim; i++)
#pragma unroll
            for (int j = 0; j < D::inner_dim; j++) dst.data[i][j] = op::template op<typename D::dtype>(src.data[i][j]);
    }
}

// dst = op(a, b), element-wise over two vectors of the same type.
template <typename op, ducks::rv::all D, ducks::rv::all A, ducks::rv::all B>
__device__ inline void bin_map(D &dst, const A &a, const B &b) {
    constexpr bool ok = std::same_as<D, A> && std::same_as<D, B>;
    static_assert(ok, "bin_map: dst, a and b must be the same vector type (same dtype, length and layout)");
    if constexpr (ok) {
#pragma unroll
        for (int i = 0; i < D::outer_dim; i++)
#pragma unroll
            for (int j = 0; j < D::inner_dim; j++)
                dst.data[i][j] = op::template op<typename D::dtype>(a.data[i][j], b.data[i][j]);
    }
}

// dst = op(a, b) with one scalar b for every element.
template <typename op, ducks::rv::all D, ducks::rv::all A>
__device__ inline void bin_map(D &dst, const A &a, const typename D::T &b) {
    constexpr bool ok = std::same_as<D, A>;
    static_assert(ok, "bin_map: dst and a must be the same vector type (same dtype, length and layout)");
    using dtype = typename D::dtype;
    dtype b2;
    if constexpr (base_types::T2<dtype>) b2 = base_types::constants<dtype>::pair(b);
    else b2 = b;
    if constexpr (ok) {
#pragma unroll
        for (int i = 0; i < D::outer_dim; i++)
#pragma unroll
            for (int j = 0; j < D::inner_dim; j++) dst.data[i][j] = op::template op<dtype>(a.data[i][j], b2);
    }
}

} // namespace kittens
