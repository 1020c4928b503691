// The named element-wise maps the register tile and vector tests pick at run time, so one kernel
// per type covers every op. The ids are the positions in the UNARY / BINARY tables of
// tests/gpu/lib/test_register_maps.py and test_register_vectors.py.
#pragma once

#include "kittens.cuh"

namespace map_ops {
using namespace kittens;

// op: 0 exp, 1 exp2, 2 log, 3 log2, 4 abs, 5 relu, 6 neg, 7 sqrt, 8 rsqrt.
template <typename D, typename S> __device__ inline void unary(D &dst, const S &src, int op) {
    switch (op) {
    case 0: exp(dst, src); break;
    case 1: exp2(dst, src); break;
    case 2: log(dst, src); break;
    case 3: log2(dst, src); break;
    case 4: abs(dst, src); break;
    case 5: relu(dst, src); break;
    case 6: neg(dst, src); break;
    case 7: sqrt(dst, src); break;
    default: rsqrt(dst, src); break;
    }
}

// op: 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min. b is a tile / vector like a, or a scalar.
template <typename D, typename A, typename B> __device__ inline void binary(D &dst, const A &a, const B &b, int op) {
    switch (op) {
    case 0: add(dst, a, b); break;
    case 1: sub(dst, a, b); break;
    case 2: mul(dst, a, b); break;
    case 3: div(dst, a, b); break;
    case 4: max(dst, a, b); break;
    default: min(dst, a, b); break;
    }
}

} // namespace map_ops
