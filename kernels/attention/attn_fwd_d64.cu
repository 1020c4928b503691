// Attention forward, head dimension 64: bf16 / fp16 x causal / not. (One file per head dimension so the two
// compile in parallel.)
#include "attn_fwd_launch.cuh"

namespace tk_attention {

namespace {
template <typename T> cudaError_t forward_d64_typed(const fwd_problem &p, cudaStream_t stream) {
    if (!p.causal) return launch_forward<attn_fwd<T, 64, false>>(p, stream);
    if (narrow_causal_tails(p)) return launch_forward<attn_fwd<T, 64, true, true>>(p, stream);
    return launch_forward<attn_fwd<T, 64, true>>(p, stream);
}
} // namespace

cudaError_t forward_d64(const fwd_problem &p, cudaStream_t stream) {
    return p.type == dtype::bf16 ? forward_d64_typed<kittens::bf16>(p, stream) : forward_d64_typed<kittens::half>(p, stream);
}

} // namespace tk_attention
