// The kernels' inputs made from an op's arguments (attention_inputs.h).
#include "attention_inputs.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>

#include <optional>

#include "attention.h"
#include "common/checks.h"

namespace tk_attention {

using tk_kernels::check_input;
using tk_kernels::check_launch;

at::Tensor with_positive_scale(const at::Tensor &q, double &scale) {
    if (scale > 0) return q;
    if (scale < 0) {
        scale = -scale;
        return q.neg();
    }
    scale = 1;
    return at::zeros_like(q, at::MemoryFormat::Contiguous);
}

namespace {

// The offsets where the kernels read them: host offsets copied to the GPU, which CUDA graph capture cannot record;
// GPU offsets as they are.
at::Tensor device_offsets(const at::Tensor &cu, const char *name, const at::Device &device, const char *op) {
    if (cu.is_cuda()) return cu.contiguous();
    check_input(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None, op, ": ", name,
                " is in host memory, which a CUDA graph cannot copy from during capture; pass it on the GPU");
    // Through pinned memory the copy is queued on the stream without waiting for the GPU's earlier work. A fresh
    // buffer (pin_memory() would return a pinned input itself): the caller may refill theirs once the call returns.
    at::Tensor staged = at::empty({cu.size(0)}, cu.options().pinned_memory(true));
    staged.copy_(cu);
    return staged.to(device, /*non_blocking=*/true);
}

} // namespace

at::Tensor document_layout(const at::Tensor &cu_q, const at::Tensor &cu_k, const at::Tensor &q, const at::Tensor &k,
                           int q_block_rows, int k_block_rows, const char *op) {
    const int docs = int(cu_q.size(0) - 1);
    const at::Tensor cu_qc = device_offsets(cu_q, "cu_seqlens_q", q.device(), op),
                     cu_kc = device_offsets(cu_k, "cu_seqlens_k", q.device(), op);
    const at::Tensor layout = at::detail::empty_cuda({varlen_layout_ints(docs)}, at::kInt, q.device(), std::nullopt);
    check_launch(prepare_varlen(cu_qc.data_ptr<int>(), cu_kc.data_ptr<int>(), docs, int(q.size(0)), int(k.size(0)),
                                q_block_rows, k_block_rows, layout.data_ptr<int>(), at::cuda::getCurrentCUDAStream()),
                 tk_kernels::message(op, " layout").c_str());
    return layout;
}

} // namespace tk_attention
