// Attention forward for head dimension 96 (one file per head dimension, so that they compile in parallel).
#include "attention_fwd_launch.cuh"

namespace tk_attention {
template cudaError_t forward_for<96>(const fwd_problem &p, cudaStream_t stream);
} // namespace tk_attention
