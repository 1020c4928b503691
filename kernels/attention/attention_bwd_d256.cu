// Attention backward's main kernel for head dimension 256 (one file per head dimension, so that they compile in
// parallel).
#include "attention_bwd_launch.cuh"

namespace tk_attention {
template cudaError_t backward_for<256>(const bwd_problem &p, cudaStream_t stream);
} // namespace tk_attention
