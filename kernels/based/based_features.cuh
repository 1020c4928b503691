// The Based feature map as the kernels store it: phi(x) = [1, x, x (x) x / sqrt(2)] (docs/based.md) with the
// quadratic block folded by symmetry. x_a x_b = x_b x_a, so (q (x) q) . (k (x) k) = sum_a q_a^2 k_a^2
// + 2 sum_{a<b} q_a q_b k_a k_b: the 136 products with a <= b carry the whole quadratic term, the off-diagonal ones
// with twice the weight. Kernel features are therefore, in this order: the 136 products x_a x_b (a <= b, row-major),
// the 16 linear x_b, the constant 1, and zeros up to FEATURES = 160 (ten k-steps of 16). Every kernel feature is a raw
// product of input elements; the weights (scale^2 / 2 on the diagonal, scale^2 off it, scale on the linear block) are
// applied once to the state side, never per token.
#pragma once

#include "based.h"
#include "kittens.cuh"

#include <array>
#include <type_traits>
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

// This warp's rows of an fp32 state tile in registers (state rows row0 + p.row, value columns col0 + p.col) from the
// exchanged layout at state0 ((batch * heads) x value_dim x STATE_FEATURES): row_of(d, column) reads kernel feature d
// from one value column's STATE_FEATURES floats. Zeros without state0 and past value_dim. state0 and value_dim are
// fields of the kernel's globals, taken by reference like its other reads of them.
template <typename RT, typename RowOf>
__device__ inline void load_state_rows(RT &s, const float *const &state0, size_t head, const int &value_dim, int col0,
                                       int row0, RowOf &&row_of) {
    kittens::for_each_pair([&](kittens::pair_pos p, float2 &v) {
        v = make_float2(0.f, 0.f);
        if (!state0) return;
        const feature_def d = feature_at(row0 + p.row);
        const float *src = state0 + (head * value_dim + col0 + p.col) * STATE_FEATURES;
        if (col0 + p.col < value_dim) v.x = row_of(d, src);
        if (col0 + p.col + 1 < value_dim) v.y = row_of(d, src + STATE_FEATURES);
    }, s);
}

// ---------------------------------------------------------------- feature tiles in shared memory
// What the forward and backward kernels build per chunk from a 16-column tile X of 16-bit inputs (T: bf16 or half):
// Phi(X) (tokens x features, fp32 products rounded once) and Phi(X)^T (state rows x tokens, packed products of two
// tokens, one multiply per pair).
template <typename T> struct feature_tiles {
    using T2 = typename kittens::base_types::packed_t<T>;

    __device__ static inline T2 to_pair(float x, float y) {
        return kittens::base_types::convertor<T2, float2>::convert(make_float2(x, y));
    }
    __device__ static inline float2 from_pair(uint32_t w) {
        return kittens::base_types::convertor<float2, T2>::convert(kittens::detail::memory::bitcast<T2>(w));
    }
    __device__ static inline void store_word(uint32_t addr, uint32_t w) { kittens::store_shared_word(addr, w); }
    // The 16 elements of row r of an input tile, as 8 packed pairs (two 16-byte loads).
    template <typename X> __device__ static inline void load_row(uint32_t (&w)[8], const X &t, int r) {
        static_assert(X::cols == FEATURE_DIM, "Based: input tiles hold one row of FEATURE_DIM elements per token");
        using half_row = uint32_t[4]; // 8 elements, one 16-byte load
        kittens::load_shared_words<4>(reinterpret_cast<half_row &>(w[0]), t.idx(r, 0));
        kittens::load_shared_words<4>(reinterpret_cast<half_row &>(w[4]), t.idx(r, 8));
    }

    // Phi(X) row r (token r of the tile x16), features F0 .. F0 + N - 1 into dst's row r, in fp32 then rounded once.
    template <int F0, int N, typename Dst, typename X>
    __device__ static inline void build_row_features(Dst &dst, const X &x16, int r) {
        uint32_t w[8];
        load_row(w, x16, r);
        float x[FEATURE_DIM];
#pragma unroll
        for (int i = 0; i < FEATURE_DIM / 2; i++) {
            const float2 p = from_pair(w[i]);
            x[2 * i] = p.x;
            x[2 * i + 1] = p.y;
        }
        // Eight features per 16-byte store.
        for_features<0, N / 8>([&]<int G>() {
            uint32_t out[4];
            float v[8];
            for_features<F0 + 8 * G, 8>([&]<int F>() {
                constexpr feature_def d = kernel_feature<F>;
                float &o = v[F - F0 - 8 * G];
                if constexpr (d.kind == feature_kind::quadratic) o = x[d.a] * x[d.b];
                else if constexpr (d.kind == feature_kind::linear) o = x[d.b];
                else o = d.kind == feature_kind::constant ? 1.f : 0.f;
            });
#pragma unroll
            for (int i = 0; i < 4; i++) out[i] = kittens::detail::memory::bitcast<uint32_t>(to_pair(v[2 * i], v[2 * i + 1]));
            kittens::store_shared_words<4>(dst.idx(r, F0 + 8 * G), out);
        });
    }

    // Phi(X)^T columns 2p, 2p + 1 (tokens 2p, 2p + 1 of the chunk held by the two tiles x16), state rows
    // F0 .. F0 + N - 1, into tile_of.operator()<F>() (the tile holding state row F, at row F % its rows); the constant
    // feature's pair is constant_of() (the forward masks tokens past the end with it).
    template <int F0, int N, typename TileOf, typename ConstantOf, typename X>
    __device__ static inline void build_pair_features(TileOf &&tile_of, const X (&x16)[2], int p, ConstantOf &&constant_of) {
        constexpr int ROWS = X::rows;
        const X &x = x16[p / (ROWS / 2)];
        const int r = 2 * p % ROWS;
        uint32_t w0[8], w1[8];
        load_row(w0, x, r);
        load_row(w1, x, r + 1);
        T2 pair[FEATURE_DIM]; // (x_2p[a], x_2p+1[a])
#pragma unroll
        for (int i = 0; i < FEATURE_DIM / 2; i++) {
            pair[2 * i] = kittens::detail::memory::bitcast<T2>(__byte_perm(w0[i], w1[i], 0x5410));
            pair[2 * i + 1] = kittens::detail::memory::bitcast<T2>(__byte_perm(w0[i], w1[i], 0x7632));
        }
        const T2 constant = constant_of();
        for_features<F0, N>([&]<int F>() {
            constexpr feature_def d = kernel_feature<F>;
            T2 v;
            if constexpr (d.kind == feature_kind::quadratic) v = kittens::base_ops::mul::op<T2>(pair[d.a], pair[d.b]);
            else if constexpr (d.kind == feature_kind::linear) v = pair[d.b];
            else if constexpr (d.kind == feature_kind::constant) v = constant;
            else v = kittens::base_types::constants<T2>::zero();
            auto &tile = tile_of.template operator()<F>();
            store_word(tile.idx(F % std::remove_reference_t<decltype(tile)>::rows, 2 * p),
                       kittens::detail::memory::bitcast<uint32_t>(v));
        });
    }
};

} // namespace tk_based
