// Global layouts: a view of a 4-D tensor (batch, depth, rows, cols) in device memory.
//
// Each dimension is a template argument: a positive number fixes it at compile time (it then
// costs no register and folds into address arithmetic), -1 leaves it to run time. Rows may be
// strided (a transposed or sliced PyTorch view); columns are always dense.
//
// Listing shared tile / vector types after the dimensions makes the host constructor build one
// TMA tensor map per type, stored inside the layout so that it travels to the kernel as part of a
// __grid_constant__ argument:  gl<bf16, 1, 1, -1, -1, st_bf<128, 64>> A{ptr, 1, 1, M, K};
#pragma once

#include <cstdint>
#include <cuda.h>
#include <stdexcept>
#include <string>

#include "../../common/common.cuh"
#include "coord.cuh"
#include "tma_desc.cuh"

namespace kittens {
namespace ducks {
namespace gl {
struct identifier {};
template <typename T>
concept all = requires { typename T::identifier; } && std::same_as<typename T::identifier, identifier>;
} // namespace gl
} // namespace ducks

namespace detail {
// A dimension that is either a compile-time constant or a run-time int.
template <int N> struct dim {
    static constexpr bool is_static = N > 0;
    __host__ __device__ constexpr dim(int) {}
    __host__ __device__ constexpr int value() const { return N; }
};
template <> struct dim<-1> {
    static constexpr bool is_static = false;
    int v;
    __host__ __device__ constexpr dim(int x) : v(x) {}
    __host__ __device__ constexpr int value() const { return v; }
};
template <typename T, typename... Ts> constexpr int index_of() {
    int i = 0, found = -1;
    ((found = (found < 0 && std::same_as<T, Ts>) ? i : found, ++i), ...);
    return found;
}
} // namespace detail

template <typename _T, int B, int D, int R, int C, typename... TMA_Types> struct gl {
    static_assert(base_types::T1<_T>, "global layouts hold float, bf16, half or fp8 elements");
    static_assert((B > 0 || B == -1) && (D > 0 || D == -1) && (R > 0 || R == -1) && (C > 0 || C == -1),
                  "each gl dimension is a positive constant or -1 (known at run time)");
    using identifier = ducks::gl::identifier;
    using T = _T;
    using T2 = base_types::packed_t<_T>;
    static constexpr int num_tma = int(sizeof...(TMA_Types));

    T *raw_ptr;
    detail::dim<B> batch_;
    detail::dim<D> depth_;
    detail::dim<R> rows_;
    detail::dim<C> cols_;
    int64_t stride_b, stride_d, stride_r; // in elements
    // Tensor maps are 64-byte aligned objects; an empty list costs nothing.
    struct maps_t { CUtensorMap m[num_tma > 0 ? num_tma : 1]; }; // CUtensorMap is itself 64-byte aligned
    maps_t tma;

    __host__ __device__ inline int batch() const { return batch_.value(); }
    __host__ __device__ inline int depth() const { return depth_.value(); }
    __host__ __device__ inline int rows() const { return rows_.value(); }
    __host__ __device__ inline int cols() const { return cols_.value(); }

    // Dense tensor.
    __host__ gl(T *ptr, int b, int d, int r, int c)
        : gl(ptr, b, d, r, c, int64_t(d) * r * c, int64_t(r) * c, c) {}
    // Strided rows (columns stay dense): strides are in elements.
    __host__ gl(T *ptr, int b, int d, int r, int c, int64_t sb, int64_t sd, int64_t sr)
        : raw_ptr(ptr), batch_(b), depth_(d), rows_(r), cols_(c), stride_b(sb), stride_d(sd), stride_r(sr) {
        check_dim(B, b, "batch");
        check_dim(D, d, "depth");
        check_dim(R, r, "rows");
        check_dim(C, c, "cols");
        if constexpr (num_tma > 0) build_maps(std::make_index_sequence<num_tma>{});
    }

    // Element access: coords here are in elements, not tiles.
    __device__ inline T &operator[](const coord &i) const {
        return raw_ptr[i.b * stride_b + i.d * stride_d + int64_t(i.r) * stride_r + i.c];
    }
    __device__ inline T *ptr_at(int b, int d, int r, int c) const {
        return raw_ptr + (b * stride_b + d * stride_d + int64_t(r) * stride_r + c);
    }

    // The tensor map built for shared type U (which must be listed in TMA_Types).
    template <typename U> __host__ __device__ inline const CUtensorMap *get_tma() const {
        constexpr int i = detail::index_of<U, TMA_Types...>();
        static_assert(i >= 0, "this gl has no TMA map for that shared type: list it in gl<..., TMA_Types>");
        return &tma.m[i];
    }

  private:
    static void check_dim(int expected, int got, const char *name) {
        if (expected > 0 && expected != got)
            throw std::invalid_argument(std::string("kittens::gl: ") + name + " is fixed at " + std::to_string(expected) +
                                        " by the layout type but " + std::to_string(got) + " was given");
        if (got <= 0) throw std::invalid_argument(std::string("kittens::gl: ") + name + " must be positive");
    }
    template <size_t... I> void build_maps(std::index_sequence<I...>) {
        const uint64_t dims[4] = {uint64_t(cols()), uint64_t(rows()), uint64_t(depth()), uint64_t(batch())};
        const uint64_t strides[3] = {uint64_t(stride_r), uint64_t(stride_d), uint64_t(stride_b)};
        (make_one<TMA_Types>(&tma.m[I], dims, strides), ...);
    }
    template <typename U> void make_one(CUtensorMap *m, const uint64_t dims[4], const uint64_t strides[3]) {
        if constexpr (ducks::st::all<U>) tma::detail::make_tile_map<U>(m, raw_ptr, dims, strides);
        else tma::detail::make_vec_map<U>(m, raw_ptr, dims, strides);
    }
};

} // namespace kittens
