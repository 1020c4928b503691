// Attention backward, head dimension 64: bf16 / fp16 x causal / not. (One file per head dimension so the two
// compile in parallel.)
#include "attn_bwd_launch.cuh"

namespace tk_attention {

cudaError_t backward_d64(const bwd_problem &p, cudaStream_t stream) {
    using kittens::bf16;
    using kittens::half;
    if (p.type == dtype::bf16)
        return p.causal ? launch_backward<attn_bwd<bf16, 64, true>>(p, stream) : launch_backward<attn_bwd<bf16, 64, false>>(p, stream);
    return p.causal ? launch_backward<attn_bwd<half, 64, true>>(p, stream) : launch_backward<attn_bwd<half, 64, false>>(p, stream);
}

} // namespace tk_attention
