// Shared tiles: a (rows x cols) matrix in shared memory, stored in the swizzled layout that both
// the TMA engine and wgmma descriptors understand, so a TMA-loaded tile feeds the tensor cores as is.
//
// Layout. The swizzle width is picked from the row width at compile time: 128 bytes if a row is a
// multiple of 128 bytes, else 64, else 32. The tile is cut into column chunks of that width
// (`swizzle_elements` columns); chunk k is stored as a dense (rows x swizzle_bytes) block, one
// after another. Inside a block, the 16-byte unit index of each row is XORed with the row's
// position in its 8-row (or 4- or 2-row) group, which is exactly the hardware's swizzle:
//   addr ^= ((addr >> 7) & (swizzle_bytes/16 - 1)) << 4
// computed on the real shared address, so it agrees with TMA and wgmma for any 1 KB aligned base.
#pragma once

#include "../../common/common.cuh"

namespace kittens {
namespace ducks {
namespace st {
struct identifier {};
template <typename T>
concept all = requires { typename T::identifier; } && std::same_as<typename T::identifier, identifier>;
} // namespace st
} // namespace ducks

namespace detail {
template <typename T, int cols> constexpr int pick_swizzle_bytes() {
    constexpr int row_bytes = cols * int(sizeof(T));
    if constexpr (row_bytes % 128 == 0) return 128;
    else if constexpr (row_bytes % 64 == 0) return 64;
    else return 32;
}
} // namespace detail


template <typename _T, int _rows, int _cols> struct alignas(1024) st {
    static_assert(base_types::T1<_T>, "shared tiles hold float, bf16, half or fp8 elements");
    static_assert(_rows > 0 && _rows % TILE_DIM == 0, "shared tile rows must be a positive multiple of 16");
    static_assert(_cols > 0 && _cols % TILE_DIM == 0, "shared tile cols must be a positive multiple of 16");
    static_assert((_cols * sizeof(_T)) % 32 == 0,
                  "a shared tile row must be a multiple of 32 bytes (fp8 tiles need cols % 32 == 0)");
    using identifier = ducks::st::identifier;
    using T = _T;
    using T2 = base_types::packed_t<_T>;
    static constexpr int rows = _rows, cols = _cols;
    static constexpr int height = _rows / TILE_DIM, width = _cols / TILE_DIM;
    static constexpr int num_elements = rows * cols;
    static constexpr int swizzle_bytes = detail::pick_swizzle_bytes<_T, _cols>();
    static constexpr int swizzle_elements = swizzle_bytes / int(sizeof(_T));
    static constexpr int chunks = _cols / swizzle_elements; // column chunks of swizzle width
    static constexpr int chunk_bytes = _rows * swizzle_bytes;

    T data[num_elements];

    // Byte offset from the tile base before swizzling.
    static __device__ __host__ inline constexpr uint32_t linear_offset(int r, int c) {
        return uint32_t((c / swizzle_elements) * chunk_bytes + r * swizzle_bytes + (c % swizzle_elements) * int(sizeof(T)));
    }
    static __device__ __host__ inline constexpr uint32_t swizzle(uint32_t addr) {
        return addr ^ (((addr >> 7) & uint32_t(swizzle_bytes / 16 - 1)) << 4);
    }
    // Shared-state-space address of element (r, c): what ld/st.shared and ldmatrix take.
    __device__ inline uint32_t idx(int r, int c) const { return swizzle(smem_addr(data) + linear_offset(r, c)); }
    // Generic pointer to element (r, c).
    __device__ inline T *ptr(int r, int c) {
        char *base = reinterpret_cast<char *>(data);
        uint32_t s = smem_addr(data);
        return reinterpret_cast<T *>(base + (swizzle(s + linear_offset(r, c)) - s));
    }
    __device__ inline const T *ptr(int r, int c) const { return const_cast<st *>(this)->ptr(r, c); }
    __device__ inline T &operator()(int r, int c) { return *ptr(r, c); }
    __device__ inline const T &operator()(int r, int c) const { return *ptr(r, c); }

    // Column chunk k (columns k * swizzle_elements ..) viewed as a tile of its own: it is stored exactly
    // like an st<T, rows, swizzle_elements>, so it can be any operand (TMA box, wgmma descriptor) of that
    // width, e.g. one 64-column half of a 128-column bf16 tile.
    using chunk_t = st<T, rows, swizzle_elements>;
    template <int k> __device__ inline chunk_t &chunk() {
        static_assert(k >= 0 && k < chunks, "st::chunk<k>: k must name one of the tile's column chunks");
        static_assert(chunk_bytes % 1024 == 0, "st::chunk<k>: a chunk must keep the 1 KB alignment of a tile");
        return *reinterpret_cast<chunk_t *>(reinterpret_cast<char *>(data) + k * chunk_bytes);
    }
    template <int k> __device__ inline const chunk_t &chunk() const { return const_cast<st *>(this)->template chunk<k>(); }
    // The first R rows viewed as a tile of their own, for a tile that is one column chunk wide (its rows are then
    // stored one after another): e.g. the leading keys of a key tile, as a narrower wgmma operand.
    template <int R> __device__ inline st<T, R, cols> &top_rows() {
        static_assert(chunks == 1, "st::top_rows<R>: only a tile one swizzle chunk wide stores its rows contiguously");
        static_assert(R > 0 && R <= rows, "st::top_rows<R>: R must be 1 .. rows");
        return *reinterpret_cast<st<T, R, cols> *>(data);
    }
    template <int R> __device__ inline const st<T, R, cols> &top_rows() const { return const_cast<st *>(this)->template top_rows<R>(); }
    // Rows R k .. R k + R - 1 viewed likewise (each block must keep the 1 KB alignment of a tile): e.g. one half of a
    // state's rows as the N operand of a narrower product.
    template <int R, int k> __device__ inline st<T, R, cols> &row_block() {
        static_assert(chunks == 1, "st::row_block<R, k>: only a tile one swizzle chunk wide stores its rows contiguously");
        static_assert(R > 0 && k >= 0 && R * (k + 1) <= rows, "st::row_block<R, k>: the block must lie inside the tile");
        static_assert((R * swizzle_bytes) % 1024 == 0, "st::row_block<R, k>: a block must keep the 1 KB alignment of a tile");
        return *reinterpret_cast<st<T, R, cols> *>(reinterpret_cast<char *>(data) + k * R * swizzle_bytes);
    }
    template <int R, int k> __device__ inline const st<T, R, cols> &row_block() const {
        return const_cast<st *>(this)->template row_block<R, k>();
    }
    // The same with k known only at run time (0 <= k < rows / R, unchecked): e.g. one consumer's half of the rows of a
    // column chunk, as the N operand of a product that each consumer runs on its own rows. With chunk(j) it reaches
    // rows R k .. of column chunk j of a tile of several chunks, whose rows are not contiguous as a whole.
    template <int R> __device__ inline st<T, R, cols> &row_block(int k) {
        static_assert(chunks == 1, "st::row_block<R>(k): only a tile one swizzle chunk wide stores its rows contiguously");
        static_assert(R > 0 && rows % R == 0, "st::row_block<R>(k): R must divide the tile's rows");
        static_assert((R * swizzle_bytes) % 1024 == 0, "st::row_block<R>(k): a block must keep the 1 KB alignment of a tile");
        return *reinterpret_cast<st<T, R, cols> *>(reinterpret_cast<char *>(data) + k * R * swizzle_bytes);
    }
    template <int R> __device__ inline const st<T, R, cols> &row_block(int k) const {
        return const_cast<st *>(this)->template row_block<R>(k);
    }
    // Columns C k .. C k + C - 1 viewed as a tile of their own, C a multiple of the swizzle width: whole column chunks,
    // stored exactly like an st<T, rows, C> (same swizzle, same chunk size), so the view is any operand of that width,
    // e.g. one half of a 256-column bf16 tile as the N operand of a 128-wide product. k known only at run time
    // (0 <= k < cols / C, unchecked).
    template <int C> using col_block_t = st<T, rows, C>;
    template <int C> __device__ inline col_block_t<C> &col_block(int k) {
        static_assert(C > 0 && C % swizzle_elements == 0 && cols % C == 0,
                      "st::col_block<C>: C must be a multiple of the swizzle width that divides the tile's columns");
        static_assert(col_block_t<C>::swizzle_bytes == swizzle_bytes && col_block_t<C>::chunk_bytes == chunk_bytes,
                      "st::col_block<C>: the view must keep the tile's swizzle");
        static_assert(chunk_bytes % 1024 == 0, "st::col_block<C>: a block must keep the 1 KB alignment of a tile");
        return *reinterpret_cast<col_block_t<C> *>(reinterpret_cast<char *>(data) + k * (C / swizzle_elements) * chunk_bytes);
    }
    template <int C> __device__ inline const col_block_t<C> &col_block(int k) const {
        return const_cast<st *>(this)->template col_block<C>(k);
    }
    // The same with k known only at run time (0 <= k < chunks, unchecked).
    __device__ inline chunk_t &chunk(int k) {
        static_assert(chunk_bytes % 1024 == 0, "st::chunk(k): a chunk must keep the 1 KB alignment of a tile");
        return *reinterpret_cast<chunk_t *>(reinterpret_cast<char *>(data) + k * chunk_bytes);
    }
};

template <int R, int C> using st_fl = st<float, R, C>;
template <int R, int C> using st_bf = st<bf16, R, C>;
template <int R, int C> using st_hf = st<half, R, C>;
template <int R, int C> using st_fp8e4m3 = st<fp8e4m3, R, C>;
template <int R, int C> using st_fp8e5m2 = st<fp8e5m2, R, C>;

} // namespace kittens
