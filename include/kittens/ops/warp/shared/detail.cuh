// Bodies of the shared-tile and shared-vector ops, written once for any number of cooperating
// threads (THREADS, with the caller's index tid). The warp functions pass 32 and the lane id;
// group<N> passes its thread count and group-thread index.
//
// Element-wise work moves whole 16-byte units: the swizzle never splits a unit, so a unit at
// (r, c) holds elements (r, c .. c+E-1) in every tile, whatever its alignment. Each tile's own
// idx() gives the address, so tiles of one type need not share an alignment.
#pragma once

#include "../memory/util.cuh"

namespace kittens {
namespace detail {
namespace shared_ops {

using memory::for_each_unit;
using memory::for_each_unit_batched;
using memory::ld_shared_16;
using memory::st_shared_16;
using memory::unit_elements;

// Apply a packed functor to every pair of a 16-byte unit.
template <typename T2, typename F> __device__ inline uint4 per_pair(uint4 u, F &&f) {
    T2 *p = reinterpret_cast<T2 *>(&u);
#pragma unroll
    for (int i = 0; i < int(sizeof(uint4) / sizeof(T2)); i++) p[i] = f(p[i], i);
    return u;
}
template <typename T2> __device__ inline uint4 splat_unit(const T2 &v) {
    return per_pair<T2>(uint4{}, [&](const T2 &, int) { return v; });
}

// Visit every unit of a shared tile / vector: fill-style ops take f(r, c); map-style ops take
// fetch(r, c) (the loads of one unit) and put(r, c, fetched), run in batches so loads overlap.
template <int THREADS, ducks::st::all ST, typename F> __device__ inline void tile_units(int tid, F &&f) {
    for_each_unit<ST::rows, ST::cols, typename ST::T, THREADS>(tid, f);
}
template <int THREADS, ducks::st::all ST, typename Fetch, typename Put>
__device__ inline void tile_units(int tid, Fetch &&fetch, Put &&put) {
    for_each_unit_batched<ST::rows, ST::cols, typename ST::T, THREADS>(tid, fetch, put);
}
template <int THREADS, ducks::sv::all SV, typename F> __device__ inline void vec_units(int tid, F &&f) {
    for_each_unit<1, SV::length, typename SV::T, THREADS>(tid, [&](int, int c) { f(c); });
}
template <int THREADS, ducks::sv::all SV, typename Fetch, typename Put>
__device__ inline void vec_units(int tid, Fetch &&fetch, Put &&put) {
    for_each_unit_batched<1, SV::length, typename SV::T, THREADS>(
        tid, [&](int, int c) { return fetch(c); }, [&](int, int c, const auto &v) { put(c, v); });
}
// Two units fetched together (binary maps).
struct unit_pair {
    uint4 a, b;
};
template <ducks::sv::all SV> __device__ inline uint32_t vec_idx(const SV &v, int i) {
    return smem_addr(v.data) + uint32_t(i * int(sizeof(typename SV::T)));
}

// ----- tiles -----
template <int THREADS, ducks::st::all ST> __device__ inline void fill(ST &dst, const typename ST::T &value, int tid) {
    const uint4 u = splat_unit(base_types::constants<typename ST::T2>::pair(value));
    tile_units<THREADS, ST>(tid, [&](int r, int c) { st_shared_16(dst.idx(r, c), u); });
}

template <typename op, int THREADS, ducks::st::all D, ducks::st::all S>
__device__ inline void unary_map(D &dst, const S &src, int tid) {
    static_assert(std::same_as<D, S>, "unary_map: dst and src must be the same shared tile type (use copy() to convert)");
    using T2 = typename D::T2;
    tile_units<THREADS, D>(
        tid, [&](int r, int c) { return ld_shared_16(src.idx(r, c)); },
        [&](int r, int c, const uint4 &u) {
            st_shared_16(dst.idx(r, c), per_pair<T2>(u, [](const T2 &x, int) { return op::template op<T2>(x); }));
        });
}

template <typename op, int THREADS, ducks::st::all D, ducks::st::all A, ducks::st::all B>
__device__ inline void bin_map(D &dst, const A &a, const B &b, int tid) {
    static_assert(std::same_as<D, A> && std::same_as<D, B>, "bin_map: dst, a and b must be the same shared tile type");
    using T2 = typename D::T2;
    tile_units<THREADS, D>(
        tid, [&](int r, int c) { return unit_pair{ld_shared_16(a.idx(r, c)), ld_shared_16(b.idx(r, c))}; },
        [&](int r, int c, const unit_pair &v) {
            const T2 *pb = reinterpret_cast<const T2 *>(&v.b);
            st_shared_16(dst.idx(r, c), per_pair<T2>(v.a, [&](const T2 &x, int i) { return op::template op<T2>(x, pb[i]); }));
        });
}

template <typename op, int THREADS, ducks::st::all D, ducks::st::all A>
__device__ inline void bin_map_scalar(D &dst, const A &a, const typename D::T &b, int tid) {
    static_assert(std::same_as<D, A>, "bin_map: dst and a must be the same shared tile type");
    using T2 = typename D::T2;
    const T2 b2 = base_types::constants<T2>::pair(b);
    tile_units<THREADS, D>(
        tid, [&](int r, int c) { return ld_shared_16(a.idx(r, c)); },
        [&](int r, int c, const uint4 &u) {
            st_shared_16(dst.idx(r, c), per_pair<T2>(u, [&](const T2 &x, int) { return op::template op<T2>(x, b2); }));
        });
}

// dst(r, c) = op(src(r, c), vec[r])  (row_map)   or   op(src(r, c), vec[c])  (col_map).
template <typename op, bool PER_ROW, int THREADS, ducks::st::all D, ducks::st::all S, ducks::sv::all V>
__device__ inline void broadcast_map(D &dst, const S &src, const V &vec, int tid) {
    static_assert(std::same_as<D, S>, "row_map / col_map: dst and src must be the same shared tile type");
    static_assert(std::same_as<typename V::T, typename D::T>, "row_map / col_map: the vector must hold the tile's element type");
    static_assert(V::length == (PER_ROW ? D::rows : D::cols),
                  "row_map needs one vector element per tile row, col_map one per tile column");
    using T2 = typename D::T2;
    tile_units<THREADS, D>(
        tid, [&](int r, int c) { return ld_shared_16(src.idx(r, c)); },
        [&](int r, int c, const uint4 &u) {
            const T2 rv = base_types::constants<T2>::pair(vec.data[r]);
            st_shared_16(dst.idx(r, c), per_pair<T2>(u, [&](const T2 &x, int i) {
                             const T2 v = PER_ROW ? rv : *reinterpret_cast<const T2 *>(&vec.data[c + 2 * i]);
                             return op::template op<T2>(x, v);
                         }));
        });
}

// Same type: whole units. Different types: element by element through convert.
template <int THREADS, ducks::st::all D, ducks::st::all S> __device__ inline void copy(D &dst, const S &src, int tid) {
    static_assert(D::rows == S::rows && D::cols == S::cols, "copy: shared tiles must have the same shape");
    using T = typename D::T;
    if constexpr (std::same_as<D, S>) {
        tile_units<THREADS, D>(
            tid, [&](int r, int c) { return ld_shared_16(src.idx(r, c)); },
            [&](int r, int c, const uint4 &u) { st_shared_16(dst.idx(r, c), u); });
    } else {
        tile_units<THREADS, D>(tid, [&](int r, int c) {
            uint4 u;
            T *e = reinterpret_cast<T *>(&u);
#pragma unroll
            for (int i = 0; i < unit_elements<T>; i++) e[i] = convert<T>(src(r, c + i));
            st_shared_16(dst.idx(r, c), u);
        });
    }
}

// Row (PER_ROW) or column reduction into a shared vector, accumulated in float:
//   dst[o] = op(acc[o], op over the reduced index of src)   (acc optional; dst may alias acc).
// L consecutive threads share one output and combine with shuffles, so short tiles still keep
// the threads busy; L is a power of two no larger than a warp or the reduced extent.
template <int THREADS, int OUT, int IN> constexpr int lanes_per_output() {
    int l = 1;
    while (l * 2 <= WARP_THREADS && l * 2 <= IN && l * 2 * OUT <= THREADS) l *= 2;
    return l;
}
template <typename op, bool PER_ROW, bool HAS_ACC, int THREADS, ducks::sv::all V, ducks::st::all S, ducks::sv::all A>
__device__ inline void reduce(V &dst, const S &src, const A &acc, int tid) {
    constexpr int OUT = PER_ROW ? S::rows : S::cols;
    constexpr int IN = PER_ROW ? S::cols : S::rows;
    static_assert(V::length == OUT, "row reductions need one vector element per tile row, column reductions one per column");
    static_assert(A::length == OUT, "the accumulator vector must have the output's length");
    constexpr int L = lanes_per_output<THREADS, OUT, IN>();
    constexpr int SLOTS = THREADS / L;
    const int seg = tid % L;
#pragma unroll 1
    for (int o0 = 0; o0 < OUT; o0 += SLOTS) { // uniform trip count: every lane reaches the shuffles
        const int o = o0 + tid / L;
        const bool active = o < OUT;
        float a = 0.f;
        if (active) {
            a = convert<float>(PER_ROW ? src(o, seg) : src(seg, o));
#pragma unroll 4
            for (int k = seg + L; k < IN; k += L) a = op::template op<float>(a, convert<float>(PER_ROW ? src(o, k) : src(k, o)));
        }
#pragma unroll
        for (int m = L / 2; m >= 1; m /= 2) a = op::template op<float>(a, __shfl_xor_sync(MASK_ALL, a, m));
        if (active && seg == 0) {
            if constexpr (HAS_ACC) a = op::template op<float>(convert<float>(acc.data[o]), a);
            dst.data[o] = convert<typename V::T>(a);
        }
    }
}

// ----- vectors -----
template <int THREADS, ducks::sv::all SV> __device__ inline void fill(SV &dst, const typename SV::T &value, int tid) {
    const uint4 u = splat_unit(base_types::constants<typename SV::T2>::pair(value));
    vec_units<THREADS, SV>(tid, [&](int c) { st_shared_16(vec_idx(dst, c), u); });
}
template <typename op, int THREADS, ducks::sv::all D, ducks::sv::all S>
__device__ inline void unary_map(D &dst, const S &src, int tid) {
    static_assert(std::same_as<D, S>, "unary_map: dst and src must be the same shared vector type (use copy() to convert)");
    using T2 = typename D::T2;
    vec_units<THREADS, D>(
        tid, [&](int c) { return ld_shared_16(vec_idx(src, c)); },
        [&](int c, const uint4 &u) {
            st_shared_16(vec_idx(dst, c), per_pair<T2>(u, [](const T2 &x, int) { return op::template op<T2>(x); }));
        });
}
template <typename op, int THREADS, ducks::sv::all D, ducks::sv::all A, ducks::sv::all B>
__device__ inline void bin_map(D &dst, const A &a, const B &b, int tid) {
    static_assert(std::same_as<D, A> && std::same_as<D, B>, "bin_map: dst, a and b must be the same shared vector type");
    using T2 = typename D::T2;
    vec_units<THREADS, D>(
        tid, [&](int c) { return unit_pair{ld_shared_16(vec_idx(a, c)), ld_shared_16(vec_idx(b, c))}; },
        [&](int c, const unit_pair &v) {
            const T2 *pb = reinterpret_cast<const T2 *>(&v.b);
            st_shared_16(vec_idx(dst, c), per_pair<T2>(v.a, [&](const T2 &x, int i) { return op::template op<T2>(x, pb[i]); }));
        });
}
template <typename op, int THREADS, ducks::sv::all D, ducks::sv::all A>
__device__ inline void bin_map_scalar(D &dst, const A &a, const typename D::T &b, int tid) {
    static_assert(std::same_as<D, A>, "bin_map: dst and a must be the same shared vector type");
    using T2 = typename D::T2;
    const T2 b2 = base_types::constants<T2>::pair(b);
    vec_units<THREADS, D>(
        tid, [&](int c) { return ld_shared_16(vec_idx(a, c)); },
        [&](int c, const uint4 &u) {
            st_shared_16(vec_idx(dst, c), per_pair<T2>(u, [&](const T2 &x, int) { return op::template op<T2>(x, b2); }));
        });
}
template <int THREADS, ducks::sv::all D, ducks::sv::all S> __device__ inline void copy(D &dst, const S &src, int tid) {
    static_assert(D::length == S::length, "copy: shared vectors must have the same length");
    using T = typename D::T;
    vec_units<THREADS, D>(tid, [&](int c) {
        uint4 u;
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int i = 0; i < unit_elements<T>; i++) e[i] = convert<T>(src.data[c + i]);
        st_shared_16(vec_idx(dst, c), u);
    });
}

} // namespace shared_ops
} // namespace detail
} // namespace kittens
