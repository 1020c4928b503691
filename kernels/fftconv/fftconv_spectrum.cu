// The filter's spectrum entry point (fftconv.h, filter_spectrum), for the three float types of the taps.
#include "fftconv_spectrum_launch.cuh"

namespace tk_fftconv {

cudaError_t filter_spectrum(const spectrum_problem &p, cudaStream_t stream) {
    if (p.heads <= 0) return cudaSuccess;
    if (p.blocks < 1 || p.span < 1 || p.span > p.fft / 2 || p.taps < 1 || int64_t(p.blocks) * p.span < p.taps)
        return cudaErrorInvalidValue;
    if (p.type == dtype::fp32) return spectrum::launch<float>(p, stream);
    if (p.type == dtype::bf16) return spectrum::launch<__nv_bfloat16>(p, stream);
    return spectrum::launch<__half>(p, stream);
}

} // namespace tk_fftconv
