// Element functors used by maps and reductions. Each is a struct with a static `op`, templated on
// the element type (scalar or packed pair), so tile ops can be written once: map<base_ops::exp>.
//
// Arithmetic on 16-bit types uses the packed hardware instruction where one exists; otherwise the
// value goes through float and back, which is what the hardware does internally anyway.
#pragma once

#include "base_types.cuh"

namespace kittens {
namespace base_ops {

namespace detail {
// Apply a float function to each half of a packed pair (or to a scalar) via float.
template <typename T, typename F> __device__ inline T via_float(const T &x, F f) {
    if constexpr (base_types::T2<T>) {
        using s = base_types::unpacked_t<T>;
        const s *in = reinterpret_cast<const s *>(&x);
        T out;
        s *o = reinterpret_cast<s *>(&out);
        o[0] = convert<s>(f(convert<float>(in[0])));
        o[1] = convert<s>(f(convert<float>(in[1])));
        return out;
    } else {
        return convert<T>(f(convert<float>(x)));
    }
}
template <typename T, typename F> __device__ inline T via_float2(const T &a, const T &b, F f) {
    if constexpr (base_types::T2<T>) {
        using s = base_types::unpacked_t<T>;
        const s *x = reinterpret_cast<const s *>(&a);
        const s *y = reinterpret_cast<const s *>(&b);
        T out;
        s *o = reinterpret_cast<s *>(&out);
        o[0] = convert<s>(f(convert<float>(x[0]), convert<float>(y[0])));
        o[1] = convert<s>(f(convert<float>(x[1]), convert<float>(y[1])));
        return out;
    } else {
        return convert<T>(f(convert<float>(a), convert<float>(b)));
    }
}
template <typename T>
concept packed16 = std::same_as<T, bf16_2> || std::same_as<T, half_2>;
template <typename T>
concept scalar16 = std::same_as<T, bf16> || std::same_as<T, half>;
} // namespace detail

// ----- constant producers (ignore their input) -----
struct zero { template <typename T> static __device__ inline T op(const T & = T{}) { return base_types::constants<T>::zero(); } };
struct one { template <typename T> static __device__ inline T op(const T & = T{}) { return base_types::constants<T>::one(); } };
struct pos_infty { template <typename T> static __device__ inline T op(const T & = T{}) { return base_types::constants<T>::pos_infty(); } };
struct neg_infty { template <typename T> static __device__ inline T op(const T & = T{}) { return base_types::constants<T>::neg_infty(); } };

// ----- unary -----
struct copy { template <typename T> static __device__ inline T op(const T &x) { return x; } };
struct exp {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return __expf(x);
        else if constexpr (std::same_as<T, float2>) return float2{__expf(x.x), __expf(x.y)};
        else return detail::via_float(x, [](float v) { return __expf(v); });
    }
};
struct exp2 {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return exp2f(x);
        else if constexpr (std::same_as<T, float2>) return float2{exp2f(x.x), exp2f(x.y)};
        else return detail::via_float(x, [](float v) { return exp2f(v); });
    }
};
struct log {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return __logf(x);
        else if constexpr (std::same_as<T, float2>) return float2{__logf(x.x), __logf(x.y)};
        else return detail::via_float(x, [](float v) { return __logf(v); });
    }
};
struct log2 {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return __log2f(x);
        else if constexpr (std::same_as<T, float2>) return float2{__log2f(x.x), __log2f(x.y)};
        else return detail::via_float(x, [](float v) { return __log2f(v); });
    }
};
struct abs {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return fabsf(x);
        else if constexpr (std::same_as<T, float2>) return float2{fabsf(x.x), fabsf(x.y)};
        else if constexpr (detail::packed16<T> || detail::scalar16<T>) return __habs2_or(x);
        else return detail::via_float(x, [](float v) { return fabsf(v); });
    }
    template <typename T> static __device__ inline T __habs2_or(const T &x) {
        if constexpr (detail::packed16<T>) return __habs2(x);
        else return __habs(x);
    }
};
struct relu {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return fmaxf(x, 0.f);
        else if constexpr (std::same_as<T, float2>) return float2{fmaxf(x.x, 0.f), fmaxf(x.y, 0.f)};
        else if constexpr (detail::packed16<T>) return __hmax2(x, base_types::constants<T>::zero());
        else if constexpr (detail::scalar16<T>) return __hmax(x, base_types::constants<T>::zero());
        else return detail::via_float(x, [](float v) { return fmaxf(v, 0.f); });
    }
};
struct neg {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return -x;
        else if constexpr (std::same_as<T, float2>) return float2{-x.x, -x.y};
        else if constexpr (detail::packed16<T>) return __hneg2(x);
        else if constexpr (detail::scalar16<T>) return __hneg(x);
        else return detail::via_float(x, [](float v) { return -v; });
    }
};
struct sqrt {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return sqrtf(x);
        else if constexpr (std::same_as<T, float2>) return float2{sqrtf(x.x), sqrtf(x.y)};
        else return detail::via_float(x, [](float v) { return sqrtf(v); });
    }
};
struct rsqrt {
    template <typename T> static __device__ inline T op(const T &x) {
        if constexpr (std::same_as<T, float>) return rsqrtf(x);
        else if constexpr (std::same_as<T, float2>) return float2{rsqrtf(x.x), rsqrtf(x.y)};
        else return detail::via_float(x, [](float v) { return rsqrtf(v); });
    }
};

