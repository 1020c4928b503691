// Warp-level tensor-core matrix multiply-accumulate with mma.sync.m16n8k16 (bf16 or fp16
// inputs, fp32 accumulate):
//   mma_AB  (d, a, b, c): d = a   * b   + c    a rt<M,K,row>  b rt<K,N,col>
//   mma_ABt (d, a, b, c): d = a   * b^T + c    a rt<M,K,row>  b rt<N,K,row>
//   mma_AtB (d, a, b, c): d = a^T * b   + c    a rt<K,M,col>  b rt<K,N,col>
//   mma_AtBt(d, a, b, c): d = a^T * b^T + c    a rt<K,M,col>  b rt<N,K,row>
// d and c are rt_fl<M,N,row>; d may alias c.
//
// Why these layouts: the instruction wants A (M x K) in the row fragment order and B (K x N) in
// the column order. A column-layout tile of X has the same registers as a row-layout tile of
// X^T (rt_layout.cuh), so "A^T given as col" and "B^T given as row" need no data movement; the
// four variants differ only in which base tile they pick.
#pragma once

#include "../lanes.cuh"

namespace kittens {

namespace detail::reg {

template <typename P> __device__ __forceinline__ uint32_t bits32(const P &p) {
    static_assert(sizeof(P) == 4, "mma operands are 32-bit registers");
    uint32_t u;
    memcpy(&u, &p, 4);
    return u;
}

// One m16n8k16: d(16x8) = a(16x16) * b(16x8) + c. a: four registers; b: two.
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float2 &d_top, float2 &d_bot, const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1, const float2 &c_top, const float2 &c_bot) {
    if constexpr (std::same_as<T, bf16>) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                     : "=f"(d_top.x), "=f"(d_top.y), "=f"(d_bot.x), "=f"(d_bot.y)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                       "f"(c_top.x), "f"(c_top.y), "f"(c_bot.x), "f"(c_bot.y));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                     : "=f"(d_top.x), "=f"(d_top.y), "=f"(d_bot.x), "=f"(d_bot.y)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                       "f"(c_top.x), "f"(c_top.y), "f"(c_bot.x), "f"(c_bot.y));
    }
}

// Where lane `lane` holds value v (0..3) of mma_16x8x16's output, {d_top.x, d_top.y, d_bot.x, d_bot.y}: on row
// mma_16x8_output_row(lane, v) of d, column mma_16x8_output_col(lane) + v % 2. For tables kept in this order that one
// thread fills or reads on behalf of every lane (a register tile's own lane visits its elements with for_each_pair).
__device__ __forceinline__ int mma_16x8_output_row(int lane, int v) { return lane / 4 + 8 * (v / 2); }
__device__ __forceinline__ int mma_16x8_output_col(int lane) { return 2 * (lane % 4); }

// One 16x16 output base tile: d = a * b + c, with a in A-fragment order (4 registers) and b in
// B-fragment order (data[0], data[2]: output columns 0..7; data[1], data[3]: columns 8..15).
// The accumulator's data[0], data[1] are columns 0..7 (rows g, g+8), data[2], data[3] 8..15.
template <typename D, typename A, typename B, typename C>
__device__ __forceinline__ void mma_base(D &d, const A &a, const B &b, const C &c) {
    using T = typename A::T;
    const uint32_t af[4] = {bits32(a.data[0]), bits32(a.data[1]), bits32(a.data[2]), bits32(a.data[3])};
    mma_16x8x16<T>(d.data[0], d.data[1], af, bits32(b.data[0]), bits32(b.data[2]), c.data[0], c.data[1]);
    mma_16x8x16<T>(d.data[2], d.data[3], af, bits32(b.data[1]), bits32(b.data[3]), c.data[2], c.data[3]);
}

// Base tile (m, k) of the A operand and (k, n) of the B operand, wherever the given tile keeps it.
template <bool trans_a, ducks::rt::all A> __device__ __forceinline__ const typename A::base &a_base(const A &a, int m, int k) {
    if constexpr (trans_a) return a.tiles[k][m];
    else return a.tiles[m][k];
}
template <bool trans_b, ducks::rt::all B> __device__ __forceinline__ const typename B::base &b_base(const B &b, int k, int n) {
    if constexpr (trans_b) return b.tiles[n][k];
    else return b.tiles[k][n];
}

