// Global <-> shared tile copies, per warp: synchronous load/store and cp.async load_async.
//
// coord{b, d, r, c} counts r in tile heights and c in tile widths. Rows and columns past the
// tensor's edge are zero-filled on load and skipped on store; nothing outside is ever touched.
// The global element type must equal the tile's: conversions happen on the way into registers.
#pragma once

#include "../util.cuh"

namespace kittens {
namespace detail {
namespace memory {

template <ducks::st::all ST, ducks::gl::all GL> constexpr void check_st_gl() {
    static_assert(std::same_as<typename ST::T, typename GL::T>,
                  "global <-> shared copies need the same element type on both sides (convert in registers)");
}
template <ducks::st::all ST, ducks::gl::all GL>
__device__ inline window<typename GL::T> tile_window(const GL &g, const coord &idx) {
    return make_window(g, idx.b, idx.d, idx.r * ST::rows, idx.c * ST::cols);
}

template <int THREADS, ducks::st::all ST, ducks::gl::all GL>
__device__ inline void load_st(ST &dst, const GL &src, const coord &idx, int tid) {
    check_st_gl<ST, GL>();
    global_to_shared<ST::rows, ST::cols, THREADS>([&](int r, int c) { return dst.idx(r, c); },
                                                  tile_window<ST>(src, idx), tid);
}
template <int THREADS, ducks::st::all ST, ducks::gl::all GL>
__device__ inline void store_st(const GL &dst, const ST &src, const coord &idx, int tid) {
    check_st_gl<ST, GL>();
    shared_to_global<ST::rows, ST::cols, THREADS>(tile_window<ST>(dst, idx),
                                                  [&](int r, int c) { return src.idx(r, c); }, tid);
}
// Only the tile's first `rows` rows, the tile starting at element row idx.row: a tile that ends inside a packed
// sequence, whose later rows belong to the next one.
template <int THREADS, ducks::st::all ST, ducks::gl::all GL>
__device__ inline void store_st_rows(const GL &dst, const ST &src, const row_coord &idx, int rows, int tid) {
    check_st_gl<ST, GL>();
    window<typename GL::T> w = make_window(dst, idx.b, idx.d, idx.row, idx.c * ST::cols);
    w.rows_left = min(w.rows_left, rows);
    shared_to_global<ST::rows, ST::cols, THREADS>(w, [&](int r, int c) { return src.idx(r, c); }, tid);
}
template <int THREADS, ducks::st::all ST, ducks::gl::all GL>
__device__ inline void load_st_async(ST &dst, const GL &src, const coord &idx, int tid) {
    check_st_gl<ST, GL>();
    global_to_shared_async<ST::rows, ST::cols, THREADS>([&](int r, int c) { return dst.idx(r, c); },
                                                        tile_window<ST>(src, idx), tid);
}

} // namespace memory
} // namespace detail

// Synchronous: when it returns, the whole warp sees the tile (it ends with __syncwarp).
template <ducks::st::all ST, ducks::gl::all GL> __device__ inline void load(ST &dst, const GL &src, const coord &idx) {
    detail::memory::load_st<WARP_THREADS>(dst, src, idx, laneid());
    __syncwarp();
}
template <ducks::st::all ST, ducks::gl::all GL> __device__ inline void store(const GL &dst, const ST &src, const coord &idx) {
    detail::memory::store_st<WARP_THREADS>(dst, src, idx, laneid());
    __syncwarp();
}

// Asynchronous: issues cp.async copies as one commit group and returns at once. The tile is
// valid after load_async_wait<N>(), which waits until at most N newer groups are in flight.
template <ducks::st::all ST, ducks::gl::all GL>
__device__ inline void load_async(ST &dst, const GL &src, const coord &idx) {
    detail::memory::load_st_async<WARP_THREADS>(dst, src, idx, laneid());
}
// Closes a commit group by hand (load_async already closes one per call).
__device__ inline void load_async_commit() { detail::memory::cp_async_commit(); }
// Waits for this thread's copies, then syncs the warp so every lane sees every lane's copies.
// Use group<N>::load_async_wait when several warps filled the tile together.
template <int N = 0> __device__ inline void load_async_wait() {
    detail::memory::cp_async_wait<N>();
    __syncwarp();
}

} // namespace kittens
