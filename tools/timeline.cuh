// Shared by the standalone timeline programs (tools/*_timeline.cu): the SM clock, and the mean time of a launch.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

// Random GEMM operand sets (A: M x K, B: N x K elements of T) that together span three times the L2, at least two,
// as the Python bench rotates them so that each call finds its inputs in DRAM. The destructor frees them.
template <typename T> struct operand_sets {
    std::vector<const T *> a, b;
    operand_sets(int M, int N, int K) {
        int l2 = 0;
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
        const size_t set_bytes = (size_t(M) + N) * K * sizeof(T);
        const int sets = int(std::max<size_t>(2, std::min<size_t>(64, (3 * size_t(l2) + set_bytes - 1) / set_bytes)));
        a.resize(sets);
        b.resize(sets);
        for (int i = 0; i < sets; i++) {
            T *pa, *pb;
            cudaMalloc(&pa, size_t(M) * K * sizeof(T));
            cudaMalloc(&pb, size_t(N) * K * sizeof(T));
            fill_random<<<256, 256>>>(pa, size_t(M) * K, 1 + 2 * i);
            fill_random<<<256, 256>>>(pb, size_t(N) * K, 2 + 2 * i);
            a[i] = pa;
            b[i] = pb;
        }
    }
    ~operand_sets() {
        for (size_t i = 0; i < a.size(); i++) {
            cudaFree(const_cast<T *>(a[i]));
            cudaFree(const_cast<T *>(b[i]));
        }
    }
    operand_sets(const operand_sets &) = delete;
    operand_sets &operator=(const operand_sets &) = delete;
};

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

static __global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Median microseconds of launch(i) over `reps` calls timed one at a time as the Python bench does: a spin kernel first
// (so the call is queued before its start event fires), then events around the call. launch(i) should rotate through
// input sets that together exceed L2, so that each call finds its inputs in DRAM ("cold").
template <typename F> float cold_us(F launch, int reps) {
    for (int i = 0; i < 3; i++) launch(i);
    std::vector<cudaEvent_t> e(2 * reps);
    for (auto &x : e) cudaEventCreate(&x);
    for (int i = 0; i < reps; i++) {
        spin<<<1, 1>>>(200000);
        cudaEventRecord(e[2 * i]);
        launch(3 + i);
        cudaEventRecord(e[2 * i + 1]);
    }
    cudaDeviceSynchronize();
    std::vector<float> us(reps);
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, e[2 * i], e[2 * i + 1]);
        us[i] = ms * 1000.f;
    }
    for (auto &x : e) cudaEventDestroy(x);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
        std::printf("CUDA error: %s\n", cudaGetErrorString(err));
        std::exit(1);
    }
    std::sort(us.begin(), us.end());
    return us[reps / 2];
}

// Base of a kernel K wrapped so that its hooks can be stamped: Self is the wrapper (the kernel LCSF launches).
// The argument structs differ only in their template argument, so they are reinterpreted as K's; each consumer
// counts the tasks it has finished.
template <typename Self, typename K> struct wrapped : K {
    struct consumer_state : K::consumer_state {
        int task = 0; // tasks this consumer has finished
    };
    using args = kittens::lcsf::consumer_args<Self>;
    using producer = kittens::lcsf::producer_args<Self>;
    __device__ static auto &as_k(args &c) { return reinterpret_cast<kittens::lcsf::consumer_args<K> &>(c); }
    __device__ static auto &as_k(producer &p) { return reinterpret_cast<kittens::lcsf::producer_args<K> &>(p); }
};

} // namespace timeline
