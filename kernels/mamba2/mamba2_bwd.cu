// The Mamba-2 backward's entry point (mamba2.h): the two walks for the problem's kernel variant, the forward's.
#include "mamba2_bwd_launch.cuh"

namespace tk_mamba2 {

cudaError_t backward(const bwd_problem &p, cudaStream_t stream) {
    const fwd_problem &f = p.f;
    if (f.batch <= 0 || f.heads <= 0) return cudaSuccess;
    if (f.len <= 0 || !supported_dim(f.head_dim) || !supported_dim(f.state_dim) || !p.workspace) return cudaErrorInvalidValue;
    return with_scan_variant(f.head_dim, f.state_dim, f.heads / f.groups,
                             [&]<int P, int N, scan_config CFG>() { return backward_for<P, N, CFG>(p, stream); });
}

} // namespace tk_mamba2
