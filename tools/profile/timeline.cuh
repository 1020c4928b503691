// Shared by the timeline programs (tools/profile/*_timeline.cu): the SM clock, random inputs, the mean time of a
// launch, and the base of a kernel whose hooks a tool wraps to stamp them.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "kittens.cuh"

namespace timeline {

__device__ __forceinline__ unsigned long long now() {
    unsigned long long c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    return c;
}

// Uniform values in [-1, 1) from a hash of the index, in any type constructible from float (bf16, fp8):
// reproducible inputs without a host copy.
template <typename T> static __global__ void fill_random(T *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t x = uint32_t(i) * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        p[i] = T((x & 0xffff) / 32768.f - 1.f);
    }
}

// Mean microseconds of launch() over `reps` back-to-back calls, after three warm-ups; exits on a CUDA error.
template <typename F> float time_us(F launch, int reps) {
    for (int i = 0; i < 3; i++) launch();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < reps; i++) launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
        std::printf("CUDA error: %s\n", cudaGetErrorString(e));
        std::exit(1);
    }
    return ms * 1000.f / reps;
}

// Base of a kernel K wrapped so that its hooks can be stamped: Self is the wrapper (the kernel that is launched).
// The hooks' argument structs (LCSF's by default; a family with its own main loop names its own) differ only in
// their template argument, so they are reinterpreted as K's; each consumer counts the tasks it has finished.
template <typename Self, typename K, template <typename> class ConsumerArgs = kittens::lcsf::consumer_args,
          template <typename> class ProducerArgs = kittens::lcsf::producer_args>
struct wrapped : K {
    struct consumer_state : K::consumer_state {
        int task = 0; // tasks this consumer has finished
    };
    using args = ConsumerArgs<Self>;
    using producer = ProducerArgs<Self>;
    __device__ static auto &as_k(args &c) { return reinterpret_cast<ConsumerArgs<K> &>(c); }
    __device__ static auto &as_k(producer &p) { return reinterpret_cast<ProducerArgs<K> &>(p); }
};

} // namespace timeline
