// The Based forward for each value dimension of based.h's VALUE_DIMS, and its dispatch.
#include "based_launch.cuh"

namespace tk_based {

template cudaError_t forward_for<64>(const fwd_problem &p, cudaStream_t stream);

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.len <= 0 || p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    switch (p.value_dim) {
    case 64: return forward_for<64>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace tk_based
