// Semaphores: Hopper mbarriers in shared memory.
//
// An mbarrier counts two things per phase: thread arrivals (arrive()) and transaction bytes
// (credited by the TMA engine as its copies land, debited by expect_tx). A phase completes when
// the expected number of arrivals has happened AND the byte balance is back to zero; the barrier
// then flips to the next phase, whose parity (0, 1, 0, ...) is what wait() takes. A waiter that
// tracks `phase ^= 1` after each wait can follow the barrier through any number of phases.
//
// Typical producer / consumer ring slot:
//     init_semaphore(full, 1);                 // one arrival: the producer's tma::expect
//     init_semaphore(empty, consumer_warps);   // one arrival per consumer warp
//     __syncthreads();                         // make the initialised barriers visible
//   producer (one thread):  wait(empty, p ^ 1) ... tma::expect<ST>(full); tma::load_async(s, g, i, full);
//   consumer:               wait(full, p); ... use s ...; if (laneid() == 0) arrive(empty);
#pragma once

#include "../../common/common.cuh"

namespace kittens {

struct semaphore {
    uint64_t value;
};

namespace detail {
__device__ __forceinline__ uint32_t sem_addr(const semaphore &s) { return smem_addr(&s.value); }
} // namespace detail

// Initialise a barrier (call from ONE thread, then synchronise the block before anyone uses it).
//   thread_arrivals: arrive() calls (each tma::expect counts as one) that complete a phase; >= 1.
//   tx_bytes:        optional byte count that phase 0 additionally waits for, as if someone had
//                    called tma::expect_bytes(s, tx_bytes) without arriving. Later phases start
//                    from zero: use tma::expect / expect_bytes for them.
// The fence makes the initialisation visible to the asynchronous proxy (the TMA engine), which
// otherwise may observe the barrier's memory before the init.
__device__ inline void init_semaphore(semaphore &s, int thread_arrivals, int tx_bytes = 0) {
    const uint32_t a = detail::sem_addr(s);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(thread_arrivals) : "memory");
    if (tx_bytes > 0)
        asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(tx_bytes) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Invalidate a barrier so its shared memory can be reused for something else.
__device__ inline void invalidate_semaphore(semaphore &s) {
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(detail::sem_addr(s)) : "memory");
}

// Count `count` arrivals on the current phase (release semantics: this thread's earlier writes
// are visible to whoever waits on the phase).
__device__ inline void arrive(semaphore &s, uint32_t count = 1) {
    // The returned phase token is not needed (waits use parity), so it goes to a scratch register.
    asm volatile("{\n"
                 ".reg .b64 token;\n"
                 "mbarrier.arrive.release.cta.shared::cta.b64 token, [%0], %1;\n"
                 "}\n" ::"r"(detail::sem_addr(s)),
                 "r"(count)
                 : "memory");
}

// Non-blocking: has the phase with parity `phase` completed?
__device__ inline bool test_wait(semaphore &s, int phase) {
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(detail::sem_addr(s)), "r"(uint32_t(phase & 1))
                 : "memory");
    return done != 0;
}

// Block until the phase with parity `phase` has completed (acquire semantics). try_wait sleeps
// in hardware for a bounded time before returning false, so this loop does not hammer the barrier.
__device__ inline void wait(semaphore &s, int phase) {
    const uint32_t a = detail::sem_addr(s);
    const uint32_t p = uint32_t(phase & 1);
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "KITTENS_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra KITTENS_WAIT_%=;\n"
                 "}\n" ::"r"(a),
                 "r"(p)
                 : "memory");
}

} // namespace kittens
