// Host side of the FFT convolution forward: its grid for each built FFT size (launched from fftconv_fwd.cu).
#pragma once

#include <algorithm>
#include <atomic>

#include "fftconv.h"
#include "fftconv_fwd_kernel.cuh"

namespace tk_fftconv {

// The dynamic shared memory opt-in, once per device ordinal (< 64) the kernel runs on.
template <auto KERNEL> inline cudaError_t allow_shared(int dev, int bytes) {
    static std::atomic<uint64_t> configured{0};
    const uint64_t bit = dev < 64 ? (uint64_t(1) << dev) : 0;
    if (bit && (configured.load(std::memory_order_acquire) & bit)) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess) configured.fetch_or(bit, std::memory_order_release);
    return e;
}

// One block per SM (fewer when there are fewer pairs), each block's slots taking equal shares of the head-major
// pairs. (Null gates count as aligned.)
template <typename T, int L> cudaError_t launch_forward(const fwd_problem &p, cudaStream_t stream) {
    using K = fftconv_fwd<T, L>;
    int dev = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); e != cudaSuccess) return e;
    if (cudaError_t e = allow_shared<fftconv_fwd_kernel<K>>(dev, K::SHARED_BYTES); e != cudaSuccess) return e;
    const int64_t items = int64_t((p.batch + 1) / 2) * p.heads;
    const int blocks = int(std::min<int64_t>(sms, items));
    const auto word_aligned = [](const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 == 0; };
    const bool paired = p.len % 2 == 0 && word_aligned(p.u) && word_aligned(p.pregate) && word_aligned(p.postgate) &&
                        word_aligned(p.y);
    const auto piece_aligned = [](const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const bool staged = p.len % 8 == 0 && piece_aligned(p.u) && piece_aligned(p.pregate);
    const bool vectors = p.len % 8 == 0 && piece_aligned(p.y) && piece_aligned(p.postgate);
    typename K::globals g{static_cast<const T *>(p.u), static_cast<const T *>(p.pregate),
                          static_cast<const T *>(p.postgate), p.k_f, static_cast<T *>(p.y),
                          p.batch, p.heads, p.len, paired ? 1 : 0, staged ? 1 : 0, vectors ? 1 : 0};
    fftconv_fwd_kernel<K><<<blocks, K::THREADS, K::SHARED_BYTES, stream>>>(g);
    return cudaGetLastError();
}

template <typename T> cudaError_t forward_for(const fwd_problem &p, cudaStream_t stream) {
    switch (p.fft) {
    case 256: return launch_forward<T, 256>(p, stream);
    case 512: return launch_forward<T, 512>(p, stream);
    case 1024: return launch_forward<T, 1024>(p, stream);
    case 2048: return launch_forward<T, 2048>(p, stream);
    case 4096: return launch_forward<T, 4096>(p, stream);
    case 8192: return launch_forward<T, 8192>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace tk_fftconv
