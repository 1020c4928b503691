// Included inside struct group<N_WARPS> (see group.cuh): no pragma once, no namespaces.
//
// Warpgroup matrix multiplies on the asynchronous tensor cores (wgmma). Valid for warpgroup =
// group<4> only: all 128 threads (4 consecutive warps, the first a multiple of 4) call together.
//
//   mma_AB  (d, a, b)  d += a @ b      a: st<T, 64H, K> or rt<T, 16H, K, row_l>   b: st<T, K, N>
//   mma_ABt (d, a, b)  d += a @ b^T    a: st<T, 64H, K> or rt<T, 16H, K, row_l>   b: st<T, N, K>
//   mma_AtB (d, a, b)  d += a^T @ b    a: st<T, K, 64H>                           b: st<T, K, N>
//   mma_AtBt(d, a, b)  d += a^T @ b^T  a: st<T, K, 64H>                           b: st<T, N, K>
//   mm_*    (d, a, b)  the same with d = ... (d's old value is ignored, not read)
// d is this warp's rt_fl<16H, N>: row slab h holds output rows 64h + 16*warp .. +15, in exactly
// the mma.sync accumulator order of rt_layout.cuh. T is bf16 or half; fp8 (e4m3 / e5m2, may be
// mixed) works with mma_ABt / mm_ABt from shared tiles only. N: any multiple of 16 up to 256.
//
// Each call fences the registers it reads (wgmma.fence), issues K/16 (K/32 for fp8) * H
// instructions, and commits them as ONE wgmma group. It returns at once: before touching d (or
// overwriting a register A or the shared operands), wait for the group with mma_async_wait<n>(),
// where n is how many of the most recent groups may still run:
//     warpgroup::mm_ABt(acc, a_tile, b_tile);      // acc = a @ b^T, in flight
//     warpgroup::mma_ABt(acc, a_tile2, b_tile2);   // chained onto the same accumulator
//     warpgroup::mma_async_wait();                 // both done; acc is readable
// Shared operands written by TMA are ready once their semaphore phase completes; operands written
// with ordinary stores need async_proxy_fence() by the writers and a barrier before the call.
// mma_fence / mma_commit_group are exposed for hand-built sequences on the raw wrappers; calling
// them around these functions is harmless (an extra commit adds an empty group).

template <int trans_a, int trans_b, bool accumulate, bool pin_d = true, typename D, typename A, typename B>
__device__ static inline void mma_dispatch(D &d, const A &a, const B &b) {
    static_assert(GROUP_WARPS == 4 && sizeof(D) > 0, "wgmma runs on a warpgroup: call it as warpgroup::mma_* (group<4>)");
    wgmma::detail::check_operands<trans_a, trans_b, D, A, B>();
    if constexpr (wgmma::detail::a_in_registers<A>) {
        A a_regs = a; // pinned below so no instruction that produces A can sink past the fence
#pragma unroll
        for (int h = 0; h < A::height; h++)
#pragma unroll
            for (int k = 0; k < A::width; k++)
#pragma unroll
                for (int p = 0; p < 4; p++) wgmma::detail::pin(*reinterpret_cast<uint32_t *>(&a_regs.tiles[h][k].data[p]));
        mma_fence(d);
        wgmma::detail::issue<trans_a, trans_b, accumulate>(d, a_regs, b);
    } else {
        if constexpr (pin_d) mma_fence(d);
        else wgmma::detail::fence();
        wgmma::detail::issue<trans_a, trans_b, accumulate>(d, a, b);
    }
    wgmma::detail::commit_group();
}

template <typename D, typename A, typename B> __device__ static inline void mma_AB(D &d, const A &a, const B &b) { mma_dispatch<0, 1, true>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mm_AB(D &d, const A &a, const B &b) { mma_dispatch<0, 1, false>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mma_ABt(D &d, const A &a, const B &b) { mma_dispatch<0, 0, true>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mm_ABt(D &d, const A &a, const B &b) { mma_dispatch<0, 0, false>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mma_AtB(D &d, const A &a, const B &b) { mma_dispatch<1, 1, true>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mm_AtB(D &d, const A &a, const B &b) { mma_dispatch<1, 1, false>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mma_AtBt(D &d, const A &a, const B &b) { mma_dispatch<1, 0, true>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mm_AtBt(D &d, const A &a, const B &b) { mma_dispatch<1, 0, false>(d, a, b); }

// Chained accumulation (see wgmma::chained_t): shared-memory A only.
template <typename D, typename A, typename B> __device__ static inline void mma_AB(D &d, const A &a, const B &b, wgmma::chained_t) { static_assert(!wgmma::detail::a_in_registers<A>, "chained wgmma takes A from shared memory"); mma_dispatch<0, 1, true, false>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mma_ABt(D &d, const A &a, const B &b, wgmma::chained_t) { static_assert(!wgmma::detail::a_in_registers<A>, "chained wgmma takes A from shared memory"); mma_dispatch<0, 0, true, false>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mma_AtB(D &d, const A &a, const B &b, wgmma::chained_t) { mma_dispatch<1, 1, true, false>(d, a, b); }
template <typename D, typename A, typename B> __device__ static inline void mma_AtBt(D &d, const A &a, const B &b, wgmma::chained_t) { mma_dispatch<1, 0, true, false>(d, a, b); }

// Order earlier register writes of d before the next wgmma (required by the ISA whenever d, or
// a register A, was touched by ordinary instructions since the last wgmma).
template <typename D> __device__ static inline void mma_fence(D &d) {
    static_assert(GROUP_WARPS == 4 && sizeof(D) > 0, "wgmma runs on a warpgroup: call it as warpgroup::mma_fence (group<4>)");
    wgmma::detail::pin_tile(d);
    wgmma::detail::fence();
}

__device__ static inline void mma_commit_group() { wgmma::detail::commit_group(); }

// Wait until at most N of this warpgroup's most recent wgmma groups are still running. Passing
// the accumulators (mma_async_wait(acc)) also pins them after the wait, so the compiler cannot
// hoist a read of them above it.
template <int N = 0, typename... Ds> __device__ static inline void mma_async_wait(Ds &...ds) {
    static_assert(GROUP_WARPS == 4 && N >= 0, "wgmma runs on a warpgroup: call it as warpgroup::mma_async_wait (group<4>)");
    wgmma::detail::wait_group<N>();
    (wgmma::detail::pin_tile(ds), ...);
}
