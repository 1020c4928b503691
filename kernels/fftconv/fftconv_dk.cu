// The FFT convolution's filter gradient (fftconv.h), for every built FFT size and both 16-bit types.
#include "fftconv_launch.cuh"

namespace tk_fftconv {

cudaError_t filter_gradient(const dk_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0 || p.taps <= 0) return cudaSuccess;
    if (p.fft != fft_size(p.len) || p.taps > p.len) return cudaErrorInvalidValue;
    return for_each_size<filter_gradient_launch>(p, stream);
}

} // namespace tk_fftconv
