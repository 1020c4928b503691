// Ordering around TMA: byte expectations on semaphores, store completion groups, and the proxy
// fence between ordinary shared-memory writes and a TMA store that reads them.
#pragma once

#include "../../../common/common.cuh"
#include "../../../types/shared/st.cuh"
#include "../../../types/shared/sv.cuh"
#include "../semaphore.cuh"

namespace kittens {

// Shared memory written with ordinary stores is read by the asynchronous proxy (TMA stores, and
// wgmma operands) only after this fence: each writing thread calls it, then the threads
// synchronise, then the asynchronous operation is issued.
__device__ inline void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

namespace tma {

// Bytes one TMA transfer of this shared object moves. Not sizeof(): tiles are padded to their
// 1 KB alignment (and vectors to 128 B), while the engine counts only the data.
template <typename T> struct transfer_bytes;
template <ducks::st::all ST> struct transfer_bytes<ST> {
    static constexpr uint32_t value = uint32_t(ST::num_elements * sizeof(typename ST::T));
};
template <ducks::sv::all SV> struct transfer_bytes<SV> {
    static constexpr uint32_t value = uint32_t(SV::length * sizeof(typename SV::T));
};

// One arrival on `s` that also tells it to wait for `bytes` more transaction bytes this phase.
__device__ inline void expect_bytes(semaphore &s, uint32_t bytes) {
    asm volatile("{\n"
                 ".reg .b64 token;\n"
                 "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 token, [%0], %1;\n"
                 "}\n" ::"r"(kittens::detail::sem_addr(s)),
                 "r"(bytes)
                 : "memory");
}

// expect<ST>(s), or expect<ST_A, ST_B, SV_C>(s) for several loads landing on one semaphore: one
// arrival plus the bytes of every listed tile / vector.
template <typename... Ts> __device__ inline void expect(semaphore &s) {
    static_assert(sizeof...(Ts) > 0, "tma::expect needs at least one shared tile or vector type");
    expect_bytes(s, (0u + ... + transfer_bytes<Ts>::value));
}

// Close the current group of TMA stores / reductions issued by this thread.
__device__ inline void store_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Wait until at most N committed store groups of this thread are still writing global memory.
template <int N = 0> __device__ inline void store_async_wait() {
    static_assert(N >= 0, "store_async_wait<N>: N counts pending groups and cannot be negative");
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Weaker and sooner: wait only until the groups have finished READING shared memory, so the
// source tiles can be overwritten (the global writes may still be in flight).
template <int N = 0> __device__ inline void store_async_read_wait() {
    static_assert(N >= 0, "store_async_read_wait<N>: N counts pending groups and cannot be negative");
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Ordinary st.shared writes and TMA reads go through different proxies. Every thread that wrote
// a tile calls this before the barrier that precedes store_async / store_add_async on it.
__device__ inline void store_fence() { async_proxy_fence(); }

} // namespace tma
} // namespace kittens
