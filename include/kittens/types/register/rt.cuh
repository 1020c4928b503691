// Register tiles: a (rows x cols) matrix held by one warp as a grid of 16x16 base tiles.
#pragma once

#include "../../common/common.cuh"
#include "rt_layout.cuh"
#include "rv.cuh"

namespace kittens {
namespace ducks {
namespace rt {
struct identifier {};
template <typename T>
concept all = requires { typename T::identifier; } && std::same_as<typename T::identifier, identifier>;
template <typename T> concept row_layout = all<T> && std::same_as<typename T::layout, rt_layout::row>;
template <typename T> concept col_layout = all<T> && std::same_as<typename T::layout, rt_layout::col>;
} // namespace rt
} // namespace ducks

// One 16x16 tile: 8 elements per lane as 4 packed pairs (order documented in rt_layout.cuh).
template <typename _T, ducks::rt_layout::all _layout> struct rt_base {
    static_assert(base_types::T1<_T>, "register tiles hold float, bf16, half or fp8 elements");
    using layout = _layout;
    using T = _T;
    using T2 = base_types::packed_t<_T>;
    static constexpr int rows = TILE_DIM, cols = TILE_DIM;
    static constexpr int num_elements = rows * cols;
    static constexpr int elements_per_thread = num_elements / WARP_THREADS; // 8
    static constexpr int packed_per_thread = elements_per_thread / 2;       // 4
    T2 data[packed_per_thread];
};

template <typename _T, int _rows, int _cols, ducks::rt_layout::all _layout = row_l> struct rt {
    static_assert(_rows > 0 && _rows % TILE_DIM == 0, "register tile rows must be a positive multiple of 16");
    static_assert(_cols > 0 && _cols % TILE_DIM == 0, "register tile cols must be a positive multiple of 16");
    using identifier = ducks::rt::identifier;
    using layout = _layout;
    using T = _T;
    using T2 = base_types::packed_t<_T>;
    using base = rt_base<_T, _layout>;
    static constexpr int rows = _rows, cols = _cols;
    static constexpr int height = _rows / TILE_DIM, width = _cols / TILE_DIM;
    static constexpr int num_elements = rows * cols;
    static constexpr int elements_per_thread = num_elements / WARP_THREADS;
    static constexpr int packed_per_tile = base::packed_per_thread;
    static constexpr bool is_row = std::same_as<_layout, row_l>;

    // col_vec: one value per row; row_vec: one value per column.
    using col_vec = rv<_T, _rows, std::conditional_t<is_row, ortho_l, align_l>>;
    using row_vec = rv<_T, _cols, std::conditional_t<is_row, align_l, ortho_l>>;

    base tiles[height][width];
};

template <int R, int C, ducks::rt_layout::all L = row_l> using rt_fl = rt<float, R, C, L>;
template <int R, int C, ducks::rt_layout::all L = row_l> using rt_bf = rt<bf16, R, C, L>;
template <int R, int C, ducks::rt_layout::all L = row_l> using rt_hf = rt<half, R, C, L>;
template <int R, int C, ducks::rt_layout::all L = row_l> using rt_fp8e4m3 = rt<fp8e4m3, R, C, L>;
template <int R, int C, ducks::rt_layout::all L = row_l> using rt_fp8e5m2 = rt<fp8e5m2, R, C, L>;

// Shorthand that follows a tile type: col_vec<rt_fl<64,64>>.
template <ducks::rt::all RT> using col_vec = typename RT::col_vec;
template <ducks::rt::all RT> using row_vec = typename RT::row_vec;

} // namespace kittens
