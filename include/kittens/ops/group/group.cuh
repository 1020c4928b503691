// Collaborative operations: group<N> spreads one operation over N consecutive warps (whose first
// warp index is a multiple of N). warpgroup = group<4> is the scope of wgmma and setmaxnreg.
//
// The member functions are defined in the included files, inside the struct, so that each op
// family stays in its own file while all of them share the group's constants.
#pragma once

#include "../../common/common.cuh"
#include "../../types/types.cuh"
#include "../warp/warp.cuh"
// Namespace-level pieces of the wgmma members (descriptors, raw instruction wrappers).
#include "wgmma/issue.cuh"

namespace kittens {

template <int N_WARPS> struct group {
    static_assert(N_WARPS > 0 && N_WARPS <= 32, "a group spans 1 to 32 warps");
    static constexpr int GROUP_WARPS = N_WARPS;
    static constexpr int GROUP_THREADS = N_WARPS * WARP_THREADS;
    __device__ static inline int laneid() { return threadIdx.x % GROUP_THREADS; }
    __device__ static inline int warpid() { return (threadIdx.x % GROUP_THREADS) / WARP_THREADS; }
    __device__ static inline int groupid() { return threadIdx.x / GROUP_THREADS; }
    // The first row, within a (16 * N)-row tile that the group computes together (a wgmma accumulator), of the
    // 16 rows the calling warp holds in its own register tile: the group's warps stack along rows.
    __device__ static inline int warp_row0() { return TILE_DIM * warpid(); }
    // Barrier over this group only (named barrier id 1 + groupid, so id 0 stays __syncthreads).
    __device__ static inline void sync(int id = -1) {
        int bar = id < 0 ? 1 + groupid() : id;
        asm volatile("bar.sync %0, %1;\n" ::"r"(bar), "n"(GROUP_THREADS) : "memory");
    }
    // Signal named barrier `id` without waiting: with a barrier of N threads shared by two parties, one arrives
    // (its writes before the arrival are visible to the other) while the other syncs. The id must not be
    // reused by the arriving side before the waiting side has passed it, or both of its uses count at once.
    __device__ static inline void arrive(int id) {
        asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(GROUP_THREADS) : "memory");
    }

#include "memory/memory.cuh"
#include "shared/shared.cuh"
#include "wgmma/wgmma.cuh"
#include "wgmma/setmaxnreg.cuh"
};

using warpgroup = group<4>;

// Named barrier `id` of THREADS threads that may reach it from different places in the code (one warpgroup in one
// unrolled iteration, another in the next): the non-aligned barrier.sync. bar.sync, the aligned form that group::sync
// uses, requires every participating thread to execute the same instruction.
template <int THREADS> __device__ inline void named_barrier_sync(int id) {
    static_assert(THREADS % WARP_THREADS == 0, "a named barrier counts whole warps");
    asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}

} // namespace kittens
