// Host entry points of the FFT convolution kernels. Plain CUDA types only: the host code around the torch ops
// (fftconv_convolve.cpp, fftconv_bwd.cpp) includes this, the kernels' translation units (fftconv_fwd.cu, fftconv_dk.cu,
// fftconv_spectrum.cu) implement it. The lengths, FFT sizes and paths are fftconv_configs.cuh's.
//
// The filter's spectrum, as every interface of the family exchanges it: rfft(k, L) for the FFT size L = fft_size(N),
// complex64 (interleaved float2), (heads, L / 2 + 1), contiguous. When 2N is itself a supported power of two this is
// exactly tk_ops.reference.fftconv_spectrum(k, N).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"
#include "fftconv_configs.cuh"

namespace tk_fftconv {

using tk_kernels::dtype;

// The filter's spectrum: out[h, b] = rfft at fft points of the row of taps k[h, b * span + m], m < span (those below
// `taps`; the rest zero), in fp32, as complex (heads, blocks, fft / 2 + 1), contiguous. span <= fft / 2: one block of
// span = fft / 2 on chip, blocks_of(taps) blocks of span = BLOCK_LEN on the block path.
struct spectrum_problem {
    const void *k;                         // (heads, taps) with these element strides, fp32, bf16 or fp16
    int64_t row_stride, tap_stride;
    dtype type;
    float2 *out;
    int heads, taps, blocks, span, fft;
};
cudaError_t filter_spectrum(const spectrum_problem &p, cudaStream_t stream);

struct fwd_problem {
    const void *u;                   // (batch, heads, len) contiguous, bf16 or fp16
    const void *pregate, *postgate;  // u's shape and dtype, contiguous, or null
    const float2 *k_f;               // (heads, fft / 2 + 1): the layout above
    void *y;                         // (batch, heads, len) contiguous, u's dtype
    int batch, heads, len, fft;      // fft = fft_size(len)
    dtype type;                      // bf16 or fp16
    bool reversed;                   // every row read and written time-reversed (the backward's correlations)
};

// y = postgate * causal_conv(u * pregate, k) through the spectrum (the caller checked everything).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);

struct dk_problem {
    const void *u, *pregate, *dy, *postgate; // (batch, heads, len) contiguous, one 16-bit type; gates may be null
    float *dk;                               // (heads, taps) contiguous, zeroed by the caller; the gradient is added
    int batch, heads, len, taps, fft;        // taps <= len <= ONCHIP_LEN, fft = fft_size(len)
    dtype type;                              // bf16 or fp16
};

struct long_problem {
    const void *u, *pregate, *postgate; // (batch, heads, len) contiguous, one 16-bit type; gates may be null
    const float2 *k_f;                  // (heads, kblocks, BLOCK_FFT / 2 + 1): rfft of each filter block at BLOCK_FFT
    void *y;                            // (batch, heads, len) contiguous, u's type
    void *workspace;                    // long_workspace_bytes
    int batch, heads, len, kblocks;     // ONCHIP_LEN < len <= BLOCKS_LEN, 1 <= kblocks <= blocks_of(len)
    dtype type;                         // bf16 or fp16
    bool reversed;                      // as fwd_problem's
};
inline size_t long_workspace_bytes(int batch, int heads, int len) {
    return size_t((batch + 1) / 2) * heads * blocks_of(len) * BLOCK_FFT * 4; // 16-bit complex spectra of every block
}

// The block path of forward (the caller checked everything).
cudaError_t long_forward(const long_problem &p, cudaStream_t stream);

struct long_dk_problem {
    const void *u, *pregate, *dy, *postgate; // (batch, heads, len) contiguous, one 16-bit type; gates may be null
    float *dk;                               // (heads, taps) contiguous; every element written
    void *workspace;                         // long_dk_workspace_bytes
    int batch, heads, len, taps;             // ONCHIP_LEN < len <= BLOCKS_LEN, 1 <= taps <= len
    dtype type;                              // bf16 or fp16
};
inline size_t long_dk_workspace_bytes(int batch, int heads, int len, int taps) {
    return 2 * long_workspace_bytes(batch, heads, len) + size_t(heads) * (blocks_of(taps) + 1) * BLOCK_FFT * 8;
}

// filter_gradient's block path: the blocks' spectra of v and g, their correlation spectra per lag block summed over
// the batch, and those transformed back (the caller checked everything).
cudaError_t long_filter_gradient(const long_dk_problem &p, cudaStream_t stream);

// dk[h, m] += sum_b sum_n g[b, h, n] v[b, h, n - m] for m < taps, g = dy * postgate, v = u * pregate: the filter's
// gradient (the caller checked everything).
cudaError_t filter_gradient(const dk_problem &p, cudaStream_t stream);

} // namespace tk_fftconv
