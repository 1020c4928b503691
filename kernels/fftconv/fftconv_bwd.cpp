// The backward on the kernels (fftconv_bwd.h): the forward convolution run again, and the filter-gradient kernels.
#include "fftconv_bwd.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "common/checks.h"
#include "fftconv.h"
#include "fftconv_convolve.h"

namespace tk_fftconv {

using tk_kernels::check_launch;
using tk_kernels::dtype_of;

gradients::gradients(const at::Tensor &u, const at::Tensor &k, const output_mask &mask) {
    const auto like = [&](bool wanted, const at::Tensor &t) {
        return wanted ? at::empty_symint(t.sym_sizes(), t.options().memory_format(at::MemoryFormat::Contiguous))
                      : at::empty_symint({c10::SymInt(0)}, u.options().dtype(at::kFloat));
    };
    du = like(mask[DU], u);
    dk = like(mask[DK], k);
    dpregate = like(mask[DPREGATE], u);
    dpostgate = like(mask[DPOSTGATE], u);
}

namespace {

// dk[h, m] = sum_b sum_n g[b, h, n] v[b, h, n - m] for m < taps (fp32) by the filter-gradient kernels: one transform
// per pair of rows on chip, the block path past it.
at::Tensor filter_gradient_by_kernels(const at::Tensor &u_in, const at::Tensor &pregate_in,
                                      const at::Tensor &postgate_in, const at::Tensor &dy_in, int64_t taps, int fft) {
    const at::Tensor u = u_in.contiguous(), dy = dy_in.contiguous();
    const at::Tensor pregate = pregate_in.defined() ? pregate_in.contiguous() : pregate_in;
    const at::Tensor postgate = postgate_in.defined() ? postgate_in.contiguous() : postgate_in;
    const auto pointer = [](const at::Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; };
    const dtype type = dtype_of(u.scalar_type());
    const int batch = int(u.size(0)), heads = int(u.size(1)), len = int(u.size(2));
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (path_of(len) == path::blocks) {
        at::Tensor dk = at::empty({heads, taps}, u.options().dtype(at::kFloat));
        const at::Tensor workspace = at::empty({int64_t(long_dk_workspace_bytes(batch, heads, len, int(taps)))},
                                               u.options().dtype(at::kByte));
        const long_dk_problem p{pointer(u), pointer(pregate), pointer(dy), pointer(postgate), dk.data_ptr<float>(),
                                workspace.data_ptr(), batch, heads, len, int(taps), type};
        check_launch(long_filter_gradient(p, stream), "tk_ops.fftconv filter-gradient kernels");
        return dk;
    }
    at::Tensor dk = at::zeros({heads, taps}, u.options().dtype(at::kFloat));
    const dk_problem p{pointer(u), pointer(pregate), pointer(dy), pointer(postgate), dk.data_ptr<float>(),
                       batch, heads, len, int(taps), fft, type};
    check_launch(filter_gradient(p, stream), "tk_ops.fftconv filter-gradient kernels");
    return dk;
}

} // namespace

void backward_by_kernels(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                         const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask, int fft,
                         gradients &out) {
    if (mask[DU] || mask[DPREGATE]) {
        // The forward forms its gated input flip(dy) * flip(postgate) = flip(g) itself.
        const at::Tensor dv = convolve_by_kernels(dy, postgate, at::Tensor(), k_f, fft, true);
        if (mask[DU]) {
            if (pregate.defined()) at::mul_out(out.du, dv, pregate);
            else out.du = dv;
        }
        if (mask[DPREGATE]) at::mul_out(out.dpregate, dv, u);
    }
    if (mask[DPOSTGATE]) out.dpostgate = convolve_by_kernels(u, pregate, dy, k_f, fft, false);
    if (mask[DK]) out.dk.copy_(filter_gradient_by_kernels(u, pregate, postgate, dy, out.dk.size(1), fft));
}

} // namespace tk_fftconv
