// Host side of the Mamba-2 decoding step: the grid for the problem, and the kernel for its dtype, state dimension and
// state layout.
#pragma once

#include "mamba2_step_kernel.cuh"

#include <cstdint>

namespace tk_mamba2 {

template <typename T, step_config C, int N> cudaError_t launch_step(const step_problem &p, cudaStream_t stream) {
    using S = step_shape<C, N>;
    const dim3 grid(unsigned(p.batch) * unsigned(p.heads),
                    unsigned((p.head_dim + S::ROWS_PER_BLOCK - 1) / S::ROWS_PER_BLOCK));
    // Whole float4 rows at 16-byte addresses: the element stride is 1 and every other stride and the pointer keep
    // the alignment.
    const bool aligned = p.state_stride[3] == 1 && p.state_stride[2] % 4 == 0 && p.state_stride[1] % 4 == 0 &&
                         p.state_stride[0] % 4 == 0 && reinterpret_cast<uintptr_t>(p.state) % 16 == 0;
    if (aligned) {
        mamba2_step_kernel<T, S, true><<<grid, S::WARPS * 32, 0, stream>>>(p);
    } else {
        mamba2_step_kernel<T, S, false><<<grid, S::WARPS * 32, 0, stream>>>(p);
    }
    return cudaGetLastError();
}

template <typename T> cudaError_t step_for(const step_problem &p, cudaStream_t stream) {
    constexpr step_config C = configs::step();
    switch (p.state_dim) {
    case 16: return launch_step<T, C, 16>(p, stream);
    case 32: return launch_step<T, C, 32>(p, stream);
    case 64: return launch_step<T, C, 64>(p, stream);
    case 128: return launch_step<T, C, 128>(p, stream);
    case 256: return launch_step<T, C, 256>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace tk_mamba2
