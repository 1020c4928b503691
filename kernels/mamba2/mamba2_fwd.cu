// The Mamba-2 forward for each (head_dim, state_dim, head pairs or not), and its dispatch.
#include "mamba2_launch.cuh"

namespace tk_mamba2 {

template cudaError_t forward_for<64, 64, false>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<64, 64, true>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<64, 128, false>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<64, 128, true>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<128, 64, false>(const fwd_problem &p, cudaStream_t stream);
template cudaError_t forward_for<128, 128, false>(const fwd_problem &p, cudaStream_t stream);

size_t workspace_bytes(const fwd_problem &p) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return 0;
    return workspace_layout(p).bytes;
}

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    if (p.len <= 0 || !supported_dim(p.head_dim) || !supported_dim(p.state_dim) || !p.workspace) return cudaErrorInvalidValue;
    if (p.head_dim == 128)
        return p.state_dim == 64 ? forward_for<128, 64, false>(p, stream) : forward_for<128, 128, false>(p, stream);
    if (use_head_pairs(p))
        return p.state_dim == 64 ? forward_for<64, 64, true>(p, stream) : forward_for<64, 128, true>(p, stream);
    return p.state_dim == 64 ? forward_for<64, 64, false>(p, stream) : forward_for<64, 128, false>(p, stream);
}

} // namespace tk_mamba2
