// The filter's taps laid out as the rows cuFFT transforms for the spectrum (fftconv.h, pad_taps): converted to fp32
// and zero-padded in one pass, so that rfft runs on rows of exactly its length and needs no padding of its own (a
// fill and a copy, each a full pass over the padded rows).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fftconv.h"

namespace tk_fftconv {
namespace {

__device__ inline float tap_value(float x) { return x; }
__device__ inline float tap_value(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float tap_value(__half x) { return __half2float(x); }

// One thread per four consecutive outputs of a row (fft is a multiple of 4): a single 16-byte store.
template <typename T> __global__ void pad_taps_kernel(const T *k, int64_t row_stride, int64_t tap_stride, float4 *out,
                                                      int64_t quads, int blocks, int span, int fft, int taps) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= quads) return;
    const int64_t row = i / (fft / 4); // (head, block)
    const int m0 = int(i % (fft / 4)) * 4, h = int(row / blocks), b = int(row % blocks);
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int m = m0 + e;
        const int64_t tap = int64_t(b) * span + m;
        v[e] = m < span && tap < taps ? tap_value(k[h * row_stride + tap * tap_stride]) : 0.f;
    }
    out[i] = make_float4(v[0], v[1], v[2], v[3]);
}

template <typename T> cudaError_t launch(const taps_problem &p, cudaStream_t stream) {
    const int64_t quads = int64_t(p.heads) * p.blocks * (p.fft / 4);
    constexpr int THREADS = 256;
    pad_taps_kernel<T><<<int((quads + THREADS - 1) / THREADS), THREADS, 0, stream>>>(
        static_cast<const T *>(p.k), p.row_stride, p.tap_stride, reinterpret_cast<float4 *>(p.out), quads, p.blocks,
        p.span, p.fft, p.taps);
    return cudaGetLastError();
}

} // namespace

cudaError_t pad_taps(const taps_problem &p, cudaStream_t stream) {
    if (p.heads <= 0) return cudaSuccess;
    if (p.fft % 4 != 0 || p.blocks < 1 || p.span < 1 || p.span > p.fft || p.taps < 1 ||
        int64_t(p.blocks) * p.span < p.taps || reinterpret_cast<uintptr_t>(p.out) % 16 != 0)
        return cudaErrorInvalidValue;
    if (p.type == dtype::fp32) return launch<float>(p, stream);
    if (p.type == dtype::bf16) return launch<__nv_bfloat16>(p, stream);
    return launch<__half>(p, stream);
}

} // namespace tk_fftconv
