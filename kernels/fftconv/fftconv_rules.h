// The forward op's argument rules (defined in binding.cpp), for the autograd formula (autograd.cpp), which checks them
// before it computes the filter's spectrum: a bad argument is then reported in the forward op's words.
#pragma once

#include <ATen/core/Tensor.h>

namespace tk_fftconv {

// fftconv_fwd's rules (undefined tensors stand for absent arguments); returns the FFT size.
int fwd_rules(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate, const at::Tensor &postgate,
              const at::Tensor &k_f);

} // namespace tk_fftconv
