// Host side: a kernel that uses more than 48 KB of dynamic shared memory must opt in before its first launch. The
// opt-in is a driver call that costs host time, so it is made once per device ordinal (< 64) the kernel runs on.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace kittens {

template <auto KERNEL> inline cudaError_t opt_in_shared(int device, int bytes) {
    static std::atomic<uint64_t> configured{0}; // one bit per device ordinal
    const uint64_t bit = device < 64 ? (uint64_t(1) << device) : 0;
    if (bit && (configured.load(std::memory_order_acquire) & bit)) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess) configured.fetch_or(bit, std::memory_order_release);
    return e;
}

} // namespace kittens
