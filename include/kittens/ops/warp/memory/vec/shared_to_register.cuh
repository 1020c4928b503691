// Shared vector <-> register vector, per warp, for all three register vector layouts. Lengths
// must match; element types may differ (values convert).
#pragma once

#include "lanes.cuh"

namespace kittens {

template <ducks::rv::all RV, ducks::sv::all SV> __device__ inline void load(RV &dst, const SV &src) {
    static_assert(RV::length == SV::length, "load(rv, sv): vector lengths must match");
    detail::memory::rv_fill(dst, [&](int i) { return convert<typename RV::T>(src.data[i]); });
}
template <ducks::sv::all SV, ducks::rv::all RV> __device__ inline void store(SV &dst, const RV &src) {
    static_assert(RV::length == SV::length, "store(sv, rv): vector lengths must match");
    detail::memory::rv_drain(src, [&](int i, const typename RV::T &v) { dst.data[i] = convert<typename SV::T>(v); });
    __syncwarp();
}

} // namespace kittens