// trans_a: a is given as K x M (column layout); trans_b: b is given as N x K (row layout).
template <bool trans_a, bool trans_b, ducks::rt::all D, ducks::rt::all A, ducks::rt::all B, ducks::rt::all C>
__device__ inline void mma(D &d, const A &a, const B &b, const C &c) {
    constexpr int K_TILES = trans_a ? A::height : A::width;
#pragma unroll
    for (int m = 0; m < D::height; m++) {
#pragma unroll
        for (int n = 0; n < D::width; n++) {
#pragma unroll
            for (int k = 0; k < K_TILES; k++) {
                // The first k step reads c; later ones accumulate onto d (d may alias c: only
                // c.tiles[m][n] feeds d.tiles[m][n], and it is read before being written).
                if (k == 0) mma_base(d.tiles[m][n], a_base<trans_a>(a, m, k), b_base<trans_b>(b, k, n), c.tiles[m][n]);
                else mma_base(d.tiles[m][n], a_base<trans_a>(a, m, k), b_base<trans_b>(b, k, n), d.tiles[m][n]);
            }
        }
    }
}

// What each variant requires of its operands, as named compile-time checks. Every failed check
// is its own static_assert whose message names the call and the problem, and the body is only
// instantiated when all hold, so misuse gives one clear error rather than a cascade.
template <bool trans_a, bool trans_b, ducks::rt::all D, ducks::rt::all A, ducks::rt::all B, ducks::rt::all C>
struct mma_rules {
    static constexpr bool acc_fp32 = std::same_as<typename D::T, float> && std::same_as<typename C::T, float>;
    static constexpr bool acc_row = ducks::rt::row_layout<D> && ducks::rt::row_layout<C>;
    static constexpr bool acc_shape = D::rows == C::rows && D::cols == C::cols;
    static constexpr bool in_16bit =
        base_types::half_precision<typename A::T> && base_types::half_precision<typename B::T>;
    static constexpr bool in_same = std::same_as<typename A::T, typename B::T>;
    static constexpr bool a_layout = trans_a ? ducks::rt::col_layout<A> : ducks::rt::row_layout<A>;
    static constexpr bool b_layout = trans_b ? ducks::rt::row_layout<B> : ducks::rt::col_layout<B>;
    static constexpr int a_m = trans_a ? A::cols : A::rows, a_k = trans_a ? A::rows : A::cols;
    static constexpr int b_n = trans_b ? B::rows : B::cols, b_k = trans_b ? B::cols : B::rows;
    static constexpr bool m_ok = a_m == D::rows, n_ok = b_n == D::cols, k_ok = a_k == b_k;
    static constexpr bool all = acc_fp32 && acc_row && acc_shape && in_16bit && in_same && a_layout && b_layout &&
                                m_ok && n_ok && k_ok;
};

} // namespace detail::reg

// Checks shared by the four variants (NAME is a string literal, so the messages name the call).
#define KITTENS_MMA_COMMON_CHECKS(NAME, R)                                                                       \
    static_assert(R::acc_fp32, NAME ": D and C (the accumulators) must be fp32 register tiles (rt_fl)");         \
    static_assert(R::acc_row, NAME ": D and C (the accumulators) must be row-layout register tiles");            \
    static_assert(R::acc_shape, NAME ": D and C must have the same shape");                                      \
    static_assert(R::in_16bit, NAME ": A and B must be bf16 or fp16 register tiles (fp32 and fp8 inputs are "    \
                               "not supported by mma.sync m16n8k16; copy() them to bf16 first)");                \
    static_assert(R::in_same, NAME ": A and B must have the same element type")

