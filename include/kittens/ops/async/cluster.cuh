// Thread-block clusters: the CTAs of one cluster run at once on one GPC and can reach each other's shared
// memory. Used to share one TMA load between CTAs (tma::load_async with a CTA mask) and to tell a partner
// CTA that a shared buffer may be refilled (arrive_cluster).
#pragma once

#include "../../common/common.cuh"
#include "semaphore.cuh"

namespace kittens {
namespace cluster {

// This CTA's rank in its cluster, and the cluster's size (1 without a cluster launch).
__device__ __forceinline__ int rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return int(r);
}
__device__ __forceinline__ int size() {
    uint32_t n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return int(n);
}

// Barrier over every non-exited thread of the cluster; release/acquire orders shared-memory writes
// (mbarrier initialisation included) before the partner CTAs touch them.
__device__ __forceinline__ void sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

} // namespace cluster

// Arrive once on the semaphore at `s`'s offset in the CTA of cluster rank `cta` (this CTA included).
__device__ inline void arrive_cluster(semaphore &s, int cta) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(detail::sem_addr(s)), "r"(cta));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

// wait() for a semaphore that other CTAs of the cluster complete (remote arrivals, multicast TMA bytes):
// acquire at cluster scope, so their writes are visible and their arrivals wake the waiter.
__device__ inline void wait_cluster(semaphore &s, int phase) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "KITTENS_WAIT_CLUSTER_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra KITTENS_WAIT_CLUSTER_%=;\n"
                 "}\n" ::"r"(detail::sem_addr(s)),
                 "r"(uint32_t(phase & 1))
                 : "memory");
}

} // namespace kittens
