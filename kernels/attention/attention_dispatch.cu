// The entry points forward and backward of attention.h: dispatch on the head dimension to the kernels instantiated
// in attention_fwd_d<D>.cu and attention_bwd_d<D>.cu.
#include "attention.h"

namespace tk_attention {

cudaError_t forward(const fwd_problem &p, cudaStream_t stream) {
    return with_head_dim(p.head_dim, [&](auto d) { return forward_for<decltype(d)::value>(p, stream); });
}

cudaError_t backward(const bwd_problem &p, cudaStream_t stream) {
    if (!supported_head_dim(p.head_dim)) return cudaErrorInvalidValue;
    if (cudaError_t e = backward_prepare(p, stream); e != cudaSuccess) return e;
    return with_head_dim(p.head_dim, [&](auto d) { return backward_for<decltype(d)::value>(p, stream); });
}

} // namespace tk_attention