// ----- binary -----
#define KITTENS_BINARY_OP(NAME, FLOAT_EXPR, H2_FN, H_FN)                                            \
    struct NAME {                                                                                \
        template <typename T> static __device__ inline T op(const T &a, const T &b) {            \
            if constexpr (std::same_as<T, float>) { return FLOAT_EXPR(a, b); }                   \
            else if constexpr (std::same_as<T, float2>) {                                        \
                return float2{FLOAT_EXPR(a.x, b.x), FLOAT_EXPR(a.y, b.y)};                       \
            } else if constexpr (detail::packed16<T>) { return H2_FN(a, b); }                   \
            else if constexpr (detail::scalar16<T>) { return H_FN(a, b); }                      \
            else { return detail::via_float2(a, b, [](float x, float y) { return FLOAT_EXPR(x, y); }); } \
        }                                                                                        \
    };
#define KITTENS_F_ADD(x, y) ((x) + (y))
#define KITTENS_F_SUB(x, y) ((x) - (y))
#define KITTENS_F_MUL(x, y) ((x) * (y))
#define KITTENS_F_DIV(x, y) ((x) / (y))
#define KITTENS_F_MAX(x, y) fmaxf((x), (y))
#define KITTENS_F_MIN(x, y) fminf((x), (y))
KITTENS_BINARY_OP(sum, KITTENS_F_ADD, __hadd2, __hadd)
KITTENS_BINARY_OP(sub, KITTENS_F_SUB, __hsub2, __hsub)
KITTENS_BINARY_OP(mul, KITTENS_F_MUL, __hmul2, __hmul)
KITTENS_BINARY_OP(div, KITTENS_F_DIV, __h2div, __hdiv)
KITTENS_BINARY_OP(max, KITTENS_F_MAX, __hmax2, __hmax)
KITTENS_BINARY_OP(min, KITTENS_F_MIN, __hmin2, __hmin)
#undef KITTENS_BINARY_OP
#undef KITTENS_F_ADD
#undef KITTENS_F_SUB
#undef KITTENS_F_MUL
#undef KITTENS_F_DIV
#undef KITTENS_F_MAX
#undef KITTENS_F_MIN

// ----- ternary: fused multiply-add, a*b + c -----
struct fma_AxBtC {
    template <typename T> static __device__ inline T op(const T &a, const T &b, const T &c) {
        return sum::op<T>(mul::op<T>(a, b), c);
    }
};

} // namespace base_ops
} // namespace kittens
