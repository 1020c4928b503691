// The Based decoding step's entry point (based_step_launch.cuh).
#include "based.h"
#include "based_step_launch.cuh"

namespace tk_based {

cudaError_t step(const step_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    if (!supported_value_dim(p.value_dim)) return cudaErrorInvalidValue;
    return p.type == dtype::bf16 ? launch_step<__nv_bfloat16>(p, stream) : launch_step<__half>(p, stream);
}

} // namespace tk_based
