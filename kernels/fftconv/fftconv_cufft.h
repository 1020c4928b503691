// Past the block path (N > BLOCKS_LEN, fftconv_configs.cuh): the spectrum, the convolution and its gradients by cuFFT
// in fp32 through ATen, at the FFT size fft = correlation_size(N) (docs/fftconv.md, "Past 65536: cuFFT"). Plain ATen,
// so they run on any device (tk_ops_testing's fftconv_bwd_by_cufft runs the gradients on CPU tensors). The arguments
// passed the ops' rules (binding.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "fftconv_bwd.h"

namespace tk_fftconv {

// rfft(k, fft) in fp32: (heads, fft / 2 + 1).
at::Tensor spectrum_by_cufft(const at::Tensor &k, int64_t fft);

// y = postgate * causal_conv(u * pregate, k) from k_f = rfft(k, fft), fft >= 2N; gates may be undefined. y is dense,
// in u's dtype.
at::Tensor convolve_by_cufft(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                             const at::Tensor &k_f, int64_t fft);

// The gradients that `out` holds where `mask` asks for them, from g's spectrum computed once for both dv and dk:
// dv = irfft(G conj K)[:N] (a correlation; at fft >= 2N nothing wraps), dpostgate = dy * irfft(V K)[:N],
// dk = irfft(sum_b G conj V)[:taps]. k_f = rfft(k, fft) where u, pregate or postgate get a gradient; u not empty.
void backward_by_cufft(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                       const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask, int64_t fft,
                       gradients &out);

} // namespace tk_fftconv
