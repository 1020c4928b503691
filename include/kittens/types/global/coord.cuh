// Coordinates into a 4-D global layout (batch, depth, row, col). Tile loads and stores take the
// row and col in units of the tile's own height and width, as in load(tile, g, {b, h, i, j}).
#pragma once

#include <concepts>

namespace kittens {
struct coord {
    int b = 0, d = 0, r = 0, c = 0;
    constexpr coord() = default;
    __host__ __device__ constexpr coord(int b_, int d_, int r_, int c_) : b(b_), d(d_), r(r_), c(c_) {}
    __host__ __device__ constexpr coord(int d_, int r_, int c_) : b(0), d(d_), r(r_), c(c_) {}
    __host__ __device__ constexpr coord(int r_, int c_) : b(0), d(0), r(r_), c(c_) {}
    __host__ __device__ constexpr coord(int c_) : b(0), d(0), r(0), c(c_) {}
};

// A tile position whose row is in elements instead of tile units: a tile that starts at any row (inside a packed
// sequence, say). The transfer is the same; rows past the tensor's end still read zeros and are dropped on stores.
struct row_coord {
    int b = 0, d = 0, row = 0, c = 0;
    constexpr row_coord() = default;
    __host__ __device__ constexpr row_coord(int b_, int d_, int row_, int c_) : b(b_), d(d_), row(row_), c(c_) {}
};

// Where a tile of `rows` rows starting at `idx` begins, in elements.
__host__ __device__ constexpr int first_row_of(const coord &idx, int rows) { return idx.r * rows; }
__host__ __device__ constexpr int first_row_of(const row_coord &idx, int) { return idx.row; }
template <typename C>
concept tile_coord = std::same_as<C, coord> || std::same_as<C, row_coord>;
} // namespace kittens
