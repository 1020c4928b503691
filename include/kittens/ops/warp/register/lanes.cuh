// Lane-level building blocks shared by the register tile and vector ops: which lane holds what,
// element access inside packed pairs, warp shuffles of any small value, and the 8x8 transpose
// that moves a fragment between the row and column register layouts.
#pragma once

#include <cstdint>
#include <cstring>

#include "../../../common/common.cuh"
#include "../../../types/types.cuh"

namespace kittens {
namespace ducks {
namespace reg {
// Anything that lives in a warp's registers: register tiles and register vectors.
template <typename T>
concept all = rt::all<T> || rv::all<T>;
} // namespace reg
} // namespace ducks

namespace detail::reg {

// Fragment coordinates of the calling lane (rt_layout.cuh): g picks the row (or column) inside
// an 8-wide block, t picks the pair.
__device__ __forceinline__ int frag_g() { return laneid() >> 2; }
__device__ __forceinline__ int frag_t() { return laneid() & 3; }

// For packed register k (0..3) of a 16x16 base tile: which 8-row half and which 8-column half
// of the base tile it covers (see rt_layout.cuh).
template <ducks::rt_layout::all L> __host__ __device__ constexpr int row_half(int k) {
    return std::same_as<L, row_l> ? (k & 1) : (k >> 1);
}
template <ducks::rt_layout::all L> __host__ __device__ constexpr int col_half(int k) {
    return std::same_as<L, row_l> ? (k >> 1) : (k & 1);
}

// Element 0 or 1 of a packed pair, by value or by reference.
template <base_types::T2 P> __device__ __forceinline__ base_types::unpacked_t<P> &elem(P &p, int i) {
    return reinterpret_cast<base_types::unpacked_t<P> *>(&p)[i];
}
// By value, i may vary per lane: both halves are read at fixed offsets and one is selected, so
// the pair stays in registers (indexing it with a runtime i would send it to local memory).
template <base_types::T2 P> __device__ __forceinline__ base_types::unpacked_t<P> elem(const P &p, int i) {
    const auto *h = reinterpret_cast<const base_types::unpacked_t<P> *>(&p);
    const auto lo = h[0], hi = h[1];
    return i ? hi : lo;
}
template <base_types::T2 P>
__device__ __forceinline__ P make_pair(base_types::unpacked_t<P> a, base_types::unpacked_t<P> b) {
    P p;
    elem(p, 0) = a;
    elem(p, 1) = b;
    return p;
}

// A scalar broadcast to both halves of a pair; a pair passes through. Lets one loop serve
// vectors stored as scalars (ortho, naive) and as pairs (align).
template <base_types::T2 P, typename V> __device__ __forceinline__ P as_pair(const V &v) {
    if constexpr (std::same_as<V, P>) return v;
    else return base_types::constants<P>::pair(v);
}

// Warp shuffles of any trivially copyable value up to 8 bytes, moved as 32-bit words (values
// smaller than a word are zero-extended).
template <typename T> struct shfl_words {
    static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
    static constexpr int n = sizeof(T) <= 4 ? 1 : 2;
    uint32_t w[n];
    __device__ __forceinline__ explicit shfl_words(const T &v) {
        w[n - 1] = 0;
        memcpy(w, &v, sizeof(T));
    }
    __device__ __forceinline__ T value() const {
        T out;
        memcpy(&out, w, sizeof(T));
        return out;
    }
};
template <typename T> __device__ __forceinline__ T shfl_idx(const T &v, int src_lane) {
    shfl_words<T> s(v);
#pragma unroll
    for (int i = 0; i < s.n; i++) s.w[i] = __shfl_sync(MASK_ALL, s.w[i], src_lane);
    return s.value();
}
template <typename T> __device__ __forceinline__ T shfl_xor(const T &v, int lane_mask) {
    shfl_words<T> s(v);
#pragma unroll
    for (int i = 0; i < s.n; i++) s.w[i] = __shfl_xor_sync(MASK_ALL, s.w[i], lane_mask);
    return s.value();
}

// movmatrix: transposes an 8x8 matrix of 16-bit values held in the fragment order (lane l has
// row l/4, columns 2(l%4) and 2(l%4)+1 in the low and high half of one register).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// Transpose of an 8x8 block in fragment order, for any element width: 16-bit pairs go through
// one movmatrix; 32-bit pairs are split into their low and high 16-bit halves, each half moved
// by its own movmatrix and the halves rejoined; 8-bit pairs are widened to 16-bit slots first.
template <base_types::T2 P> __device__ __forceinline__ P transpose_8x8(const P &p) {
    if constexpr (sizeof(P) == 4) {
        uint32_t x;
        memcpy(&x, &p, 4);
        x = movmatrix_trans(x);
        P out;
        memcpy(&out, &x, 4);
        return out;
    } else if constexpr (sizeof(P) == 8) {
        uint32_t x, y;
        memcpy(&x, reinterpret_cast<const char *>(&p), 4);
        memcpy(&y, reinterpret_cast<const char *>(&p) + 4, 4);
        uint32_t lo = movmatrix_trans(__byte_perm(x, y, 0x5410)); // (x.lo16, y.lo16)
        uint32_t hi = movmatrix_trans(__byte_perm(x, y, 0x7632)); // (x.hi16, y.hi16)
        x = __byte_perm(lo, hi, 0x5410);
        y = __byte_perm(lo, hi, 0x7632);
        P out;
        memcpy(reinterpret_cast<char *>(&out), &x, 4);
        memcpy(reinterpret_cast<char *>(&out) + 4, &y, 4);
        return out;
    } else {
        static_assert(sizeof(P) == 2, "unexpected packed pair size");
        uint16_t b;
        memcpy(&b, &p, 2);
        uint32_t wide = __byte_perm(uint32_t(b), 0u, 0x4140); // bytes (b0, 0, b1, 0)
        wide = movmatrix_trans(wide);
        uint16_t n = uint16_t(__byte_perm(wide, 0u, 0x4420)); // bytes (w0, w2)
        P out;
        memcpy(&out, &n, 2);
        return out;
    }
}

} // namespace detail::reg
} // namespace kittens
