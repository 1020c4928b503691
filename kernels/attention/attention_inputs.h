// What the attention kernels read, made on the host from an op's arguments once its rules have passed (binding.cpp's
// CUDA kernels call these): the queries for a positive softmax scale, and the packed documents' layout on the GPU.
#pragma once

#include <ATen/core/Tensor.h>

namespace tk_attention {

// The kernels take row maxima of the raw scores and fold the scale into each exponent, which needs scale > 0. The
// same softmax for other scales: scale * (q.k) == (-scale) * ((-q).k), and a zero scale scores every key 0, as zero
// queries at scale 1 do. Returns the queries to use and makes `scale` positive.
at::Tensor with_positive_scale(const at::Tensor &q, double &scale);

// The documents' layout on q's device (attention.h's varlen_layout) for blocks of the given query rows and keys, from
// the offsets on q's GPU or in host memory (checked by the op's rules there). `op` names the op in errors.
at::Tensor document_layout(const at::Tensor &cu_q, const at::Tensor &cu_k, const at::Tensor &q, const at::Tensor &k,
                           int q_block_rows, int k_block_rows, const char *op);

} // namespace tk_attention
