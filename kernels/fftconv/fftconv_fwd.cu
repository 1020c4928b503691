// The FFT convolution's entry point (fftconv.h): the forward, for every built FFT size and both 16-bit types.
#include <algorithm>

#include "fftconv_launch.cuh"

namespace tk_fftconv {

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return cudaSuccess;
    if (p.fft != fft_size(p.len)) return cudaErrorInvalidValue;
    return for_each_size<forward_launch>(p, stream);
}

} // namespace tk_fftconv
