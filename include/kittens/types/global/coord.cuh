// Coordinates into a 4-D global layout (batch, depth, row, col). Tile loads and stores take the
// row and col in units of the tile's own height and width, as in load(tile, g, {b, h, i, j}).
#pragma once

namespace kittens {
struct coord {
    int b = 0, d = 0, r = 0, c = 0;
    constexpr coord() = default;
    __host__ __device__ constexpr coord(int b_, int d_, int r_, int c_) : b(b_), d(d_), r(r_), c(c_) {}
    __host__ __device__ constexpr coord(int d_, int r_, int c_) : b(0), d(d_), r(r_), c(c_) {}
    __host__ __device__ constexpr coord(int r_, int c_) : b(0), d(0), r(r_), c(c_) {}
    __host__ __device__ constexpr coord(int c_) : b(0), d(0), r(0), c(c_) {}
};
} // namespace kittens
