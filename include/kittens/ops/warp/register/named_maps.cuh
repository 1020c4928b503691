// Named element-wise ops for register tiles and register vectors alike, destination first:
//   zero/one/pos_infty/neg_infty(dst)
//   exp, exp2, log, log2, abs, relu, neg, sqrt, rsqrt (dst, src)
//   add, sub, mul, div, max, min (dst, a, b) with b a tile/vector of the same type or a scalar
// They forward to fill / unary_map / bin_map (tile/maps.cuh, vec/maps.cuh).
#pragma once

#include <cmath>

#include "lanes.cuh"
#include "tile/maps.cuh"
#include "vec/maps.cuh"

namespace kittens {

// These names would hide the global scalar math functions from unqualified calls made inside
// namespace kittens (name lookup stops at the first scope that declares the name), so the
// scalar overloads are re-declared here: exp(1.f) or max(a, b) on plain numbers keep working.
using ::abs;
using ::exp;
using ::exp2;
using ::log;
using ::log2;
using ::max;
using ::min;
using ::rsqrt;
using ::sqrt;

template <ducks::reg::all D> __device__ inline void zero(D &dst) { fill(dst, base_types::constants<typename D::T>::zero()); }
template <ducks::reg::all D> __device__ inline void one(D &dst) { fill(dst, base_types::constants<typename D::T>::one()); }
template <ducks::reg::all D> __device__ inline void pos_infty(D &dst) {
    fill(dst, base_types::constants<typename D::T>::pos_infty());
}
template <ducks::reg::all D> __device__ inline void neg_infty(D &dst) {
    fill(dst, base_types::constants<typename D::T>::neg_infty());
}

#define KITTENS_NAMED_UNARY(NAME, OP)                                                                            \
    template <ducks::reg::all D, ducks::reg::all S> __device__ inline void NAME(D &dst, const S &src) {        \
        unary_map<OP>(dst, src);                                                                                 \
    }
KITTENS_NAMED_UNARY(exp, base_ops::exp)
KITTENS_NAMED_UNARY(exp2, base_ops::exp2)
KITTENS_NAMED_UNARY(log, base_ops::log)
KITTENS_NAMED_UNARY(log2, base_ops::log2)
KITTENS_NAMED_UNARY(abs, base_ops::abs)
KITTENS_NAMED_UNARY(relu, base_ops::relu)
KITTENS_NAMED_UNARY(neg, base_ops::neg)
KITTENS_NAMED_UNARY(sqrt, base_ops::sqrt)
KITTENS_NAMED_UNARY(rsqrt, base_ops::rsqrt)
#undef KITTENS_NAMED_UNARY

// b is either an object of dst's type or one scalar of its element type (bin_map picks).
#define KITTENS_NAMED_BINARY(NAME, OP)                                                                           \
    template <ducks::reg::all D, ducks::reg::all A, typename B>                                                 \
    __device__ inline void NAME(D &dst, const A &a, const B &b) {                                                \
        bin_map<OP>(dst, a, b);                                                                                  \
    }
KITTENS_NAMED_BINARY(add, base_ops::sum)
KITTENS_NAMED_BINARY(sub, base_ops::sub)
KITTENS_NAMED_BINARY(mul, base_ops::mul)
KITTENS_NAMED_BINARY(div, base_ops::div)
KITTENS_NAMED_BINARY(max, base_ops::max)
KITTENS_NAMED_BINARY(min, base_ops::min)
#undef KITTENS_NAMED_BINARY

} // namespace kittens
