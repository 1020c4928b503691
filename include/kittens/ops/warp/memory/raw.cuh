// Per-thread raw accesses, for kernels whose data is not a tile: 4-, 8- and 16-byte words of shared memory, and the
// memory-model operations of a handshake between blocks (a counter released by producers of global data and
// acquired by its consumers, with the fence that orders TMA's writes before the release).
//
// Each is one PTX instruction with a "memory" clobber, so ordinary C++ accesses around it keep their order.
#pragma once

#include <cstdint>

#include "../../../common/common.cuh"

namespace kittens {

// ----- shared memory: N 32-bit words (N = 1, 2, 4) at a 4 * N-byte aligned shared-window address -----
template <int N> __device__ __forceinline__ void load_shared_words(uint32_t (&w)[N], uint32_t addr) {
    static_assert(N == 1 || N == 2 || N == 4, "shared-memory words move 1, 2 or 4 at a time (4, 8 or 16 bytes)");
    if constexpr (N == 4)
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                     : "r"(addr)
                     : "memory");
    else if constexpr (N == 2)
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(w[0]), "=r"(w[1]) : "r"(addr) : "memory");
    else
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w[0]) : "r"(addr) : "memory");
}

template <int N> __device__ __forceinline__ void store_shared_words(uint32_t addr, const uint32_t (&w)[N]) {
    static_assert(N == 1 || N == 2 || N == 4, "shared-memory words move 1, 2 or 4 at a time (4, 8 or 16 bytes)");
    if constexpr (N == 4)
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                     "r"(w[3])
                     : "memory");
    else if constexpr (N == 2)
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]) : "memory");
    else
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(w[0]) : "memory");
}

// One word given by value (st.shared.b32). A one-word array made at the call site for store_shared_words<1> is a
// stack temporary the optimizer then has to remove, and around many such stores it arranged the code differently.
__device__ __forceinline__ void store_shared_word(uint32_t addr, uint32_t w) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(w) : "memory");
}

// One word written to 16 bytes (a fill).
__device__ __forceinline__ void fill_shared_16(uint32_t addr, uint32_t w) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(w) : "memory");
}

// ----- global memory, device scope: a counter handed between blocks -----
// Reads *p; no later read or write of this thread moves before it, and it sees every write that a release
// (release_add) on p made visible.
__device__ __forceinline__ int acquire_load(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// *p += v; every earlier write of this thread is visible to a thread that acquires p and sees the sum.
__device__ __forceinline__ void release_add(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// Orders the async proxy's completed global writes (TMA stores and reduce-adds, waited for) before this thread's
// later generic-proxy operations, such as a release_add that publishes them.
__device__ __forceinline__ void fence_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

} // namespace kittens
