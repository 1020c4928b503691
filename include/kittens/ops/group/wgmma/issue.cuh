// The shared body of every warpgroup matrix multiply (mma_AB, mm_ABt, ...): operand checks, the
// K-step / row-slab loops, and the choice of wgmma wrapper. Called by all 128 threads of a
// warpgroup between a wgmma.fence and a commit (see wgmma.cuh, which owns those).
//
// Shapes (H = row slabs of 64; every warp holds 16 rows of each slab):
//   d: rt<float, 16*H, N, row_l> per warp; slab h, warp w <-> output rows 64h + 16w .. +15
//   a: st<T, 64*H, K> (K-major)  | st<T, K, 64*H> (M-major, trans_a) | rt<T, 16*H, K, row_l> per warp
//   b: st<T, N, K>   (K-major)   | st<T, K, N>    (N-major, trans_b)
#pragma once

#include <cstdint>

#include "../../../common/common.cuh"
#include "../../../types/register/rt.cuh"
#include "../../../types/shared/st.cuh"
#include "descriptor.cuh"
#include "instructions.cuh"

namespace kittens {
namespace wgmma {

// Tag for the chained forms, warpgroup::mma_AB(d, a, b, wgmma::chained): d was last written by an earlier
// wgmma (possibly still running) and by nothing else since. The ISA orders accumulations of same-shape
// wgmmas on the same registers by itself, so these skip pinning d: pinning counts as a use of registers
// an in-flight wgmma defines, and ptxas would answer with a full wait, serialising the pipeline.
struct chained_t {};
inline constexpr chained_t chained{};

namespace detail {

// Pin register values at this point of the program: the compiler may not move their
// definitions below, or their uses above, this (empty) statement.
__device__ __forceinline__ void pin(float &x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void pin(uint32_t &x) { asm volatile("" : "+r"(x)::"memory"); }

template <ducks::rt::all D> __device__ inline void pin_tile(D &d) {
    static_assert(std::same_as<typename D::T, float>, "wgmma accumulators are float register tiles");
#pragma unroll
    for (int h = 0; h < D::height; h++)
#pragma unroll
        for (int j = 0; j < D::width; j++)
#pragma unroll
            for (int p = 0; p < 4; p++) {
                pin(d.tiles[h][j].data[p].x);
                pin(d.tiles[h][j].data[p].y);
            }
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit_group() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait_group() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7 pending groups");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

template <typename A> constexpr bool a_in_registers = ducks::rt::all<A>;

template <int trans_a, int trans_b, typename D, typename A, typename B> constexpr void check_operands() {
    static_assert(ducks::rt::all<D>, "wgmma: the accumulator must be a register tile (rt_fl<16*H, N>)");
    static_assert(std::same_as<typename D::layout, row_l>, "wgmma: the accumulator must be a row-layout register tile");
    static_assert(std::same_as<typename D::T, float>, "wgmma: the accumulator must hold float (rt_fl)");
    static_assert(ducks::st::all<B>, "wgmma: B must be a shared tile");
    static_assert(a_in_registers<A> || ducks::st::all<A>, "wgmma: A must be a shared tile or a register tile");
    using TA = typename A::T;
    using TB = typename B::T;
    constexpr bool fp8 = base_types::fp8<TB>;
    static_assert(base_types::half_precision<TB> || fp8, "wgmma inputs are bf16, half, fp8e4m3 or fp8e5m2");
    static_assert(fp8 ? base_types::fp8<TA> : std::same_as<TA, TB>,
                  "wgmma: A and B must have the same 16-bit type (fp8 may mix e4m3 and e5m2)");
    static_assert(!fp8 || (trans_a == 0 && trans_b == 0),
                  "fp8 wgmma has no transpose: both operands must be K-major (use mma_ABt with b = st<fp8, N, K>)");
    constexpr int N = D::cols;
    static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma N must be a multiple of 16 between 16 and 256");
    constexpr int K = trans_b ? B::rows : B::cols;
    constexpr int BN = trans_b ? B::cols : B::rows;
    static_assert(BN == N, "wgmma: B's N extent must equal the accumulator's width");
    static_assert(K % (fp8 ? 32 : 16) == 0, "wgmma: K must be a multiple of 16 (32 for fp8)");
    if constexpr (a_in_registers<A>) {
        static_assert(trans_a == 0, "wgmma: A in registers cannot be transposed (use the shared-tile form)");
        static_assert(!fp8, "fp8 wgmma takes A from shared memory only");
        static_assert(std::same_as<typename A::layout, row_l>, "wgmma: A in registers must be a row-layout tile");
        static_assert(A::rows == D::rows, "wgmma: register A must have as many rows per warp as the accumulator");
        static_assert(A::cols == K, "wgmma: A and B must agree on K");
    } else {
        constexpr int AM = trans_a ? A::cols : A::rows;
        constexpr int AK = trans_a ? A::rows : A::cols;
        static_assert(AM == 4 * D::rows, "wgmma: shared A must have 64*H rows for an accumulator of 16*H rows per warp");
        static_assert(AK == K, "wgmma: A and B must agree on K");
    }
}

// Issue every instruction of d (+)= op(a) @ op(b). accumulate = false overwrites d.
template <int trans_a, int trans_b, bool accumulate, typename D, typename A, typename B>
__device__ inline void issue(D &d, const A &a, const B &b) {
    check_operands<trans_a, trans_b, D, A, B>();
    using TA = typename A::T;
    using TB = typename B::T;
    constexpr bool fp8 = base_types::fp8<TB>;
    constexpr int H = D::height;
    constexpr int N = D::cols;
    constexpr int k_step = fp8 ? 32 : 16; // elements of K per instruction (always 32 bytes)
    constexpr int K = trans_b ? B::rows : B::cols;
    using shape = mma_shape<N>;

    const descriptor<B, bool(trans_b)> bd(b);
    if constexpr (a_in_registers<A>) {
#pragma unroll
        for (int k = 0; k < K / k_step; k++) {
            const uint64_t bdesc = trans_b ? bd.at(k * k_step, 0) : bd.at(0, k * k_step);
#pragma unroll
            for (int h = 0; h < H; h++) {
                const uint32_t(&regs)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&a.tiles[h][k].data[0]);
                shape::template rs<TA, trans_b>(d.tiles[h], regs, bdesc, accumulate || k > 0);
            }
        }
    } else {
        const descriptor<A, bool(trans_a)> ad(a);
#pragma unroll
        for (int k = 0; k < K / k_step; k++) {
            const uint64_t bdesc = trans_b ? bd.at(k * k_step, 0) : bd.at(0, k * k_step);
#pragma unroll
            for (int h = 0; h < H; h++) {
                const uint64_t adesc = trans_a ? ad.at(k * k_step, 64 * h) : ad.at(64 * h, k * k_step);
                if constexpr (fp8) shape::template ss_fp8<TA, TB>(d.tiles[h], adesc, bdesc, accumulate || k > 0);
                else shape::template ss<TA, trans_a, trans_b>(d.tiles[h], adesc, bdesc, accumulate || k > 0);
            }
        }
    }
}

} // namespace detail
} // namespace wgmma
} // namespace kittens
