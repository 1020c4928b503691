// TMA transfers of whole shared tiles. Each function is called by ONE thread (the others would
// issue duplicate copies); `idx` is in tile units for rows and cols: tile (idx.r, idx.c) covers
// rows idx.r*ST::rows .. +ST::rows and cols idx.c*ST::cols .. +ST::cols of slice (idx.b, idx.d).
// A row_coord gives the first row in elements instead (coord.cuh).
//
// A tile is stored as `chunks` column blocks of swizzle width (see st.cuh) and the tensor map's
// box is one such block, so a tile is moved by `chunks` TMA operations, chunk k landing
// k * chunk_bytes into the tile. The gl must list ST among its TMA types.
#pragma once

#include "../../../types/global/gl.cuh"
#include "../../../types/shared/st.cuh"
#include "../semaphore.cuh"
#include "ptx.cuh"
#include "sync.cuh"

namespace kittens {
namespace tma {
namespace detail {

template <ducks::st::all ST, ducks::gl::all GL> constexpr void check_tile_types() {
    static_assert(std::same_as<typename ST::T, typename GL::T>,
                  "TMA tile transfer: the shared tile and the global layout must hold the same element type");
    static_assert(ST::rows <= 256, "TMA boxes are at most 256 rows: split taller tiles");
}

// Calls f(smem_address_of_chunk, col, row, depth, batch) for each column chunk of the tile.
template <ducks::st::all ST, tile_coord C, typename F> __device__ __forceinline__ void for_each_chunk(const ST &t, const C &idx, F &&f) {
    const uint32_t base = smem_addr(t.data);
    const int row = first_row_of(idx, ST::rows);
    const int col = idx.c * ST::cols;
#pragma unroll
    for (int k = 0; k < ST::chunks; k++)
        f(base + uint32_t(k * ST::chunk_bytes), col + k * ST::swizzle_elements, row, idx.d, idx.b);
}

} // namespace detail

// Start copying tile `idx` of `src` into `dst`; completion is signalled on `bar` as
// transfer_bytes<ST> transaction bytes (arm it first with tma::expect<ST>(bar)).
template <ducks::st::all ST, ducks::gl::all GL, tile_coord C = coord>
__device__ inline void load_async(ST &dst, const GL &src, const C &idx, semaphore &bar) {
    detail::check_tile_types<ST, GL>();
    const CUtensorMap *m = src.template get_tma<ST>();
    const uint32_t b = kittens::detail::sem_addr(bar);
    detail::for_each_chunk(dst, idx, [&](uint32_t s, int c, int r, int d, int bb) { detail::load_4d(s, m, b, c, r, d, bb); });
}

// L2 eviction priority for the cache-hinted forms below.
enum class l2 { evict_first, evict_last };
namespace detail {
__device__ __forceinline__ uint64_t policy(l2 hint) {
    return hint == l2::evict_first ? l2_policy_evict_first() : l2_policy_evict_last();
}
} // namespace detail

// load_async with an L2 eviction priority for the source lines.
template <ducks::st::all ST, ducks::gl::all GL, tile_coord C = coord>
__device__ inline void load_async(ST &dst, const GL &src, const C &idx, semaphore &bar, l2 hint) {
    detail::check_tile_types<ST, GL>();
    const CUtensorMap *m = src.template get_tma<ST>();
    const uint32_t b = kittens::detail::sem_addr(bar);
    const uint64_t p = detail::policy(hint);
    detail::for_each_chunk(dst, idx, [&](uint32_t s, int c, int r, int d, int bb) { detail::load_4d_hint(s, m, b, c, r, d, bb, p); });
}

// store_async with an L2 eviction priority for the written lines.
template <ducks::st::all ST, ducks::gl::all GL, tile_coord C = coord>
__device__ inline void store_async(const GL &dst, const ST &src, const C &idx, l2 hint) {
    detail::check_tile_types<ST, GL>();
    const CUtensorMap *m = dst.template get_tma<ST>();
    const uint64_t p = detail::policy(hint);
    store_fence();
    detail::for_each_chunk(src, idx, [&](uint32_t s, int c, int r, int d, int b) { detail::store_4d_hint(m, s, c, r, d, b, p); });
}

// Start writing `src` to tile `idx` of `dst` (rows / cols beyond the tensor are dropped).
// Commit with store_commit_group() and wait with store_async_wait / store_async_read_wait.
template <ducks::st::all ST, ducks::gl::all GL, tile_coord C = coord>
__device__ inline void store_async(const GL &dst, const ST &src, const C &idx) {
    detail::check_tile_types<ST, GL>();
    const CUtensorMap *m = dst.template get_tma<ST>();
    store_fence();
    detail::for_each_chunk(src, idx, [&](uint32_t s, int c, int r, int d, int b) { detail::store_4d(m, s, c, r, d, b); });
}

// dst[tile idx] += src, atomically per element, in the tensor's own precision.
template <ducks::st::all ST, ducks::gl::all GL, tile_coord C = coord>
__device__ inline void store_add_async(const GL &dst, const ST &src, const C &idx) {
    detail::check_tile_types<ST, GL>();
    static_assert(std::same_as<typename ST::T, float> || std::same_as<typename ST::T, bf16> ||
                      std::same_as<typename ST::T, half>,
                  "TMA reduce-add supports float, bf16 and half tiles (fp8 has no TMA add)");
    const CUtensorMap *m = dst.template get_tma<ST>();
    store_fence();
    detail::for_each_chunk(src, idx, [&](uint32_t s, int c, int r, int d, int b) { detail::reduce_add_4d(m, s, c, r, d, b); });
}

// Warm L2 with the box that load_async(dst, src, idx, ...) into a tile of type ST would read (no shared memory is
// involved: prefetch<ST>(src, idx) needs no tile, prefetch(dst, src, idx) takes the type from `dst`).
template <ducks::st::all ST, ducks::gl::all GL> __device__ inline void prefetch(const GL &src, const coord &idx) {
    detail::check_tile_types<ST, GL>();
    const CUtensorMap *m = src.template get_tma<ST>();
    const int row = idx.r * ST::rows, col = idx.c * ST::cols;
#pragma unroll
    for (int k = 0; k < ST::chunks; k++) detail::prefetch_4d(m, col + k * ST::swizzle_elements, row, idx.d, idx.b);
}
template <ducks::st::all ST, ducks::gl::all GL>
__device__ inline void prefetch(ST &, const GL &src, const coord &idx) {
    prefetch<ST>(src, idx);
}

// Fetch every tensor map of `g` into the descriptor cache: issued at launch, it takes the fetch off the first
// load's latency (the first TMA of a block otherwise waits for its map to come from memory).
template <ducks::gl::all GL> __device__ inline void prefetch_maps(const GL &g) {
#pragma unroll
    for (int i = 0; i < GL::num_tma; i++) detail::prefetch_map(&g.tma.m[i]);
}

} // namespace tma
} // namespace kittens
