// Whole-vector reductions: max/min/sum/prod(scalar &dst, v[, acc]) reduce every element of a
// register vector to one scalar, returned in every lane (dst = op(acc, reduction) with acc).
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {

template <typename op, bool has_acc, ducks::rv::all V>
__device__ inline void reduce_vec(typename V::T &dst, const V &src, const typename V::T &acc) {
    using T = typename V::T;
    T a;
    if constexpr (ducks::rv::naive_layout<V>) {
        // Fold this lane's slots (the last one is padding past the end for some lanes), then
        // combine across lanes. A 16-element vector only fills lanes 0..15: reduce inside each
        // half-warp and take lanes 0..15's answer everywhere.
        a = src.data[0][0];
#pragma unroll
        for (int s = 1; s < V::outer_dim; s++)
            if (32 * s + laneid() < V::length) a = op::template op<T>(a, src.data[s][0]);
        constexpr int first_mask = V::length >= WARP_THREADS ? 16 : 8;
#pragma unroll
        for (int m = first_mask; m > 0; m >>= 1) a = op::template op<T>(a, shfl_xor(a, m));
        if constexpr (V::length < WARP_THREADS) a = shfl_idx(a, laneid() & 15);
    } else if constexpr (ducks::rv::ortho_layout<V>) {
        // Lanes with the same g hold the same elements (g and g + 8 of each tile): fold, then
        // combine across the 8 values of g.
        a = op::template op<T>(src.data[0][0], src.data[0][1]);
#pragma unroll
        for (int i = 1; i < V::tiles; i++) a = op::template op<T>(a, op::template op<T>(src.data[i][0], src.data[i][1]));
        a = op::template op<T>(a, shfl_xor(a, 4));
        a = op::template op<T>(a, shfl_xor(a, 8));
        a = op::template op<T>(a, shfl_xor(a, 16));
    } else {
        // align: lanes with the same t hold the same pairs: fold the pairs, then the two halves,
        // then combine across the 4 values of t.
        using T2 = typename V::T2;
        T2 p = op::template op<T2>(src.data[0][0], src.data[0][1]);
#pragma unroll
        for (int i = 1; i < V::tiles; i++) p = op::template op<T2>(p, op::template op<T2>(src.data[i][0], src.data[i][1]));
        a = op::template op<T>(elem(p, 0), elem(p, 1));
        a = op::template op<T>(a, shfl_xor(a, 1));
        a = op::template op<T>(a, shfl_xor(a, 2));
    }
    if constexpr (has_acc) a = op::template op<T>(acc, a);
    dst = a;
}

} // namespace detail::reg

#define KITTENS_VEC_REDUCTION(NAME, OP)                                                                          \
    template <ducks::rv::all V> __device__ inline void NAME(typename V::T &dst, const V &src) {                 \
        detail::reg::reduce_vec<OP, false>(dst, src, dst);                                                       \
    }                                                                                                            \
    template <ducks::rv::all V>                                                                                  \
    __device__ inline void NAME(typename V::T &dst, const V &src, const typename V::T &acc) {                    \
        detail::reg::reduce_vec<OP, true>(dst, src, acc);                                                        \
    }
KITTENS_VEC_REDUCTION(max, base_ops::max)
KITTENS_VEC_REDUCTION(min, base_ops::min)
KITTENS_VEC_REDUCTION(sum, base_ops::sum)
KITTENS_VEC_REDUCTION(prod, base_ops::mul)
#undef KITTENS_VEC_REDUCTION

} // namespace kittens
