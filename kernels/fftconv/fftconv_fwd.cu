// The FFT convolution's entry point (fftconv.h): the forward, for every built FFT size and both 16-bit types.
#include <algorithm>

#include "fftconv_launch.cuh"

namespace tk_fftconv {

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return cudaSuccess;
    if (p.fft != fft_size(p.len)) return cudaErrorInvalidValue;
    if (p.type == dtype::bf16) return forward_for<kittens::bf16>(p, stream);
    if (p.type == dtype::fp16) return forward_for<kittens::half>(p, stream);
    return cudaErrorInvalidValue;
}

} // namespace tk_fftconv
