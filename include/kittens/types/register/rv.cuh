// Register vectors: 1-D data split across the lanes of one warp (layouts in rv_layout.cuh).
#pragma once

#include "../../common/common.cuh"
#include "rv_layout.cuh"

namespace kittens {
namespace ducks {
namespace rv {
struct identifier {};
template <typename T>
concept all = requires { typename T::identifier; } && std::same_as<typename T::identifier, identifier>;
template <typename T> concept naive_layout = all<T> && std::same_as<typename T::layout, rv_layout::naive>;
template <typename T> concept ortho_layout = all<T> && std::same_as<typename T::layout, rv_layout::ortho>;
template <typename T> concept align_layout = all<T> && std::same_as<typename T::layout, rv_layout::align>;
template <typename T> concept tile_layout = ortho_layout<T> || align_layout<T>;
} // namespace rv
} // namespace ducks

template <typename _T, int _length, ducks::rv_layout::all _layout = naive_l> struct rv {
    static_assert(base_types::T1<_T>, "register vectors hold float, bf16, half or fp8 elements");
    static_assert(_length > 0 && _length % TILE_DIM == 0,
                  "register vector length must be a positive multiple of 16");
    using identifier = ducks::rv::identifier;
    using layout = _layout;
    using T = _T;
    using T2 = base_types::packed_t<_T>;
    static constexpr bool is_naive = std::same_as<layout, naive_l>;
    static constexpr bool is_align = std::same_as<layout, align_l>;
    // Each lane stores `dtype` values: packed pairs for align, scalars otherwise.
    using dtype = std::conditional_t<is_align, T2, T>;
    static constexpr int length = _length;
    static constexpr int tiles = _length / TILE_DIM;
    static constexpr int outer_dim = is_naive ? (_length + WARP_THREADS - 1) / WARP_THREADS : tiles;
    static constexpr int inner_dim = is_naive ? 1 : 2;

    dtype data[outer_dim][inner_dim];

    __device__ inline dtype *operator[](int i) { return data[i]; }
    __device__ inline const dtype *operator[](int i) const { return data[i]; }
};

template <int N, ducks::rv_layout::all L = naive_l> using rv_fl = rv<float, N, L>;
template <int N, ducks::rv_layout::all L = naive_l> using rv_bf = rv<bf16, N, L>;
template <int N, ducks::rv_layout::all L = naive_l> using rv_hf = rv<half, N, L>;

} // namespace kittens
