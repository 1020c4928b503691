// What the forward's binding (binding.cpp) shares with the backward's (bwd_binding.cpp): the forward op's argument
// rules and its CUDA kernels. The backward is built from forward convolutions (docs/fftconv.md, "Backward"), which its
// CUDA kernel calls directly rather than through the dispatcher.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace tk_fftconv_binding {

inline constexpr const char *FFTCONV = "tk_ops.fftconv";

using opt_tensor = std::optional<at::Tensor>;

// The filter k's rules: (H, Nk) with 1 <= Nk <= n, float32 (bfloat16 and float16 accepted); `heads` is u's H when known.
void filter_rules(const char *op, const at::Tensor &k, const c10::SymInt *heads, const c10::SymInt &n);

// fftconv_fwd's rules (undefined tensors stand for absent arguments); returns the FFT size.
int fwd_rules(const at::Tensor &u, const at::Tensor &k, const at::Tensor &pregate, const at::Tensor &postgate,
              const at::Tensor &k_f);

// The CUDA kernels of fftconv_fwd (y = postgate * causal_conv(u * pregate, k), from k or its spectrum k_f) and of
// fftconv_spectrum (rfft(k, L) for sequences of length n); both check their arguments first.
at::Tensor fwd_cuda(const at::Tensor &u, const opt_tensor &k, const opt_tensor &pregate, const opt_tensor &postgate,
                    const opt_tensor &k_f);
at::Tensor spectrum_cuda(const at::Tensor &k, int64_t n);
// flip(conv(flip(u), pregate = flip(pregate), k_f)) along the rows, without the reversed copies: the kernels read and
// write the rows backwards (u on the GPU, checked by fftconv_fwd's rules).
at::Tensor reversed_conv_cuda(const at::Tensor &u, const opt_tensor &pregate, const at::Tensor &k_f);

} // namespace tk_fftconv_binding
