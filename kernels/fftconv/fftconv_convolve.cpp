// The forward convolution on the kernels (fftconv_convolve.h): tensors made dense, outputs and workspaces allocated,
// the problem filled and launched.
#include "fftconv_convolve.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>

#include "common/checks.h"
#include "fftconv.h"

namespace tk_fftconv {

using tk_kernels::check_launch;
using tk_kernels::dtype_of;

namespace {

// The kernels read dense rows.
at::Tensor dense(const at::Tensor &t) { return t.defined() ? t.contiguous() : t; }
const void *pointer(const at::Tensor &t) { return t.defined() ? t.data_ptr() : nullptr; }

} // namespace

void spectrum_by_kernel(const at::Tensor &k, int64_t n, int fft, const at::Tensor &k_f) {
    const bool blocks = path_of(n) == path::blocks;
    const int64_t heads = k.size(0), taps = k.size(1);
    if (heads == 0) return;
    const spectrum_problem p{k.data_ptr(), k.stride(0), k.stride(1), dtype_of(k.scalar_type()),
                             reinterpret_cast<float2 *>(k_f.data_ptr()), int(heads), int(taps),
                             blocks ? int(blocks_of(taps)) : 1, blocks ? BLOCK_LEN : fft / 2, fft};
    check_launch(filter_spectrum(p, at::cuda::getCurrentCUDAStream()),
                 "tk_ops.fftconv: computing the filter's spectrum");
}

at::Tensor convolve_by_kernels(const at::Tensor &u_in, const at::Tensor &pregate_in, const at::Tensor &postgate_in,
                               const at::Tensor &k_f, int fft, bool reversed) {
    const at::Tensor u = dense(u_in), pregate = dense(pregate_in), postgate = dense(postgate_in);
    at::Tensor y = at::detail::empty_cuda(u.sizes(), u.scalar_type(), u.device(), std::nullopt);
    const int batch = int(u.size(0)), heads = int(u.size(1)), len = int(u.size(2));
    const dtype type = dtype_of(u.scalar_type());
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const auto *spectrum = reinterpret_cast<const float2 *>(k_f.data_ptr());
    if (path_of(len) == path::blocks) {
        const at::Tensor workspace =
            at::empty({int64_t(long_workspace_bytes(batch, heads, len))}, u.options().dtype(at::kByte));
        const long_problem p{pointer(u),           pointer(pregate), pointer(postgate), spectrum, y.data_ptr(),
                             workspace.data_ptr(), batch, heads, len, int(k_f.size(1)), type, reversed};
        check_launch(long_forward(p, stream), "tk_ops.fftconv block kernels");
        return y;
    }
    const fwd_problem p{pointer(u), pointer(pregate), pointer(postgate), spectrum, y.data_ptr(), batch, heads, len,
                        fft, type, reversed};
    check_launch(forward(p, stream), "tk_ops.fftconv kernel");
    return y;
}

} // namespace tk_fftconv
