// The Mamba-2 forward's entry points (mamba2.h): the workspace it needs, and the scan for the problem's kernel variant.
#include "mamba2_fwd_launch.cuh"

namespace tk_mamba2 {

size_t workspace_bytes(const fwd_problem &p) {
    if (p.batch <= 0 || p.heads <= 0 || p.len <= 0) return 0;
    return workspace_layout(p).bytes;
}

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.batch <= 0 || p.heads <= 0) return cudaSuccess;
    if (p.len <= 0 || !supported_dim(p.head_dim) || !supported_dim(p.state_dim) || !p.workspace) return cudaErrorInvalidValue;
    return with_scan_variant(p.head_dim, p.state_dim, p.heads / p.groups,
                             [&]<int P, int N, scan_config CFG>() { return forward_for<P, N, CFG>(p, stream); });
}

} // namespace tk_mamba2
