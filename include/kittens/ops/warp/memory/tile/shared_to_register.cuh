// Shared tile <-> register tile, per warp.
//
// 16-bit shared tiles move through ldmatrix / stmatrix (x4: one 16x16 base tile per instruction),
// with .trans for col-layout register tiles. Since the shared swizzle keeps each 16-byte row
// segment intact, every lane just supplies the address of one 8-element row segment. Other
// element sizes (fp32, fp8) take a scalar path. Register and shared element types may differ;
// values convert in registers.
//
// A register tile may be read from (or written to) a part of a larger shared tile: the
// row_offset / col_offset overloads take the element position of the register tile's top-left
// corner, which must be a multiple of 16 in both directions.
#pragma once

#include "../util.cuh"
#include "global_to_register.cuh"

namespace kittens {
namespace detail {
namespace memory {

template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4(uint32_t (&x)[4], uint32_t addr) {
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                     : "r"(addr)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                     : "r"(addr)
                     : "memory");
}
template <bool TRANS> __device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&x)[4]) {
    if constexpr (TRANS)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                     "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3])
                     : "memory");
    else
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x[0]),
                     "r"(x[1]), "r"(x[2]), "r"(x[3])
                     : "memory");
}

template <typename To, typename From> __device__ __forceinline__ To bitcast(const From &f) {
    static_assert(sizeof(To) == sizeof(From));
    To t;
    __builtin_memcpy(&t, &f, sizeof(To));
    return t;
}

// The x4 matrix m (= lane / 8) that a lane addresses is data[m] of the base tile. In the row
// layout data[m] covers rows 8*(m&1).., cols 8*(m>>1)..; in the col layout (loaded transposed)
// rows 8*(m>>1).., cols 8*(m&1)... Lane l addresses row l % 8 of its matrix.
template <bool IS_ROW> __device__ inline int ldsm_row(int lane) {
    const int m = lane / 8;
    return lane % 8 + 8 * (IS_ROW ? (m & 1) : (m >> 1));
}
template <bool IS_ROW> __device__ inline int ldsm_col(int lane) {
    const int m = lane / 8;
    return 8 * (IS_ROW ? (m >> 1) : (m & 1));
}

// Block row h of the register tile is shared rows row0 + h*row_step .. +15; block column x is
// shared cols col0 + 16x .. +15.
template <ducks::rt::all RT, ducks::st::all ST>
__device__ inline void load_rt_st(RT &dst, const ST &src, int row0, int row_step, int col0) {
    using ST2 = typename ST::T2;
    const int lane = laneid();
    if constexpr (base_types::half_precision<typename ST::T>) {
        const int lr = ldsm_row<RT::is_row>(lane), lc = ldsm_col<RT::is_row>(lane);
#pragma unroll
        for (int h = 0; h < RT::height; h++) {
#pragma unroll
            for (int x = 0; x < RT::width; x++) {
                uint32_t v[4];
                ldmatrix_x4<!RT::is_row>(v, src.idx(row0 + h * row_step + lr, col0 + x * TILE_DIM + lc));
#pragma unroll
                for (int k = 0; k < 4; k++) dst.tiles[h][x].data[k] = convert<typename RT::T2>(bitcast<ST2>(v[k]));
            }
        }
    } else {
#pragma unroll
        for (int h = 0; h < RT::height; h++) {
#pragma unroll
            for (int x = 0; x < RT::width; x++) {
#pragma unroll
                for (int k = 0; k < RT::packed_per_tile; k++) {
                    const int r = row0 + h * row_step + frag_row<RT::is_row>(k, lane);
                    const int c = col0 + x * TILE_DIM + frag_col<RT::is_row>(k, lane);
                    ST2 p;
                    if constexpr (RT::is_row) { // a pair along a row is contiguous in shared memory
                        p = *reinterpret_cast<const ST2 *>(src.ptr(r, c));
                    } else {
                        reinterpret_cast<typename ST::T *>(&p)[0] = src(r, c);
                        reinterpret_cast<typename ST::T *>(&p)[1] = src(r + 1, c);
                    }
                    dst.tiles[h][x].data[k] = convert<typename RT::T2>(p);
                }
            }
        }
    }
}