// d = a * b + c. a: rt<M,K,row>, b: rt<K,N,col>.
template <ducks::rt::all D, ducks::rt::all A, ducks::rt::all B, ducks::rt::all C>
__device__ inline void mma_AB(D &d, const A &a, const B &b, const C &c) {
    using R = detail::reg::mma_rules<false, false, D, A, B, C>;
    KITTENS_MMA_COMMON_CHECKS("mma_AB", R);
    static_assert(R::a_layout, "mma_AB: A must be a row-layout register tile (swap_layout it first)");
    static_assert(R::b_layout, "mma_AB: B must be a column-layout register tile (swap_layout it first)");
    static_assert(R::m_ok, "mma_AB: M mismatch: A is M x K and D is M x N, but A::rows != D::rows");
    static_assert(R::n_ok, "mma_AB: N mismatch: B is K x N and D is M x N, but B::cols != D::cols");
    static_assert(R::k_ok, "mma_AB: K mismatch: A is M x K and B is K x N, but A::cols != B::rows");
    if constexpr (R::all) detail::reg::mma<false, false>(d, a, b, c);
}

// d = a * b^T + c. a: rt<M,K,row>, b: rt<N,K,row>.
template <ducks::rt::all D, ducks::rt::all A, ducks::rt::all B, ducks::rt::all C>
__device__ inline void mma_ABt(D &d, const A &a, const B &b, const C &c) {
    using R = detail::reg::mma_rules<false, true, D, A, B, C>;
    KITTENS_MMA_COMMON_CHECKS("mma_ABt", R);
    static_assert(R::a_layout, "mma_ABt: A must be a row-layout register tile (swap_layout it first)");
    static_assert(R::b_layout,
                  "mma_ABt: B must be a row-layout register tile (it is N x K, used transposed; swap_layout it first)");
    static_assert(R::m_ok, "mma_ABt: M mismatch: A is M x K and D is M x N, but A::rows != D::rows");
    static_assert(R::n_ok, "mma_ABt: N mismatch: B is N x K and D is M x N, but B::rows != D::cols");
    static_assert(R::k_ok, "mma_ABt: K mismatch: A is M x K and B is N x K, but A::cols != B::cols");
    if constexpr (R::all) detail::reg::mma<false, true>(d, a, b, c);
}

// d = a^T * b + c. a: rt<K,M,col>, b: rt<K,N,col>.
template <ducks::rt::all D, ducks::rt::all A, ducks::rt::all B, ducks::rt::all C>
__device__ inline void mma_AtB(D &d, const A &a, const B &b, const C &c) {
    using R = detail::reg::mma_rules<true, false, D, A, B, C>;
    KITTENS_MMA_COMMON_CHECKS("mma_AtB", R);
    static_assert(R::a_layout,
                  "mma_AtB: A must be a column-layout register tile (it is K x M, used transposed; swap_layout it first)");
    static_assert(R::b_layout, "mma_AtB: B must be a column-layout register tile (swap_layout it first)");
    static_assert(R::m_ok, "mma_AtB: M mismatch: A is K x M and D is M x N, but A::cols != D::rows");
    static_assert(R::n_ok, "mma_AtB: N mismatch: B is K x N and D is M x N, but B::cols != D::cols");
    static_assert(R::k_ok, "mma_AtB: K mismatch: A is K x M and B is K x N, but A::rows != B::rows");
    if constexpr (R::all) detail::reg::mma<true, false>(d, a, b, c);
}

// d = a^T * b^T + c. a: rt<K,M,col>, b: rt<N,K,row>.
template <ducks::rt::all D, ducks::rt::all A, ducks::rt::all B, ducks::rt::all C>
__device__ inline void mma_AtBt(D &d, const A &a, const B &b, const C &c) {
    using R = detail::reg::mma_rules<true, true, D, A, B, C>;
    KITTENS_MMA_COMMON_CHECKS("mma_AtBt", R);
    static_assert(R::a_layout,
                  "mma_AtBt: A must be a column-layout register tile (it is K x M, used transposed; swap_layout it first)");
    static_assert(R::b_layout,
                  "mma_AtBt: B must be a row-layout register tile (it is N x K, used transposed; swap_layout it first)");
    static_assert(R::m_ok, "mma_AtBt: M mismatch: A is K x M and D is M x N, but A::cols != D::rows");
    static_assert(R::n_ok, "mma_AtBt: N mismatch: B is N x K and D is M x N, but B::rows != D::cols");
    static_assert(R::k_ok, "mma_AtBt: K mismatch: A is K x M and B is N x K, but A::rows != B::cols");
    if constexpr (R::all) detail::reg::mma<true, true>(d, a, b, c);
}

#undef KITTENS_MMA_COMMON_CHECKS

} // namespace kittens
