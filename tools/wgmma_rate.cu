// How close one warpgroup alone gets to the SM's tensor rate, against two, with the GEMM's issue pattern
// (one 64-deep K-slice group per stage, wait<W> after each), operands resident in shared memory. Cycles by clock64
// per block, one block per SM.
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -diag-suppress=20012 \
//        -Iinclude/kittens -o /tmp/wgmma_rate tools/wgmma_rate.cu && /tmp/wgmma_rate      (on a GPU machine)
#include <cstdio>
#include "kittens.cuh"
using namespace kittens;

template <int WGS, int N, int W>
__global__ void __launch_bounds__(WGS * 128) rate(long long *cycles, float *sink, int iters) {
    extern __shared__ alignment_dummy shm[];
    shared_allocator al(shm);
    using A = st<bf16, 64, 64>;
    using B = st<bf16, N, 64>;
    A &a = al.allocate<A>();
    B &b = al.allocate<B>();
    for (int i = threadIdx.x; i < B::num_elements; i += blockDim.x) b(i / 64, i % 64) = __float2bfloat16(0.001f * (i % 7));
    for (int i = threadIdx.x; i < A::num_elements; i += blockDim.x) a(i / 64, i % 64) = __float2bfloat16(0.001f * (i % 5));
    async_proxy_fence();
    __syncthreads();
    rt_fl<16, N> acc;
    long long t0 = clock64();
    warpgroup::mm_ABt(acc, a, b);
    for (int i = 1; i < iters; i++) {
        warpgroup::mma_ABt(acc, a, b, wgmma::chained);
        warpgroup::mma_async_wait<W>();
    }
    warpgroup::mma_async_wait<0>(acc);
    __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
    float s = 0;
    for (int t = 0; t < N / 16; t++) s += acc.tiles[0][t].data[0].x;
    if (s == 12345.f) sink[threadIdx.x] = s;
}

template <int WGS, int N, int W> void measure(long long *cycles, float *sink, int sms) {
    const int iters = 4096;
    const int smem = sizeof(st<bf16, 64, 64>) + sizeof(st<bf16, N, 64>) + 1024;
    cudaFuncSetAttribute(rate<WGS, N, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int rep = 0; rep < 3; rep++) rate<WGS, N, W><<<sms, WGS * 128, smem>>>(cycles, sink, iters);
    cudaDeviceSynchronize();
    long long host[1024];
    cudaMemcpy(host, cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
    double mean = 0;
    for (int i = 0; i < sms; i++) mean += host[i];
    mean /= sms;
    const double flop = double(WGS) * iters * 64.0 * N * 64 * 2;
    std::printf("warpgroups %d  m64n%d  wait<%d>: %.0f FLOP/clock/SM (%.1f%% of 4096)  %s\n", WGS, N, W, flop / mean,
                100 * flop / mean / 4096, cudaGetErrorString(cudaGetLastError()));
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    long long *cycles;
    float *sink;
    cudaMalloc(&cycles, 1024 * sizeof(long long));
    cudaMalloc(&sink, 1024 * sizeof(float));
    measure<1, 256, 0>(cycles, sink, sms);
    measure<1, 256, 1>(cycles, sink, sms);
    measure<2, 256, 1>(cycles, sink, sms);
    measure<1, 128, 1>(cycles, sink, sms);
    measure<2, 128, 1>(cycles, sink, sms);
    measure<1, 128, 0>(cycles, sink, sms);
    return 0;
}
