// Dispatch of the attention forward and backward on the head dimension.
#include "attention.h"

namespace tk_attention {

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.head_dim == 64) return forward_d64(p, stream);
    if (p.head_dim == 128) return forward_d128(p, stream);
    return cudaErrorInvalidValue;
}

cudaError_t backward(const bwd_problem &p, cudaStream_t stream) {
    if (p.head_dim != 64 && p.head_dim != 128) return cudaErrorInvalidValue;
    if (cudaError_t e = backward_prepare(p, stream); e != cudaSuccess) return e;
    return p.head_dim == 64 ? backward_d64(p, stream) : backward_d128(p, stream);
}

} // namespace tk_attention
