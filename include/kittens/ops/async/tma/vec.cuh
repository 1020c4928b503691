// TMA transfers of shared vectors: a vector is one row segment of the tensor, SV::length
// elements long. idx.c counts vectors along the row (cols idx.c*length .. +length), idx.r is the
// row, idx.d / idx.b the slice. Called by ONE thread, like the tile forms.
#pragma once

#include "../../../types/global/gl.cuh"
#include "../../../types/shared/sv.cuh"
#include "../semaphore.cuh"
#include "ptx.cuh"
#include "sync.cuh"

namespace kittens {
namespace tma {
namespace detail {
template <ducks::sv::all SV, ducks::gl::all GL> constexpr void check_vec_types() {
    static_assert(std::same_as<typename SV::T, typename GL::T>,
                  "TMA vector transfer: the shared vector and the global layout must hold the same element type");
}
} // namespace detail

template <ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void load_async(SV &dst, const GL &src, const coord &idx, semaphore &bar) {
    detail::check_vec_types<SV, GL>();
    detail::load_4d(smem_addr(dst.data), src.template get_tma<SV>(), kittens::detail::sem_addr(bar),
                    idx.c * SV::length, idx.r, idx.d, idx.b);
}

template <ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void store_async(const GL &dst, const SV &src, const coord &idx) {
    detail::check_vec_types<SV, GL>();
    store_fence();
    detail::store_4d(dst.template get_tma<SV>(), smem_addr(src.data), idx.c * SV::length, idx.r, idx.d, idx.b);
}

template <ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void store_add_async(const GL &dst, const SV &src, const coord &idx) {
    detail::check_vec_types<SV, GL>();
    static_assert(std::same_as<typename SV::T, float> || std::same_as<typename SV::T, bf16> ||
                      std::same_as<typename SV::T, half>,
                  "TMA reduce-add supports float, bf16 and half vectors (fp8 has no TMA add)");
    store_fence();
    detail::reduce_add_4d(dst.template get_tma<SV>(), smem_addr(src.data), idx.c * SV::length, idx.r, idx.d, idx.b);
}

template <ducks::sv::all SV, ducks::gl::all GL>
__device__ inline void prefetch(SV &, const GL &src, const coord &idx) {
    detail::check_vec_types<SV, GL>();
    detail::prefetch_4d(src.template get_tma<SV>(), idx.c * SV::length, idx.r, idx.d, idx.b);
}

} // namespace tma
} // namespace kittens
