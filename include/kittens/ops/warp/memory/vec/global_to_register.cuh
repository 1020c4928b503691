// Global <-> register vector, per warp. coord{b, d, r, c}: r is the tensor row (in elements),
// c counts vector lengths along the columns. Element types may differ (values convert).
// Elements past the tensor's edge load as zero and are not stored.
#pragma once

#include "lanes.cuh"

namespace kittens {

template <ducks::rv::all RV, ducks::gl::all GL> __device__ inline void load(RV &dst, const GL &src, const coord &idx) {
    const auto w = detail::memory::make_window(src, idx.b, idx.d, idx.r, idx.c * RV::length);
    detail::memory::rv_fill(dst, [&](int i) { return convert<typename RV::T>(w.read(0, i)); });
}
template <ducks::rv::all RV, ducks::gl::all GL> __device__ inline void store(const GL &dst, const RV &src, const coord &idx) {
    const auto w = detail::memory::make_window(dst, idx.b, idx.d, idx.r, idx.c * RV::length);
    detail::memory::rv_drain(src, [&](int i, const typename RV::T &v) { w.write(0, i, convert<typename GL::T>(v)); });
}

} // namespace kittens
