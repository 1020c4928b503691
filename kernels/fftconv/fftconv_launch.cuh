// Host side of the FFT convolution: the filter spectrum kernel, and the forward's grid (one block per head and slab
// of batch pairs) for each built FFT size (launched from fftconv_fwd.cu).
#pragma once

#include <algorithm>
#include <atomic>

#include "fftconv.h"
#include "fftconv_fwd_kernel.cuh"

namespace tk_fftconv {

// rfft(k_h, fft) for one head per block: k zero-padded to fft points, an in-place radix-2 FFT in fp32 over shared
// memory (bit-reversed load, log2(fft) butterfly passes), and the first fft / 2 + 1 frequencies written out. The
// filter is real, so the imaginary input is zero; this runs once per call on H rows, beside B H / 2 pair transforms
// in the forward, so its simplicity costs nothing measurable.
inline constexpr int SPECTRUM_THREADS = 512;

__device__ inline float filter_tap(const float *k, int i) { return k[i]; }
__device__ inline float filter_tap(const kittens::bf16 *k, int i) { return __bfloat162float(k[i]); }
__device__ inline float filter_tap(const kittens::half *k, int i) { return __half2float(k[i]); }

template <typename KT>
__global__ __launch_bounds__(SPECTRUM_THREADS) void spectrum_kernel(const KT *k, int taps, int fft, int log2_fft,
                                                                    float2 *k_f) {
    extern __shared__ float2 buf[];
    const KT *row = k + size_t(blockIdx.x) * taps;
    for (int n = threadIdx.x; n < fft; n += blockDim.x)
        buf[__brev(unsigned(n)) >> (32 - log2_fft)] = make_float2(n < taps ? filter_tap(row, n) : 0.f, 0.f);
    __syncthreads();
    for (int half = 1; half < fft; half *= 2) {
        for (int t = threadIdx.x; t < fft / 2; t += blockDim.x) {
            const int pos = t & (half - 1), i = 2 * (t - pos) + pos, j = i + half;
            float s, c;
            sincospif(-float(pos) / float(half), &s, &c); // e^(-2 pi i pos / (2 half))
            const float2 a = buf[i], b = buf[j];
            const float2 bw = make_float2(b.x * c - b.y * s, b.x * s + b.y * c);
            buf[i] = make_float2(a.x + bw.x, a.y + bw.y);
            buf[j] = make_float2(a.x - bw.x, a.y - bw.y);
        }
        __syncthreads();
    }
    float2 *out = k_f + size_t(blockIdx.x) * spectrum_len(fft);
    for (int j = threadIdx.x; j <= fft / 2; j += blockDim.x) out[j] = buf[j];
}

// The dynamic shared memory opt-in, once per device ordinal (< 64) the kernel runs on.
template <auto KERNEL> inline cudaError_t allow_shared(int dev, int bytes) {
    static std::atomic<uint64_t> configured{0};
    const uint64_t bit = dev < 64 ? (uint64_t(1) << dev) : 0;
    if (bit && (configured.load(std::memory_order_acquire) & bit)) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess) configured.fetch_or(bit, std::memory_order_release);
    return e;
}

template <typename KT> cudaError_t launch_spectrum(const spectrum_problem &p, cudaStream_t stream) {
    int dev = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    const int bytes = MAX_FFT_SIZE * int(sizeof(float2));
    if (cudaError_t e = allow_shared<spectrum_kernel<KT>>(dev, bytes); e != cudaSuccess) return e;
    int log2_fft = 0;
    while ((1 << log2_fft) < p.fft) log2_fft++;
    spectrum_kernel<KT><<<p.heads, SPECTRUM_THREADS, p.fft * sizeof(float2), stream>>>(
        static_cast<const KT *>(p.k), p.taps, p.fft, log2_fft, p.k_f);
    return cudaGetLastError();
}

// Blocks: every head, and each head's batch pairs cut into slabs when there are too few heads to give every SM two
// blocks; a block reuses its DFT matrices and its head's spectrum over the pairs of its slab. (Null gates count as
// aligned.)
template <typename T, int L> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using K = fftconv_fwd<T, L>;
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    if (cudaError_t e = allow_shared<fftconv_fwd_kernel<K>>(dev, K::SHARED_BYTES); e != cudaSuccess) return e;
    const int pairs = (p.batch + 1) / 2;
    const int wanted_slabs = (2 * sms + p.heads - 1) / p.heads;
    const int per_block = (pairs + std::min(pairs, wanted_slabs) - 1) / std::min(pairs, wanted_slabs);
    const int slabs = (pairs + per_block - 1) / per_block;
    const auto word_aligned = [](const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 == 0; };
    const bool paired = p.len % 2 == 0 && word_aligned(p.u) && word_aligned(p.pregate) && word_aligned(p.postgate) &&
                        word_aligned(p.y);
    const auto piece_aligned = [](const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const bool staged = p.len % 8 == 0 && piece_aligned(p.u) && piece_aligned(p.pregate);
    typename K::globals g{static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                          static_cast<const T *>(p.postgate), p.k_f, static_cast<T *>(p.y),
                          p.batch, p.heads, p.len, per_block, slabs, paired ? 1 : 0, staged ? 1 : 0};
    fftconv_fwd_kernel<K><<<p.heads * slabs, K::THREADS, K::SHARED_BYTES, stream>>>(g);
    return cudaGetLastError();
}

template <typename T> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream) {
    switch (p.fft) {
    case 256: return launch_forward<T, 256>(p, stream);
    case 512: return launch_forward<T, 512>(p, stream);
    case 1024: return launch_forward<T, 1024>(p, stream);
    case 2048: return launch_forward<T, 2048>(p, stream);
    case 4096: return launch_forward<T, 4096>(p, stream);
    case 8192: return launch_forward<T, 8192>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace tk_fftconv
