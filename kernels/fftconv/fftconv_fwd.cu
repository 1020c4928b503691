// The FFT convolution's forward entry points (fftconv.h): one transform per sequence for every built FFT size, and the
// block path of long sequences; both 16-bit types.
#include <algorithm>

#include "fftconv_fwd_launch.cuh"

namespace tk_fftconv {

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return cudaSuccess;
    if (p.fft != fft_size(p.len)) return cudaErrorInvalidValue;
    return for_each_size<forward_launch>(p, stream);
}

cudaError_t long_forward(const long_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    if (p.len <= ONCHIP_LEN || p.len > BLOCKS_LEN || p.kblocks < 1 || p.kblocks > blocks_of(p.len)) return cudaErrorInvalidValue;
    if (p.type == dtype::bf16) return p.reversed ? launch_long<kittens::bf16, true>(p, stream) : launch_long<kittens::bf16, false>(p, stream);
    if (p.type == dtype::fp16) return p.reversed ? launch_long<kittens::half, true>(p, stream) : launch_long<kittens::half, false>(p, stream);
    return cudaErrorInvalidValue;
}

} // namespace tk_fftconv
