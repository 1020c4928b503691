// Host side of the Based decoding step: its grid, and the kernel's instantiation for the state's alignment.
#pragma once

#include "based.h"
#include "based_step_kernel.cuh"

#include <cstdint>

namespace tk_based {

template <typename T> cudaError_t launch_step(const step_problem &p, cudaStream_t stream) {
    using step_kernel::based_step_kernel, step_kernel::GROUP_ROWS, step_kernel::MAX_WARPS;
    const int groups = p.value_dim / GROUP_ROWS;
    const int warps = groups < MAX_WARPS ? groups : MAX_WARPS; // at least 4: the token's loads need 32 threads
    // Every head's kv starts 16-byte aligned when the tensor does (value_dim x 273 floats is a multiple of 16 bytes).
    if (reinterpret_cast<uintptr_t>(p.kv) % 16 == 0) {
        based_step_kernel<T, true><<<p.batch * p.heads, warps * 32, 0, stream>>>(p);
    } else {
        based_step_kernel<T, false><<<p.batch * p.heads, warps * 32, 0, stream>>>(p);
    }
    return cudaGetLastError();
}

} // namespace tk_based
