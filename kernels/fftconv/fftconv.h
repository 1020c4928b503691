// Host entry points of the FFT convolution kernels. Plain CUDA types only: the torch binding (binding.cpp) includes
// this, the kernels' translation unit (fftconv_fwd.cu) implements it.
//
// The filter's spectrum, as every interface of the family exchanges it: rfft(k, L) for the FFT size L = fft_size(N),
// complex64 (interleaved float2), (heads, L / 2 + 1), contiguous. When 2N is itself a supported power of two this is
// exactly tk_ops.reference.fftconv_spectrum(k, N).
#pragma once

#include <atomic>
#include <cstdint>
#include <cuda_runtime.h>

namespace tk_fftconv {

// Sequences of up to ONCHIP_LEN samples are convolved by one FFT of size fft_size(N) >= 2N (a power of two from
// MIN_FFT_SIZE to MAX_FFT_SIZE), whose circular convolution equals the causal linear one on the first N outputs.
// Longer ones, up to BLOCKS_LEN, are cut into at most MAX_BLOCKS blocks of BLOCK_LEN samples, each transformed at
// MAX_FFT_SIZE points (the block path, long_forward), and their spectra exchanged per block: (heads, filter blocks,
// MAX_FFT_SIZE / 2 + 1). Longer still, up to MAX_LEN, the binding convolves with cuFFT in fp32 at fft_size(N), the
// smallest power of two >= 2N: the block path's products grow as the square of the blocks (docs/fftconv.md).
inline constexpr int MIN_FFT_SIZE = 256;
inline constexpr int MAX_FFT_SIZE = 8192;
inline constexpr int ONCHIP_LEN = MAX_FFT_SIZE / 2;
inline constexpr int BLOCK_LEN = ONCHIP_LEN, BLOCK_FFT = MAX_FFT_SIZE;
inline constexpr int MAX_BLOCKS = 16;
inline constexpr int64_t BLOCKS_LEN = int64_t(MAX_BLOCKS) * BLOCK_LEN;
inline constexpr int MAX_LEN = 1 << 20;

// The smallest power of two >= 2n: an FFT size at which a correlation of two length-n rows has no wrapped terms.
constexpr int64_t correlation_size(int64_t n) {
    int64_t l = 1;
    while (l < 2 * n) l *= 2;
    return l;
}
// The FFT size for sequences of length n (n >= 1): the smallest built size >= 2n, BLOCK_FFT for the block path,
// correlation_size(n) past it, or 0 past MAX_LEN.
constexpr int fft_size(int64_t n) {
    if (n > MAX_LEN) return 0;
    if (n > BLOCKS_LEN) return int(correlation_size(n));
    if (n > ONCHIP_LEN) return BLOCK_FFT;
    int l = MIN_FFT_SIZE;
    while (l < 2 * n) l *= 2;
    return l;
}
constexpr int spectrum_len(int fft) { return fft / 2 + 1; }
// Blocks of BLOCK_LEN samples in n (the block path).
constexpr int64_t blocks_of(int64_t n) { return (n + BLOCK_LEN - 1) / BLOCK_LEN; }

enum class dtype { bf16, fp16, fp32 };

// The dynamic shared memory opt-in of a kernel, once per device ordinal (< 64) it runs on (the call costs host time).
template <auto KERNEL> inline cudaError_t allow_shared(int dev, int bytes) {
    static std::atomic<uint64_t> configured{0};
    const uint64_t bit = dev < 64 ? (uint64_t(1) << dev) : 0;
    if (bit && (configured.load(std::memory_order_acquire) & bit)) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess) configured.fetch_or(bit, std::memory_order_release);
    return e;
}

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
