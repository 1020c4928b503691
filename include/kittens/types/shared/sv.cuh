// Shared vectors: a plain, dense 1-D array in shared memory. Vectors are read along their length,
// so consecutive lanes hit consecutive banks and no swizzle is needed.
#pragma once

#include "../../common/common.cuh"

namespace kittens {
namespace ducks {
namespace sv {
struct identifier {};
template <typename T>
concept all = requires { typename T::identifier; } && std::same_as<typename T::identifier, identifier>;
} // namespace sv
} // namespace ducks

template <typename _T, int _length> struct alignas(128) sv {
    static_assert(base_types::T1<_T>, "shared vectors hold float, bf16, half or fp8 elements");
    static_assert(_length > 0 && _length % TILE_DIM == 0, "shared vector length must be a positive multiple of 16");
    using identifier = ducks::sv::identifier;
    using T = _T;
    using T2 = base_types::packed_t<_T>;
    static constexpr int length = _length;
    static constexpr int tiles = _length / TILE_DIM;

    T data[length];

    __device__ inline T &operator[](int i) { return data[i]; }
    __device__ inline const T &operator[](int i) const { return data[i]; }
};

template <int N> using sv_fl = sv<float, N>;
template <int N> using sv_bf = sv<bf16, N>;
template <int N> using sv_hf = sv<half, N>;

} // namespace kittens
