// The forward convolution on the kernels, on tensors, as the forward op and the backward's composition run it (the
// arguments passed the ops' rules, in binding.cpp; the caller holds the device guard).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tk_fftconv {

// The filter's spectrum for sequences of length n (FFT size fft) on chip or on the block path, into k_f (complex64,
// dense): rfft(k, fft) as (heads, fft / 2 + 1), or the rfft at fft points of each block of BLOCK_LEN taps as
// (heads, blocks, fft / 2 + 1), in fp32, by the spectrum kernel (which reads k's taps where they are).
void spectrum_by_kernel(const at::Tensor &k, int64_t n, int fft, const at::Tensor &k_f);

// y = postgate * causal_conv(u * pregate, k) from the spectrum k_f (dense, in spectrum_by_kernel's layout), on chip
// or on the block path by u's length (not empty); gates may be undefined. `reversed`: every row read and written
// time-reversed (the backward's correlations).
at::Tensor convolve_by_kernels(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                               const at::Tensor &k_f, int fft, bool reversed);

} // namespace tk_fftconv
