// The Mamba-2 decoding step's entry point (mamba2.h).
#include "mamba2_step_launch.cuh"

namespace tk_mamba2 {

cudaError_t step(const step_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0 || p.head_dim <= 0) return cudaSuccess;
    if (!step_supported_state_dim(p.state_dim) || p.groups <= 0 || p.heads % p.groups) return cudaErrorInvalidValue;
    return p.type == dtype::bf16 ? step_for<__nv_bfloat16>(p, stream) : step_for<__half>(p, stream);
}

} // namespace tk_mamba2
