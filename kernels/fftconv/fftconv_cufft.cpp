// The cuFFT path (fftconv_cufft.h): the torch.fft formulation's own work, in fp32 through ATen.
#include "fftconv_cufft.h"

#include <ATen/ATen.h>

namespace tk_fftconv {

namespace {

// x (times gate) in fp32.
at::Tensor gated_float(const at::Tensor &x, const at::Tensor &gate) {
    return gate.defined() ? x.to(at::kFloat).mul_(gate) : x.to(at::kFloat);
}

} // namespace

at::Tensor spectrum_by_cufft(const at::Tensor &k, int64_t fft) {
    return at::fft_rfft(k.to(at::kFloat), fft, -1).contiguous();
}

at::Tensor convolve_by_cufft(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                             const at::Tensor &k_f, int64_t fft) {
    at::Tensor spectrum = at::fft_rfft(gated_float(u, pregate), fft, -1);
    spectrum.mul_(k_f);
    at::Tensor out = at::fft_irfft(spectrum, fft, -1).narrow(-1, 0, u.size(2));
    spectrum.reset();
    if (postgate.defined()) out = out.mul_(postgate);
    at::Tensor y = at::empty(u.sizes(), u.options().memory_format(at::MemoryFormat::Contiguous));
    y.copy_(out);
    return y;
}

void backward_by_cufft(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                       const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask, int64_t fft,
                       gradients &out) {
    const int64_t n = u.size(2);
    // conj_physical rather than lazy conj() views: multiplied into another tensor, a view's conjugation was lost when
    // the op ran from a Python dispatch mode's handler, as on torch.compile's AOT path (a CPU test holds
    // tk_ops_testing's fftconv_bwd_by_cufft under such a mode to its eager result).
    const at::Tensor G = at::fft_rfft(gated_float(dy, postgate), fft, -1);
    if (mask[DU] || mask[DPREGATE]) {
        const at::Tensor dv = at::fft_irfft(G * at::conj_physical(k_f), fft, -1).narrow(-1, 0, n);
        if (mask[DU]) {
            if (pregate.defined()) at::mul_out(out.du, dv, pregate);
            else out.du.copy_(dv);
        }
        if (mask[DPREGATE]) at::mul_out(out.dpregate, dv, u);
    }
    if (mask[DPOSTGATE] || mask[DK]) {
        const at::Tensor V = at::fft_rfft(gated_float(u, pregate), fft, -1);
        if (mask[DPOSTGATE]) at::mul_out(out.dpostgate, at::fft_irfft(V * k_f, fft, -1).narrow(-1, 0, n), dy);
        if (mask[DK])
            out.dk.copy_(at::fft_irfft((G * at::conj_physical(V)).sum(0), fft, -1).narrow(-1, 0, out.dk.size(1)));
    }
}

} // namespace tk_fftconv
