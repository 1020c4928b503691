// The FFT convolution's entry points (fftconv.h): the filter spectrum and the forward, for every built FFT size and
// both 16-bit types.
#include <algorithm>

#include "fftconv_launch.cuh"

namespace tk_fftconv {

cudaError_t spectrum(const spectrum_problem &p, cudaStream_t stream) {
    if (p.heads <= 0) return cudaSuccess;
    if (p.fft < MIN_FFT_SIZE || p.fft > MAX_FFT_SIZE || (p.fft & (p.fft - 1)) || p.taps < 1 || p.taps > p.fft)
        return cudaErrorInvalidValue;
    switch (p.k_type) {
    case dtype::fp32: return launch_spectrum<float>(p, stream);
    case dtype::bf16: return launch_spectrum<kittens::bf16>(p, stream);
    default: return launch_spectrum<kittens::half>(p, stream);
    }
}

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return cudaSuccess;
    if (p.fft != fft_size(p.len)) return cudaErrorInvalidValue;
    if (p.type == dtype::bf16) return forward_for<kittens::bf16>(p, stream);
    if (p.type == dtype::fp16) return forward_for<kittens::half>(p, stream);
    return cudaErrorInvalidValue;
}

} // namespace tk_fftconv
