// The FFT convolution's filter gradient (fftconv.h): on chip for every built FFT size, and the block path of long
// sequences; both 16-bit types.
#include "fftconv_dk_launch.cuh"

namespace tk_fftconv {

cudaError_t filter_gradient(const dk_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0 || p.taps <= 0) return cudaSuccess;
    if (p.fft != fft_size(p.len) || p.taps > p.len) return cudaErrorInvalidValue;
    return for_each_size<filter_gradient_launch>(p, stream);
}

cudaError_t long_filter_gradient(const long_dk_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.taps <= 0) return cudaSuccess;
    if (p.len <= ONCHIP_LEN || p.len > BLOCKS_LEN || p.taps > p.len) return cudaErrorInvalidValue;
    if (p.type == dtype::bf16) return launch_long_dk<kittens::bf16>(p, stream);
    if (p.type == dtype::fp16) return launch_long_dk<kittens::half>(p, stream);
    return cudaErrorInvalidValue;
}

} // namespace tk_fftconv
