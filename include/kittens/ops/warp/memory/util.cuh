// Building blocks shared by every load and store: raw 16-byte shared-memory accesses, cp.async,
// and a bounds-aware view of a rectangle of a global tensor.
//
// Everything here is scope-agnostic: the copy loops take the number of cooperating threads and
// the caller's index among them, so warp and group<N> versions are thin wrappers over one body.
#pragma once

#include <cstdint>

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"

namespace kittens {
namespace detail {
namespace memory {

// An unsigned integer exactly as wide as an element: moving elements as bits never converts.
template <int BYTES> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };
template <typename T> using bits_t = typename bits_of<int(sizeof(T))>::type;

// Elements per 16-byte unit: the granule of every vectorised copy. Shared tiles swizzle whole
// 16-byte units, so a unit that starts at an element whose column is a multiple of this is
// contiguous in shared memory as well as in global memory.
template <typename T> constexpr int unit_elements = 16 / int(sizeof(T));

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// ----- raw shared-memory accesses (32-bit shared-window addresses, as st::idx gives) -----
// The "memory" clobber keeps ordinary C++ accesses to the same tiles ordered around these.
__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
__device__ __forceinline__ void st_shared_16(uint32_t addr, const uint4 &v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// ----- cp.async: global -> shared without passing through registers -----
// Copies `src_bytes` (0..16) bytes and zero-fills the rest of the 16-byte destination unit.
// With src_bytes == 0 nothing is read, but the source must still be a valid global address.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    static_assert(N >= 0 && N <= 7, "cp.async.wait_group takes 0..7 pending groups");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ----- a rectangle of a global tensor, with its valid extent -----
// `origin` is element (row0, col0) of one (batch, depth) slice. Coordinates passed to at() and
// inside() are relative to it. Elements outside [0, rows_left) x [0, cols_left) lie outside the
// tensor: they are never dereferenced (their addresses may not even be mapped).
template <typename T> struct window {
    T *origin;
    T *safe;         // the tensor's first element: always a readable address
    int64_t stride;  // row stride in elements
    int rows_left;   // tensor rows at or after row0 (<= 0: the rectangle is entirely outside)
    int cols_left;   // tensor cols at or after col0
    bool vec16;      // every row start is 16-byte aligned, so whole units may move as one access
    bool vec_pair;   // every even column is aligned for a 2-element access

    __device__ inline T *at(int r, int c) const { return origin + (int64_t(r) * stride + c); }
    __device__ inline bool inside(int r, int c) const { return r < rows_left && c < cols_left; }
    // Read one element as bits, zero outside the tensor.
    __device__ inline bits_t<T> read_bits(int r, int c) const {
        return inside(r, c) ? *reinterpret_cast<const bits_t<T> *>(at(r, c)) : bits_t<T>(0);
    }
    __device__ inline void write_bits(int r, int c, bits_t<T> v) const {
        if (inside(r, c)) *reinterpret_cast<bits_t<T> *>(at(r, c)) = v;
    }
    __device__ inline T read(int r, int c) const {
        return inside(r, c) ? *at(r, c) : base_types::constants<T>::zero();
    }
    __device__ inline void write(int r, int c, const T &v) const {
        if (inside(r, c)) *at(r, c) = v;
    }
};

// The rectangle of `g` starting at element (row0, col0) of slice (b, d). A slice index outside
// the tensor makes the whole rectangle "outside", so a bad coordinate never faults.
template <ducks::gl::all GL>
__device__ inline window<typename GL::T> make_window(const GL &g, int b, int d, int row0, int col0) {
    using T = typename GL::T;
    window<T> w;
    const bool slice_ok = b >= 0 && b < g.batch() && d >= 0 && d < g.depth() && row0 >= 0 && col0 >= 0;
    w.origin = g.raw_ptr + (int64_t(b) * g.stride_b + int64_t(d) * g.stride_d + int64_t(row0) * g.stride_r + col0);
    w.safe = g.raw_ptr;
    w.stride = g.stride_r;
    w.rows_left = slice_ok ? g.rows() - row0 : 0;
    w.cols_left = slice_ok ? g.cols() - col0 : 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(w.origin);
    w.vec16 = (addr % 16 == 0) && ((w.stride * int64_t(sizeof(T))) % 16 == 0);
    w.vec_pair = (addr % (2 * sizeof(T)) == 0) && (w.stride % 2 == 0);
    return w;
}

// Gather one 16-byte unit element by element (zeros outside the tensor) / scatter it back
// (elements outside are skipped). Used at ragged edges and for rows that are not 16-byte aligned.
template <typename T> __device__ inline uint4 gather_unit(const window<T> &w, int r, int c) {
    constexpr int E = unit_elements<T>;
    union {
        uint4 v;
        bits_t<T> e[E];
    } u;
#pragma unroll
    for (int i = 0; i < E; i++) u.e[i] = w.read_bits(r, c + i);
    return u.v;
}
template <typename T> __device__ inline void scatter_unit(const window<T> &w, int r, int c, const uint4 &v) {
    constexpr int E = unit_elements<T>;
    union {
        uint4 v;
        bits_t<T> e[E];
    } u;
    u.v = v;
#pragma unroll
    for (int i = 0; i < E; i++) w.write_bits(r, c + i, u.e[i]);
}

// Whether the unit at (r, c) can move as one aligned 16-byte global access.
template <typename T> __device__ inline bool whole_unit(const window<T> &w, int r, int c) {
    return w.vec16 && r < w.rows_left && c + unit_elements<T> <= w.cols_left;
}

// Visit the 16-byte units of a ROWS x COLS rectangle, split over THREADS threads. Consecutive
// threads take consecutive units of a row, so global accesses coalesce. Unrolling by 8 keeps
// several accesses per thread in flight without letting large tiles blow up code size.
template <int ROWS, int COLS, typename T, int THREADS, typename F>
__device__ inline void for_each_unit(int tid, F &&f) {
    constexpr int E = unit_elements<T>;
    static_assert(COLS % E == 0, "rows must be whole 16-byte units");
    constexpr int UNITS_PER_ROW = COLS / E;
    constexpr int UNITS = ROWS * UNITS_PER_ROW;
    constexpr int ITERS = (UNITS + THREADS - 1) / THREADS;
#pragma unroll 8
    for (int it = 0; it < ITERS; it++) {
        const int u = it * THREADS + tid;
        if (UNITS % THREADS != 0 && u >= UNITS) break;
        f(u / UNITS_PER_ROW, (u % UNITS_PER_ROW) * E);
    }
}

// The same walk in two phases per batch of up to 8 units: fetch(r, c) for every unit of the
// batch, then put(r, c, fetched). Loads therefore overlap even when the stores are volatile asm
// with a memory clobber (which the compiler may not move loads across).
template <int ROWS, int COLS, typename T, int THREADS, typename Fetch, typename Put>
__device__ inline void for_each_unit_batched(int tid, Fetch &&fetch, Put &&put) {
    constexpr int E = unit_elements<T>;
    static_assert(COLS % E == 0, "rows must be whole 16-byte units");
    constexpr int UNITS_PER_ROW = COLS / E;
    constexpr int UNITS = ROWS * UNITS_PER_ROW;
    constexpr int ITERS = (UNITS + THREADS - 1) / THREADS;
    constexpr int BATCH = ITERS < 8 ? ITERS : 8;
    constexpr bool RAGGED = UNITS % (THREADS * BATCH) != 0; // some slots of some batch are empty
    using P = decltype(fetch(0, 0));
#pragma unroll 1
    for (int it0 = 0; it0 < ITERS; it0 += BATCH) {
        P v[BATCH];
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            const int u = (it0 + j) * THREADS + tid;
            if (!RAGGED || u < UNITS) v[j] = fetch(u / UNITS_PER_ROW, (u % UNITS_PER_ROW) * E);
        }
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            const int u = (it0 + j) * THREADS + tid;
            if (!RAGGED || u < UNITS) put(u / UNITS_PER_ROW, (u % UNITS_PER_ROW) * E, v[j]);
        }
    }
}

// ----- the three copy bodies, over any shared destination given as (r, c) -> shared address -----
// Interior rectangles take an unrolled loop with no bounds checks; anything touching an edge (or
// rows that are not 16-byte aligned) takes a checked loop kept rolled to bound code size.
template <int ROWS, int COLS, int THREADS, typename T, typename Addr>
__device__ inline void global_to_shared(Addr &&saddr, const window<T> &w, int tid) {
    if (w.vec16 && w.rows_left >= ROWS && w.cols_left >= COLS) {
        for_each_unit_batched<ROWS, COLS, T, THREADS>(
            tid, [&](int r, int c) { return *reinterpret_cast<const uint4 *>(w.at(r, c)); },
            [&](int r, int c, const uint4 &v) { st_shared_16(saddr(r, c), v); });
    } else {
        constexpr int E = unit_elements<T>;
#pragma unroll 1
        for (int u = tid; u < ROWS * (COLS / E); u += THREADS) {
            const int r = u / (COLS / E), c = (u % (COLS / E)) * E;
            const uint4 v = whole_unit(w, r, c) ? *reinterpret_cast<const uint4 *>(w.at(r, c)) : gather_unit(w, r, c);
            st_shared_16(saddr(r, c), v);
        }
    }
}

template <int ROWS, int COLS, int THREADS, typename T, typename Addr>
__device__ inline void shared_to_global(const window<T> &w, Addr &&saddr, int tid) {
    if (w.vec16 && w.rows_left >= ROWS && w.cols_left >= COLS) {
        for_each_unit_batched<ROWS, COLS, T, THREADS>(
            tid, [&](int r, int c) { return ld_shared_16(saddr(r, c)); },
            [&](int r, int c, const uint4 &v) { *reinterpret_cast<uint4 *>(w.at(r, c)) = v; });
    } else {
        constexpr int E = unit_elements<T>;
#pragma unroll 1
        for (int u = tid; u < ROWS * (COLS / E); u += THREADS) {
            const int r = u / (COLS / E), c = (u % (COLS / E)) * E;
            if (r >= w.rows_left || c >= w.cols_left) continue; // nothing of this unit is inside
            const uint4 v = ld_shared_16(saddr(r, c));
            if (whole_unit(w, r, c)) *reinterpret_cast<uint4 *>(w.at(r, c)) = v;
            else scatter_unit(w, r, c, v);
        }
    }
}

// cp.async needs 16-byte aligned sources; rows that are not aligned fall back to the synchronous
// copy (still correct, just not overlapped). Either way one commit group is closed per call, so
// load_async_wait<N> counts calls.
template <int ROWS, int COLS, int THREADS, typename T, typename Addr>
__device__ inline void global_to_shared_async(Addr &&saddr, const window<T> &w, int tid) {
    if (!w.vec16) {
        global_to_shared<ROWS, COLS, THREADS>(saddr, w, tid);
    } else if (w.rows_left >= ROWS && w.cols_left >= COLS) {
        for_each_unit<ROWS, COLS, T, THREADS>(tid, [&](int r, int c) { cp_async_16(saddr(r, c), w.at(r, c), 16); });
    } else {
        constexpr int E = unit_elements<T>;
#pragma unroll 1
        for (int u = tid; u < ROWS * (COLS / E); u += THREADS) {
            const int r = u / (COLS / E), c = (u % (COLS / E)) * E;
            const int n = r < w.rows_left ? imax(0, imin(E, w.cols_left - c)) : 0;
            cp_async_16(saddr(r, c), n > 0 ? static_cast<const void *>(w.at(r, c)) : w.safe, uint32_t(n * sizeof(T)));
        }
    }
    cp_async_commit();
}

} // namespace memory
} // namespace detail
} // namespace kittens
