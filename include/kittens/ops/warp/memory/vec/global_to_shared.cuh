// Global <-> shared vector copies, per warp. A vector is a run of `length` elements along the
// columns of one tensor row: coord{b, d, r, c} takes r in elements (the row) and c in vector
// lengths. Out-of-range elements are zero-filled on load and skipped on store.
#pragma once

#include "../util.cuh"

namespace kittens {
namespace detail {
namespace memory {

template <ducks::sv::all SV, ducks::gl::all GL> constexpr void check_sv_gl() {
    static_assert(std::same_as<typename SV::T, typename GL::T>,
                  "global <-> shared copies need the same element type on both sides (convert in registers)");
}
template <ducks::sv::all SV, ducks::gl::all GL>
__device__ inline window<typename GL::T> vec_window(const GL &g, const coord &idx) {
    return make_window(g, idx.b, idx.d, idx.r, idx.c * SV::length);
}
template <ducks::sv::all SV> __device__ inline auto vec_addr(const SV &v) {
    const uint32_t base = smem_addr(v.data);
    return [base](int, int c) { return base + uint32_t(c * int(sizeof(typename SV::T))); };
}

template <int THREADS, ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void load_sv(SV &dst, const GL &src, const coord &idx, int tid) {
    check_sv_gl<SV, GL>();
    global_to_shared<1, SV::length, THREADS>(vec_addr(dst), vec_window<SV>(src, idx), tid);
}
template <int THREADS, ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void store_sv(const GL &dst, const SV &src, const coord &idx, int tid) {
    check_sv_gl<SV, GL>();
    shared_to_global<1, SV::length, THREADS>(vec_window<SV>(dst, idx), vec_addr(src), tid);
}
template <int THREADS, ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void load_sv_async(SV &dst, const GL &src, const coord &idx, int tid) {
    check_sv_gl<SV, GL>();
    global_to_shared_async<1, SV::length, THREADS>(vec_addr(dst), vec_window<SV>(src, idx), tid);
}

} // namespace memory
} // namespace detail

template <ducks::sv::all SV, ducks::gl::all GL> __device__ inline void load(SV &dst, const GL &src, const coord &idx) {
    detail::memory::load_sv<WARP_THREADS>(dst, src, idx, laneid());
    __syncwarp();
}
template <ducks::sv::all SV, ducks::gl::all GL> __device__ inline void store(const GL &dst, const SV &src, const coord &idx) {
    detail::memory::store_sv<WARP_THREADS>(dst, src, idx, laneid());
    __syncwarp();
}
// One commit group per call; complete after load_async_wait<N>() (see tile/global_to_shared.cuh).
template <ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void load_async(SV &dst, const GL &src, const coord &idx) {
    detail::memory::load_sv_async<WARP_THREADS>(dst, src, idx, laneid());
}

} // namespace kittens
