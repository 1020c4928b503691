// The Mamba-2 scan's tensors as its kernels take them, and the forward run on them (mamba2_operands.h).
#include "mamba2_operands.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>

#include <cstdint>

#include "common/bhnd_tensors.h"
#include "common/checks.h"

namespace tk_mamba2 {
namespace {

at::Tensor given(const std::optional<at::Tensor> &t) { return t.value_or(at::Tensor()); }

template <typename P> const P *ptr_or_null(const at::Tensor &t) { return t.defined() ? t.data_ptr<P>() : nullptr; }

} // namespace

at::Tensor heads_view(const at::Tensor &t) {
    if (!t.defined()) return t;
    return tk_kernels::tma_readable_copy(t.transpose(1, 2));
}

at::Tensor dense(const at::Tensor &t) {
    if (!t.defined() || (t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0)) return t;
    return t.clone(at::MemoryFormat::Contiguous);
}

scan_args::scan_args(const at::Tensor &x, const at::Tensor &dt, const at::Tensor &A, const at::Tensor &B,
                     const at::Tensor &C, const std::optional<at::Tensor> &D, const std::optional<at::Tensor> &z,
                     const std::optional<at::Tensor> &dt_bias, const std::optional<at::Tensor> &initial_states,
                     const std::optional<at::Tensor> &seq_idx)
    : x(x), dt(dt), A(A), B(B), C(C), D(given(D)), z(given(z)), dt_bias(given(dt_bias)),
      initial_states(given(initial_states)), seq_idx(given(seq_idx)) {}

scan_operands::scan_operands(const scan_args &a, bool with_gate)
    : x(heads_view(a.x)), z(with_gate ? heads_view(a.z) : at::Tensor()), B(heads_view(a.B)), C(heads_view(a.C)),
      dt(dense(a.dt)), A(dense(a.A)), D(dense(a.D)), bias(dense(a.dt_bias)), init(dense(a.initial_states)),
      seq(dense(a.seq_idx)) {}

fwd_problem scan_operands::problem(bool dt_softplus, double dt_min, double dt_max) const {
    fwd_problem p{};
    p.x = tk_kernels::view_of(x);
    p.B = tk_kernels::view_of(B);
    p.C = tk_kernels::view_of(C);
    if (z.defined()) p.z = tk_kernels::view_of(z);
    p.dt = dt.data_ptr<float>();
    p.A = A.data_ptr<float>();
    p.D = ptr_or_null<float>(D);
    p.D_per_channel = D.defined() && D.dim() == 2;
    p.dt_bias = ptr_or_null<float>(bias);
    p.dt_softplus = dt_softplus;
    p.dt_min = float(dt_min);
    p.dt_max = float(dt_max);
    p.initial_states = ptr_or_null<float>(init);
    p.seq_idx = ptr_or_null<int>(seq);
    p.batch = int(x.size(0));
    p.heads = int(x.size(1));
    p.len = int(x.size(2));
    p.head_dim = int(x.size(3));
    p.groups = int(B.size(1));
    p.state_dim = int(B.size(3));
    p.type = tk_kernels::dtype_of(x.scalar_type());
    return p;
}

cudaError_t run_forward(const scan_operands &in, at::Tensor &out, const at::Tensor &final_states, bool dt_softplus,
                        double dt_min, double dt_max) {
    at::Tensor out_view = out.transpose(1, 2);
    fwd_problem p = in.problem(dt_softplus, dt_min, dt_max);
    p.out = tk_kernels::out_of(out_view);
    p.final_states = final_states.defined() ? final_states.data_ptr<float>() : nullptr;
    at::Tensor workspace =
        at::detail::empty_cuda({int64_t(workspace_bytes(p))}, at::kByte, out.device(), std::nullopt);
    p.workspace = workspace.data_ptr();
    return forward(p, at::cuda::getCurrentCUDAStream());
}

} // namespace tk_mamba2
