// Global <-> register tile loads and stores, per warp, straight from the fragment layout
// (rt_layout.cuh): each lane reads or writes exactly the elements it holds. The element types may
// differ (a float tile can be stored into a bf16 tensor): values convert on the way.
//
// coord{b, d, r, c} counts r in tile heights and c in tile widths. Elements past the tensor's
// edge load as zero and are not stored.
#pragma once

#include "../util.cuh"

namespace kittens {
namespace detail {
namespace memory {

// Where lane data k of base tile (h, w) sits, relative to the tile's first row and column.
// Row layout pairs run along a row; col layout pairs run down a column (rt_layout.cuh).
template <bool IS_ROW> __device__ inline int frag_row(int k, int lane) {
    return IS_ROW ? lane / 4 + 8 * (k & 1) : 2 * (lane % 4) + 8 * (k >> 1);
}
template <bool IS_ROW> __device__ inline int frag_col(int k, int lane) {
    return IS_ROW ? 2 * (lane % 4) + 8 * (k >> 1) : lane / 4 + 8 * (k & 1);
}

// Block row h of the register tile lives at window rows row_step*h .. +15 (row_step = 16 for a
// plain tile; group<N> interleaves its warps' blocks, see ops/group/memory).
template <bool CHECKED, ducks::rt::all RT, typename T>
__device__ inline void rt_from_window(RT &dst, const window<T> &w, int row_step) {
    using GT2 = base_types::packed_t<T>;
    const int lane = laneid();
#pragma unroll
    for (int h = 0; h < RT::height; h++) {
#pragma unroll
        for (int x = 0; x < RT::width; x++) {
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++) {
                const int r = h * row_step + frag_row<RT::is_row>(k, lane);
                const int c = x * TILE_DIM + frag_col<RT::is_row>(k, lane);
                GT2 p;
                T *e = reinterpret_cast<T *>(&p);
                if constexpr (RT::is_row) { // (r, c), (r, c+1): one access when aligned and inside
                    if (!CHECKED || (w.vec_pair && w.inside(r, c + 1))) {
                        p = *reinterpret_cast<const GT2 *>(w.at(r, c));
                    } else {
                        e[0] = w.read(r, c);
                        e[1] = w.read(r, c + 1);
                    }
                } else { // (r, c), (r+1, c)
                    e[0] = CHECKED ? w.read(r, c) : *w.at(r, c);
                    e[1] = CHECKED ? w.read(r + 1, c) : *w.at(r + 1, c);
                }
                dst.tiles[h][x].data[k] = convert<typename RT::T2>(p);
            }
        }
    }
}

template <bool CHECKED, ducks::rt::all RT, typename T>
__device__ inline void rt_to_window(const window<T> &w, const RT &src, int row_step) {
    using GT2 = base_types::packed_t<T>;
    const int lane = laneid();
#pragma unroll
    for (int h = 0; h < RT::height; h++) {
#pragma unroll
        for (int x = 0; x < RT::width; x++) {
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++) {
                const int r = h * row_step + frag_row<RT::is_row>(k, lane);
                const int c = x * TILE_DIM + frag_col<RT::is_row>(k, lane);
                const GT2 p = convert<GT2>(src.tiles[h][x].data[k]);
                const T *e = reinterpret_cast<const T *>(&p);
                if constexpr (RT::is_row) {
                    if (!CHECKED || (w.vec_pair && w.inside(r, c + 1))) {
                        *reinterpret_cast<GT2 *>(w.at(r, c)) = p;
                    } else {
                        w.write(r, c, e[0]);
                        w.write(r, c + 1, e[1]);
                    }
                } else {
                    if (CHECKED) {
                        w.write(r, c, e[0]);
                        w.write(r + 1, c, e[1]);
                    } else {
                        *w.at(r, c) = e[0];
                        *w.at(r + 1, c) = e[1];
                    }
                }
            }
        }
    }
}

// The unchecked variant runs only when every element is inside and pairs are aligned.
template <ducks::rt::all RT, typename T> __device__ inline bool rt_fits(const window<T> &w, int row_step) {
    return w.vec_pair && w.rows_left >= (RT::height - 1) * row_step + TILE_DIM && w.cols_left >= RT::cols;
}
template <ducks::rt::all RT, typename T>
__device__ inline void load_rt(RT &dst, const window<T> &w, int row_step) {
    if (rt_fits<RT>(w, row_step)) rt_from_window<false>(dst, w, row_step);
    else rt_from_window<true>(dst, w, row_step);
}
template <ducks::rt::all RT, typename T>
__device__ inline void store_rt(const window<T> &w, const RT &src, int row_step) {
    if (rt_fits<RT>(w, row_step)) rt_to_window<false>(w, src, row_step);
    else rt_to_window<true>(w, src, row_step);
}

} // namespace memory
} // namespace detail

template <ducks::rt::all RT, ducks::gl::all GL> __device__ inline void load(RT &dst, const GL &src, const coord &idx) {
    const auto w = detail::memory::make_window(src, idx.b, idx.d, idx.r * RT::rows, idx.c * RT::cols);
    detail::memory::load_rt(dst, w, TILE_DIM);
}
template <ducks::rt::all RT, ducks::gl::all GL> __device__ inline void store(const GL &dst, const RT &src, const coord &idx) {
    const auto w = detail::memory::make_window(dst, idx.b, idx.d, idx.r * RT::rows, idx.c * RT::cols);
    detail::memory::store_rt(w, src, TILE_DIM);
}

} // namespace kittens