template <ducks::st::all ST, ducks::rt::all RT>
__device__ inline void store_rt_st(ST &dst, const RT &src, int row0, int row_step, int col0) {
    using ST2 = typename ST::T2;
    const int lane = laneid();
    if constexpr (base_types::half_precision<typename ST::T>) {
        const int lr = ldsm_row<RT::is_row>(lane), lc = ldsm_col<RT::is_row>(lane);
#pragma unroll
        for (int h = 0; h < RT::height; h++) {
#pragma unroll
            for (int x = 0; x < RT::width; x++) {
                uint32_t v[4];
#pragma unroll
                for (int k = 0; k < 4; k++) v[k] = bitcast<uint32_t>(convert<ST2>(src.tiles[h][x].data[k]));
                stmatrix_x4<!RT::is_row>(dst.idx(row0 + h * row_step + lr, col0 + x * TILE_DIM + lc), v);
            }
        }
    } else if constexpr (RT::is_row && sizeof(typename ST::T) == 4 && ST::swizzle_bytes == 128 && RT::width % 2 == 0) {
        // 32-bit elements, 128-byte swizzle: one 8-byte store per lane covers 8 rows x 32 bytes, and rows r and r ^ 1
        // land on the same banks (the swizzle XORs their 16-byte units with r), so each half-warp takes two
        // wavefronts. Lanes of odd rows store the neighbouring base tile instead (16 columns on: other banks), and
        // the other one in the second store of the pair: one wavefront per half-warp, same instruction count.
        const bool swap = (lane / 4) & 1;
#pragma unroll
        for (int h = 0; h < RT::height; h++) {
#pragma unroll
            for (int x = 0; x < RT::width; x += 2) {
#pragma unroll
                for (int k = 0; k < RT::packed_per_tile; k++) {
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const bool second = (i == 1) != swap; // this lane's tile of the pair: x or x + 1
                        const int r = row0 + h * row_step + frag_row<true>(k, lane);
                        const int c = col0 + (x + int(second)) * TILE_DIM + frag_col<true>(k, lane);
                        const auto v = second ? src.tiles[h][x + 1].data[k] : src.tiles[h][x].data[k];
                        *reinterpret_cast<ST2 *>(dst.ptr(r, c)) = convert<ST2>(v);
                    }
                }
            }
        }
    } else {
#pragma unroll
        for (int h = 0; h < RT::height; h++) {
#pragma unroll
            for (int x = 0; x < RT::width; x++) {
#pragma unroll
                for (int k = 0; k < RT::packed_per_tile; k++) {
                    const int r = row0 + h * row_step + frag_row<RT::is_row>(k, lane);
                    const int c = col0 + x * TILE_DIM + frag_col<RT::is_row>(k, lane);
                    const ST2 p = convert<ST2>(src.tiles[h][x].data[k]);
                    if constexpr (RT::is_row) {
                        *reinterpret_cast<ST2 *>(dst.ptr(r, c)) = p;
                    } else {
                        dst(r, c) = reinterpret_cast<const typename ST::T *>(&p)[0];
                        dst(r + 1, c) = reinterpret_cast<const typename ST::T *>(&p)[1];
                    }
                }
            }
        }
    }
}

} // namespace memory
} // namespace detail

// Whole tile: the register and shared tiles have the same shape.
template <ducks::rt::all RT, ducks::st::all ST> __device__ inline void load(RT &dst, const ST &src) {
    static_assert(RT::rows == ST::rows && RT::cols == ST::cols,
                  "load(rt, st): register and shared tiles must have the same shape (use the offset overload for a part)");
    detail::memory::load_rt_st(dst, src, 0, TILE_DIM, 0);
}
template <ducks::st::all ST, ducks::rt::all RT> __device__ inline void store(ST &dst, const RT &src) {
    static_assert(RT::rows == ST::rows && RT::cols == ST::cols,
                  "store(st, rt): register and shared tiles must have the same shape (use the offset overload for a part)");
    detail::memory::store_rt_st(dst, src, 0, TILE_DIM, 0);
    __syncwarp();
}

// Part of a larger shared tile: the register tile's top-left corner is shared element
// (row_offset, col_offset), both multiples of 16, and the register tile must fit.
template <ducks::rt::all RT, ducks::st::all ST>
__device__ inline void load(RT &dst, const ST &src, int row_offset, int col_offset) {
    static_assert(RT::rows <= ST::rows && RT::cols <= ST::cols, "load(rt, st, r, c): the register tile must fit in the shared tile");
    detail::memory::load_rt_st(dst, src, row_offset, TILE_DIM, col_offset);
}
template <ducks::st::all ST, ducks::rt::all RT>
__device__ inline void store(ST &dst, const RT &src, int row_offset, int col_offset) {
    static_assert(RT::rows <= ST::rows && RT::cols <= ST::cols, "store(st, rt, r, c): the register tile must fit in the shared tile");
    detail::memory::store_rt_st(dst, src, row_offset, TILE_DIM, col_offset);
    __syncwarp();
}

} // namespace kittens
