// The Mamba-2 backward for each (head_dim, state_dim, head pairs or not), and its dispatch (the forward's).
#include "mamba2_bwd_launch.cuh"

namespace tk_mamba2 {

template cudaError_t backward_dims<64, 64, false>(const bwd_problem &p, cudaStream_t stream);
template cudaError_t backward_dims<64, 64, true>(const bwd_problem &p, cudaStream_t stream);
template cudaError_t backward_dims<64, 128, false>(const bwd_problem &p, cudaStream_t stream);
template cudaError_t backward_dims<64, 128, true>(const bwd_problem &p, cudaStream_t stream);
template cudaError_t backward_dims<128, 64, false>(const bwd_problem &p, cudaStream_t stream);
template cudaError_t backward_dims<128, 128, false>(const bwd_problem &p, cudaStream_t stream);

cudaError_t backward(const bwd_problem &p, cudaStream_t stream) {
    const fwd_problem &f = p.f;
    if (f.batch <= 0 || f.heads <= 0) return cudaSuccess;
    if (f.len <= 0 || !supported_dim(f.head_dim) || !supported_dim(f.state_dim) || !p.workspace) return cudaErrorInvalidValue;
    if (f.head_dim == 128)
        return f.state_dim == 64 ? backward_dims<128, 64, false>(p, stream) : backward_dims<128, 128, false>(p, stream);
    if (use_head_pairs(f))
        return f.state_dim == 64 ? backward_dims<64, 64, true>(p, stream) : backward_dims<64, 128, true>(p, stream);
    return f.state_dim == 64 ? backward_dims<64, 64, false>(p, stream) : backward_dims<64, 128, false>(p, stream);
}

} // namespace tk_mamba2
