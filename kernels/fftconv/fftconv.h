// Host entry points of the FFT convolution kernels. Plain CUDA types only: the torch binding (binding.cpp) includes
// this, the kernels' translation unit (fftconv_fwd.cu) implements it.
//
// The filter's spectrum, as every interface of the family exchanges it: rfft(k, L) for the FFT size L = fft_size(N),
// complex64 (interleaved float2), (heads, L / 2 + 1), contiguous. When 2N is itself a supported power of two this is
// exactly tk_ops.reference.fftconv_spectrum(k, N).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace tk_fftconv {

// The FFT sizes built: powers of two from MIN_FFT_SIZE to MAX_FFT_SIZE. A sequence of length N is convolved
// circularly at L = fft_size(N) >= 2N, which leaves its first N outputs equal to the causal linear convolution.
inline constexpr int MIN_FFT_SIZE = 256;
inline constexpr int MAX_FFT_SIZE = 8192;
inline constexpr int MAX_LEN = MAX_FFT_SIZE / 2;

// The smallest built FFT size >= 2n (n >= 1), or 0 past MAX_LEN.
constexpr int fft_size(int64_t n) {
    if (n > MAX_LEN) return 0;
    int l = MIN_FFT_SIZE;
    while (l < 2 * n) l *= 2;
    return l;
}
constexpr int spectrum_len(int fft) { return fft / 2 + 1; }

enum class dtype { bf16, fp16, fp32 };

struct fwd_problem {
    const void *u;                   // (batch, heads, len) contiguous, bf16 or fp16
    const void *pregate, *postgate;  // u's shape and dtype, contiguous, or null
    const float2 *k_f;               // (heads, fft / 2 + 1): the layout above
    void *y;                         // (batch, heads, len) contiguous, u's dtype
    int batch, heads, len, fft;      // fft = fft_size(len)
    dtype type;                      // bf16 or fp16
};

// y = postgate * causal_conv(u * pregate, k) through the spectrum (the caller checked everything).
cudaError_t forward(const fwd_problem &p, cudaStream_t stream);

struct dk_problem {
    const void *u, *pregate, *dy, *postgate; // (batch, heads, len) contiguous, one 16-bit type; gates may be null
    float *dk;                               // (heads, taps) contiguous, zeroed by the caller; the gradient is added
    int batch, heads, len, taps, fft;        // taps <= len, fft = fft_size(len)
    dtype type;                              // bf16 or fp16
};

// dk[h, m] += sum_b sum_n g[b, h, n] v[b, h, n - m] for m < taps, g = dy * postgate, v = u * pregate: the filter's
// gradient (the caller checked everything).
cudaError_t filter_gradient(const dk_problem &p, cudaStream_t stream);

} // namespace tk_fftconv
