// The FFT convolution's backward on the kernels (docs/fftconv.md, "Backward"): with g = dy * postgate and
// v = u * pregate,
//
//   dv[n]  = sum_m k[m] g[n + m]   a correlation: the forward kernels on the time-reversed g, reversed back (they
//                                  read and write the rows backwards)
//   du     = dv * pregate,  dpregate = dv * u
//   dpostgate = dy * causal_conv(v, k)   the forward kernel with dy as its postgate
//   dk[m]  = sum_b sum_n g[n] v[n - m]   the filter-gradient kernels
//
// and the gradients' outputs, which the backward op's CUDA and Meta kernels (binding.cpp) and the cuFFT path
// (fftconv_cufft.h) share.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <tuple>

namespace tk_fftconv {

// Which gradients fftconv_bwd computes, and the order of its results: those of u, k, pregate and postgate.
using output_mask = std::array<bool, 4>;
inline constexpr int DU = 0, DK = 1, DPREGATE = 2, DPOSTGATE = 3;

using grads_tuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Dense row-major gradients shaped like their inputs where asked for, (0,) float32 elsewhere (a schema's outputs are
// tensors): the same on every device, so that torch.compile's fake tensors have the strides the CUDA kernel returns.
struct gradients {
    at::Tensor du, dk, dpregate, dpostgate;

    gradients(const at::Tensor &u, const at::Tensor &k, const output_mask &mask);
    grads_tuple tuple() const { return {du, dk, dpregate, dpostgate}; }
};

// The gradients that `out` holds where `mask` asks for them, by the kernels (sequences on chip or on the block path;
// the arguments passed the rules, u is not empty): k_f is the filter's dense spectrum where u, pregate or postgate get
// a gradient, fft the FFT size of u's length.
void backward_by_kernels(const at::Tensor &u, const at::Tensor &pregate, const at::Tensor &postgate,
                         const at::Tensor &k_f, const at::Tensor &dy, const output_mask &mask, int fft,
                         gradients &out);

} // namespace tk_fftconv
