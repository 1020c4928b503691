// The Based forward for each value dimension of based.h's VALUE_DIMS, and its dispatch.
#include "based_launch.cuh"

namespace tk_based {

template cudaError_t forward_for<16>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<32>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<48>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<64>(const fwd_problem &p, cudaStream_t stream);

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.len <= 0 || p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    return with_value_dim(p.value_dim, [&](auto d) { return forward_for<decltype(d)::value>(p, stream); });
}

} // namespace tk_based
