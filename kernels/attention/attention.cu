// Dispatch of the attention forward on the head dimension.
#include "attention.h"

namespace tk_attention {

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    if (p.head_dim == 64) return forward_d64(p, stream);
    if (p.head_dim == 128) return forward_d128(p, stream);
    return cudaErrorInvalidValue;
}

} // namespace tk_attention
