// The Based feature map as the kernels store it: phi(x) = [1, x, x (x) x / sqrt(2)] (docs/based.md) with the
// quadratic block folded by symmetry. x_a x_b = x_b x_a, so (q (x) q) . (k (x) k) = sum_a q_a^2 k_a^2
// + 2 sum_{a<b} q_a q_b k_a k_b: the 136 products with a <= b carry the whole quadratic term, the off-diagonal ones
// with twice the weight. Kernel features are therefore, in this order: the 136 products x_a x_b (a <= b, row-major),
// the 16 linear x_b, the constant 1, and zeros up to FEATURES = 160 (ten k-steps of 16). Every kernel feature is a raw
// product of input elements; the weights (scale^2 / 2 on the diagonal, scale^2 off it, scale on the linear block) are
// applied once to the state side, never per token.
#pragma once

#include "based.h"

#include <array>
#include <utility>

namespace tk_based {

inline constexpr int QUAD_FEATURES = FEATURE_DIM * (FEATURE_DIM + 1) / 2;   // 136
inline constexpr int LINEAR_FEATURE0 = QUAD_FEATURES;                      // 136 .. 151
inline constexpr int CONSTANT_FEATURE = LINEAR_FEATURE0 + FEATURE_DIM;     // 152
inline constexpr int KERNEL_FEATURES = 160;                                // padded to a multiple of 16
static_assert(CONSTANT_FEATURE < KERNEL_FEATURES && KERNEL_FEATURES % 16 == 0);

enum class feature_kind { quadratic, linear, constant, none };
struct feature_def {
    feature_kind kind;
    int a, b; // x_a x_b (quadratic, a <= b), x_b (linear)
};

constexpr std::array<feature_def, KERNEL_FEATURES> make_feature_table() {
    std::array<feature_def, KERNEL_FEATURES> t{};
    int f = 0;
    for (int a = 0; a < FEATURE_DIM; a++)
        for (int b = a; b < FEATURE_DIM; b++) t[f++] = {feature_kind::quadratic, a, b};
    for (int b = 0; b < FEATURE_DIM; b++) t[f++] = {feature_kind::linear, 0, b};
    t[f++] = {feature_kind::constant, 0, 0};
    while (f < KERNEL_FEATURES) t[f++] = {feature_kind::none, 0, 0};
    return t;
}
inline constexpr std::array<feature_def, KERNEL_FEATURES> FEATURE_TABLE = make_feature_table();
// Feature F as a compile-time constant: the per-token loops visit features through for_features, so every index into
// a row of inputs is a constant and the row stays in registers.
template <int F> inline constexpr feature_def kernel_feature = FEATURE_TABLE[F];
// body.template operator()<F>() for F = F0 .. F0 + N - 1 (a lambda `[&]<int F>() {...}`).
template <int F0, int N, typename Body> __device__ __forceinline__ void for_features(Body &&body) {
    [&]<int... I>(std::integer_sequence<int, I...>) {
        (body.template operator()<F0 + I>(), ...);
    }(std::make_integer_sequence<int, N>{});
}

// Feature f for an index known only at run time (setup and final-state code, not the per-token loops).
__host__ __device__ inline feature_def feature_at(int f) {
    if (f < QUAD_FEATURES) {
        int a = 0, start = 0;
        while (f >= start + FEATURE_DIM - a) start += FEATURE_DIM - a++;
        return {feature_kind::quadratic, a, a + f - start};
    }
    if (f < CONSTANT_FEATURE) return {feature_kind::linear, 0, f - LINEAR_FEATURE0};
    if (f == CONSTANT_FEATURE) return {feature_kind::constant, 0, 0};
    return {feature_kind::none, 0, 0};
}

// What a state row of feature f is multiplied by where it meets the (unscaled) query features: the scale of the
// queries and the weight of the term, so that o = phi_kernel(q) . (weights * state).
__host__ __device__ inline float feature_weight(const feature_def &d, float scale) {
    switch (d.kind) {
    case feature_kind::quadratic: return d.a == d.b ? 0.5f * scale * scale : scale * scale;
    case feature_kind::linear: return scale;
    case feature_kind::constant: return 1.f;
    default: return 0.f;
    }
}

// The exchanged state's 273 columns (based.h) that a kernel feature stands for: column(d, 0), and for an off-diagonal
// product also column(d, 1) (the pair (a, b), (b, a), each holding x_a x_b / sqrt(2)); -1 where there is none.
__host__ __device__ inline int state_column(const feature_def &d, int which) {
    switch (d.kind) {
    case feature_kind::quadratic:
        if (which == 0) return 1 + FEATURE_DIM + d.a * FEATURE_DIM + d.b;
        return d.a == d.b ? -1 : 1 + FEATURE_DIM + d.b * FEATURE_DIM + d.a;
    case feature_kind::linear: return which == 0 ? 1 + d.b : -1;
    case feature_kind::constant: return which == 0 ? 0 : -1;
    default: return -1;
    }
}
// Kernel state row <- exchanged columns: the quadratic rows hold sum x_a x_b once, so the columns (each / sqrt(2))
// are added and multiplied by 1 / sqrt(2) (the diagonal's single column by sqrt(2)).
__host__ __device__ inline float from_state(const feature_def &d, const float *row) {
    const int c0 = state_column(d, 0), c1 = state_column(d, 1);
    if (c0 < 0) return 0.f;
    if (d.kind != feature_kind::quadratic) return row[c0];
    return c1 < 0 ? 1.41421356237309505f * row[c0] : 0.70710678118654752f * (row[c0] + row[c1]);
}
// Exchanged columns <- kernel state row x: x / sqrt(2) in each quadratic column, x in the others.
__host__ __device__ inline void to_state(const feature_def &d, float x, float *row) {
    const int c0 = state_column(d, 0), c1 = state_column(d, 1);
    const float v = d.kind == feature_kind::quadratic ? 0.70710678118654752f * x : x;
    if (c0 >= 0) row[c0] = v;
    if (c1 >= 0) row[c1] = v;
}

} // namespace tk_based
