// Host side of the filter's spectrum kernel (fftconv_spectrum_kernel.cuh): the grid, the shared-memory opt-in and the
// dispatch by FFT size (launched from fftconv_spectrum.cu).
#pragma once

#include "common/shared_opt_in.cuh"
#include "fftconv_spectrum_kernel.cuh"

namespace tk_fftconv::spectrum {

constexpr int SHARED_BYTES = 2 * POINTS * int(sizeof(float2));

template <int M, typename T> cudaError_t launch_size(const spectrum_problem &p, cudaStream_t stream) {
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    if (cudaError_t e = kittens::opt_in_shared<spectrum_kernel<M, T>>(dev, SHARED_BYTES); e != cudaSuccess) return e;
    const int64_t rounds = (int64_t(p.heads) * p.blocks + POINTS / M - 1) / (POINTS / M);
    const int64_t resident = int64_t(SPECTRUM.blocks_per_sm) * sms;
    const int grid = int(rounds < resident ? rounds : resident);
    spectrum_kernel<M, T><<<grid, THREADS, SHARED_BYTES, stream>>>(p);
    return cudaGetLastError();
}

// M = fft / 2 complex points per row, for every built FFT size.
template <typename T> cudaError_t launch(const spectrum_problem &p, cudaStream_t stream) {
    switch (p.fft) {
    case 256: return launch_size<128, T>(p, stream);
    case 512: return launch_size<256, T>(p, stream);
    case 1024: return launch_size<512, T>(p, stream);
    case 2048: return launch_size<1024, T>(p, stream);
    case 4096: return launch_size<2048, T>(p, stream);
    case 8192: return launch_size<4096, T>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace tk_fftconv::spectrum
