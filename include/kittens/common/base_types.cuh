// Scalar element types, their packed forms, constants and conversions.
//
// Register tiles store elements two at a time (a "packed" pair fills or half-fills one
// 32-bit register), because every tensor-core fragment and every ld/stmatrix moves pairs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <concepts>
#include <type_traits>

namespace kittens {

using bf16 = __nv_bfloat16;
using half = __half;
using bf16_2 = __nv_bfloat162;
using half_2 = __half2;
using fp8e4m3 = __nv_fp8_e4m3;
using fp8e5m2 = __nv_fp8_e5m2;
using fp8e4m3_2 = __nv_fp8x2_e4m3;
using fp8e5m2_2 = __nv_fp8x2_e5m2;
using fp8e4m3_4 = __nv_fp8x4_e4m3;
using fp8e5m2_4 = __nv_fp8x4_e5m2;

namespace base_types {

// packing<T>: how a scalar pairs up (and back). num() is the number of scalars per packed value.
template <typename T> struct packing;
template <> struct packing<float>     { using unpacked_type = float;   using packed_type = float2;    static constexpr int num() { return 1; } };
template <> struct packing<float2>    { using unpacked_type = float;   using packed_type = float2;    static constexpr int num() { return 2; } };
template <> struct packing<bf16>      { using unpacked_type = bf16;    using packed_type = bf16_2;    static constexpr int num() { return 1; } };
template <> struct packing<bf16_2>    { using unpacked_type = bf16;    using packed_type = bf16_2;    static constexpr int num() { return 2; } };
template <> struct packing<half>      { using unpacked_type = half;    using packed_type = half_2;    static constexpr int num() { return 1; } };
template <> struct packing<half_2>    { using unpacked_type = half;    using packed_type = half_2;    static constexpr int num() { return 2; } };
template <> struct packing<fp8e4m3>   { using unpacked_type = fp8e4m3; using packed_type = fp8e4m3_2; static constexpr int num() { return 1; } };
template <> struct packing<fp8e4m3_2> { using unpacked_type = fp8e4m3; using packed_type = fp8e4m3_2; static constexpr int num() { return 2; } };
template <> struct packing<fp8e5m2>   { using unpacked_type = fp8e5m2; using packed_type = fp8e5m2_2; static constexpr int num() { return 1; } };
template <> struct packing<fp8e5m2_2> { using unpacked_type = fp8e5m2; using packed_type = fp8e5m2_2; static constexpr int num() { return 2; } };

template <typename T> using packed_t = typename packing<T>::packed_type;
template <typename T> using unpacked_t = typename packing<T>::unpacked_type;

// Scalar element types a tile may hold.
template <typename T>
concept T1 = std::same_as<T, float> || std::same_as<T, bf16> || std::same_as<T, half> ||
             std::same_as<T, fp8e4m3> || std::same_as<T, fp8e5m2>;
// Packed pairs of those.
template <typename T>
concept T2 = std::same_as<T, float2> || std::same_as<T, bf16_2> || std::same_as<T, half_2> ||
             std::same_as<T, fp8e4m3_2> || std::same_as<T, fp8e5m2_2>;
// Types the tensor cores take as 16-bit inputs.
template <typename T>
concept half_precision = std::same_as<T, bf16> || std::same_as<T, half>;
template <typename T>
concept fp8 = std::same_as<T, fp8e4m3> || std::same_as<T, fp8e5m2>;

// ---------------------------------------------------------------------------------------------
// Conversions. Everything goes through float for the exotic pairs; the common pairs use the
// single hardware instruction that exists for them.
template <typename T, typename U> struct convertor {
    static __host__ __device__ inline T convert(const U &u) { return static_cast<T>(u); }
};
template <> struct convertor<float, bf16> { static __host__ __device__ inline float convert(const bf16 &u) { return __bfloat162float(u); } };
template <> struct convertor<bf16, float> { static __host__ __device__ inline bf16 convert(const float &u) { return __float2bfloat16_rn(u); } };
template <> struct convertor<float, half> { static __host__ __device__ inline float convert(const half &u) { return __half2float(u); } };
template <> struct convertor<half, float> { static __host__ __device__ inline half convert(const float &u) { return __float2half_rn(u); } };
template <> struct convertor<bf16, half> { static __host__ __device__ inline bf16 convert(const half &u) { return __float2bfloat16_rn(__half2float(u)); } };
template <> struct convertor<half, bf16> { static __host__ __device__ inline half convert(const bf16 &u) { return __float2half_rn(__bfloat162float(u)); } };
template <> struct convertor<float, fp8e4m3> { static __host__ __device__ inline float convert(const fp8e4m3 &u) { return float(u); } };
template <> struct convertor<float, fp8e5m2> { static __host__ __device__ inline float convert(const fp8e5m2 &u) { return float(u); } };
template <> struct convertor<fp8e4m3, float> { static __host__ __device__ inline fp8e4m3 convert(const float &u) { return fp8e4m3(u); } };
template <> struct convertor<fp8e5m2, float> { static __host__ __device__ inline fp8e5m2 convert(const float &u) { return fp8e5m2(u); } };
template <> struct convertor<bf16, fp8e4m3> { static __host__ __device__ inline bf16 convert(const fp8e4m3 &u) { return __float2bfloat16_rn(float(u)); } };
template <> struct convertor<bf16, fp8e5m2> { static __host__ __device__ inline bf16 convert(const fp8e5m2 &u) { return __float2bfloat16_rn(float(u)); } };
template <> struct convertor<fp8e4m3, bf16> { static __host__ __device__ inline fp8e4m3 convert(const bf16 &u) { return fp8e4m3(__bfloat162float(u)); } };
template <> struct convertor<fp8e5m2, bf16> { static __host__ __device__ inline fp8e5m2 convert(const bf16 &u) { return fp8e5m2(__bfloat162float(u)); } };
template <> struct convertor<half, fp8e4m3> { static __host__ __device__ inline half convert(const fp8e4m3 &u) { return __float2half_rn(float(u)); } };
template <> struct convertor<half, fp8e5m2> { static __host__ __device__ inline half convert(const fp8e5m2 &u) { return __float2half_rn(float(u)); } };
template <> struct convertor<fp8e4m3, half> { static __host__ __device__ inline fp8e4m3 convert(const half &u) { return fp8e4m3(__half2float(u)); } };
template <> struct convertor<fp8e5m2, half> { static __host__ __device__ inline fp8e5m2 convert(const half &u) { return fp8e5m2(__half2float(u)); } };
template <> struct convertor<fp8e4m3, fp8e5m2> { static __host__ __device__ inline fp8e4m3 convert(const fp8e5m2 &u) { return fp8e4m3(float(u)); } };
template <> struct convertor<fp8e5m2, fp8e4m3> { static __host__ __device__ inline fp8e5m2 convert(const fp8e4m3 &u) { return fp8e5m2(float(u)); } };

// Packed pairs convert element-wise, through the scalar rule above.
template <typename T, typename U>
    requires(T2<T> && T2<U>)
struct convertor<T, U> {
    static __host__ __device__ inline T convert(const U &u) {
        using t = unpacked_t<T>;
        using s = unpacked_t<U>;
        const s *in = reinterpret_cast<const s *>(&u);
        T out;
        t *o = reinterpret_cast<t *>(&out);
        o[0] = convertor<t, s>::convert(in[0]);
        o[1] = convertor<t, s>::convert(in[1]);
        return out;
    }
};
template <> struct convertor<bf16_2, float2> { static __device__ inline bf16_2 convert(const float2 &u) { return __float22bfloat162_rn(u); } };
template <> struct convertor<float2, bf16_2> { static __device__ inline float2 convert(const bf16_2 &u) { return __bfloat1622float2(u); } };
template <> struct convertor<half_2, float2> { static __device__ inline half_2 convert(const float2 &u) { return __float22half2_rn(u); } };
template <> struct convertor<float2, half_2> { static __device__ inline float2 convert(const half_2 &u) { return __half22float2(u); } };
template <typename T> struct convertor<T, T> { static __host__ __device__ inline T convert(const T &u) { return u; } };

// ---------------------------------------------------------------------------------------------
// Constants per type: zero, one, +inf, -inf (packed types broadcast the scalar).
template <typename T> struct constants;
template <> struct constants<float> {
    static __host__ __device__ inline constexpr float zero() { return 0.f; }
    static __host__ __device__ inline constexpr float one() { return 1.f; }
    static __host__ __device__ inline constexpr float pos_infty() { return __builtin_inff(); }
    static __host__ __device__ inline constexpr float neg_infty() { return -__builtin_inff(); }
};
template <> struct constants<bf16> {
    static __host__ __device__ inline bf16 zero() { return __ushort_as_bfloat16(0x0000); }
    static __host__ __device__ inline bf16 one() { return __ushort_as_bfloat16(0x3F80); }
    static __host__ __device__ inline bf16 pos_infty() { return __ushort_as_bfloat16(0x7F80); }
    static __host__ __device__ inline bf16 neg_infty() { return __ushort_as_bfloat16(0xFF80); }
};
template <> struct constants<half> {
    static __host__ __device__ inline half zero() { return __ushort_as_half(0x0000); }
    static __host__ __device__ inline half one() { return __ushort_as_half(0x3C00); }
    static __host__ __device__ inline half pos_infty() { return __ushort_as_half(0x7C00); }
    static __host__ __device__ inline half neg_infty() { return __ushort_as_half(0xFC00); }
};
// fp8 e4m3 has no infinity: its extremes are the largest finite values (+-448).
template <> struct constants<fp8e4m3> {
    static __host__ __device__ inline fp8e4m3 zero() { return fp8e4m3(0.f); }
    static __host__ __device__ inline fp8e4m3 one() { return fp8e4m3(1.f); }
    static __host__ __device__ inline fp8e4m3 pos_infty() { return fp8e4m3(448.f); }
    static __host__ __device__ inline fp8e4m3 neg_infty() { return fp8e4m3(-448.f); }
};
template <> struct constants<fp8e5m2> {
    static __host__ __device__ inline fp8e5m2 zero() { return fp8e5m2(0.f); }
    static __host__ __device__ inline fp8e5m2 one() { return fp8e5m2(1.f); }
    static __host__ __device__ inline fp8e5m2 pos_infty() { return fp8e5m2(__builtin_inff()); }
    static __host__ __device__ inline fp8e5m2 neg_infty() { return fp8e5m2(-__builtin_inff()); }
};
template <typename T>
    requires T2<T>
struct constants<T> {
    using s = unpacked_t<T>;
    static __host__ __device__ inline T pair(s v) {
        T out;
        reinterpret_cast<s *>(&out)[0] = v;
        reinterpret_cast<s *>(&out)[1] = v;
        return out;
    }
    static __host__ __device__ inline T zero() { return pair(constants<s>::zero()); }
    static __host__ __device__ inline T one() { return pair(constants<s>::one()); }
    static __host__ __device__ inline T pos_infty() { return pair(constants<s>::pos_infty()); }
    static __host__ __device__ inline T neg_infty() { return pair(constants<s>::neg_infty()); }
};

} // namespace base_types

// Convenience: kittens::convert<To>(from).
template <typename T, typename U> __host__ __device__ inline T convert(const U &u) {
    return base_types::convertor<T, U>::convert(u);
}

} // namespace kittens
