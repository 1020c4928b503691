// wgmma shared-memory matrix descriptors for our shared tiles.
//
// A descriptor (PTX ISA, "Matrix Descriptor Format") is a 64-bit word:
//   bits  0-13  start address >> 4          bits 32-45  stride byte offset (SBO) >> 4
//   bits 16-29  leading byte offset (LBO) >> 4   bits 49-51  base offset   bits 62-63  swizzle
// with swizzle 1 = 128 B, 2 = 64 B, 3 = 32 B. The hardware walks the operand in "core matrices"
// of 8 rows x 16 bytes inside swizzle atoms of 8 rows x swizzle_bytes, applying the XOR swizzle to
// the address bits it generates -- the same swizzle st.cuh and the TMA engine use, so a tile
// written by either feeds the tensor cores directly.
//
// Our tile st<T, R, C> stores column chunk k (swizzle_elements wide) as a dense R x swizzle_bytes
// block at k * chunk_bytes. Two ways to read it:
//   * K-major (the tile's columns run along K: A of mma_AB / mma_ABt, B of mma_ABt / mma_AtBt).
//     One instruction reads 64 (A) or N (B) rows and one K step of 32 bytes (k16 x 2 B or
//     k32 x 1 B). That K step never leaves a swizzle row, so LBO is unused (the ISA says to
//     put 1) and SBO = 8 rows * swizzle_bytes. Successive K steps move the start address by 32 B
//     inside a chunk and by chunk_bytes across chunks; 32 B moves leave address bits 7-9 alone,
//     so the swizzle phase (and hence base offset 0) stays valid on a 1 KB aligned tile.
//   * MN-major (the tile's columns run along M or N: B of mma_AB / mma_AtB, A of mma_AtB /
//     mma_AtBt). The instruction reads 16 K rows and the whole M / N extent, which spans
//     several swizzle atoms side by side: LBO = distance between atoms along M / N (= chunk_bytes
//     here), SBO = distance between 8-row groups along K (= 8 * swizzle_bytes). A K step of 16
//     rows moves the start address by 16 * swizzle_bytes, a whole number of swizzle periods.
#pragma once

#include <cstdint>

#include "../../../common/common.cuh"
#include "../../../types/shared/st.cuh"

namespace kittens {
namespace wgmma {
namespace detail {

template <int swizzle_bytes> constexpr uint64_t swizzle_code() {
    static_assert(swizzle_bytes == 32 || swizzle_bytes == 64 || swizzle_bytes == 128,
                  "wgmma operands use 32, 64 or 128 byte swizzling");
    return swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : 3;
}

__device__ __forceinline__ constexpr uint64_t encode(uint64_t bytes) { return (bytes & 0x3FFFF) >> 4; }

} // namespace detail

// Descriptor factory for one shared tile read in one major-ness. at(row, col) gives the
// descriptor of the operand block whose first element is tile element (row, col).
template <ducks::st::all ST, bool mn_major> struct descriptor {
    static constexpr uint32_t sbo = 8 * ST::swizzle_bytes;
    static constexpr uint32_t lbo = mn_major ? ST::chunk_bytes : 16; // 16 encodes as the ISA's "1"
    static_assert(!mn_major || ST::chunk_bytes < (1 << 18), "wgmma LBO is a 14-bit field of 16 B units");

    uint64_t origin;

    __device__ explicit descriptor(const ST &tile) {
        origin = detail::encode(smem_addr(tile.data)) | (detail::encode(lbo) << 16) | (detail::encode(sbo) << 32) |
                 (detail::swizzle_code<ST::swizzle_bytes>() << 62);
    }
    // The start-address field is 14 bits of a < 256 KB shared address, so adding an in-tile
    // offset cannot carry into the neighbouring fields.
    __device__ inline uint64_t at(int row, int col) const { return origin + (ST::linear_offset(row, col) >> 4); }
};

} // namespace wgmma
} // namespace kittens
