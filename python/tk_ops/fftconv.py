"""FFT convolution (the long causal convolution of Hyena / H3-style models) on Hopper tensor cores.

``fftconv(u, k, pregate=None, postgate=None, k_f=None)``: u (B, H, N) bfloat16 or float16; k (H, Nk) float32
(bfloat16 and float16 accepted) with 1 <= Nk <= N, one filter per channel; the gates (B, H, N) in u's dtype, either
may be None. Returns y (B, H, N) in u's dtype::

    v = u * pregate
    y[b, h, n] = postgate[b, h, n] * sum_{m <= n, m < Nk} k[h, m] v[b, h, n - m]

which without gates is irfft(rfft(u, 2N) * rfft(k, 2N))[..., :N]. ``tk_ops.reference.fftconv`` is the float64
reference; docs/fftconv.md describes the kernels. N may be 1 .. 2^20: up to 4096 each sequence is one FFT of size L
(the smallest of 256, 512, ..., 8192 that is at least 2N); up to 65536 they are cut into blocks of 4096 samples, each
transformed at 8192 points, and combined in frequency (the block path); past that the block path's products (which
grow as the square of the blocks) would cost more than cuFFT, so the op convolves with cuFFT in float32 at L = the
smallest power of two >= 2N, as the torch.fft formulation does.

``fftconv_spectrum(k, N)`` is the filter's spectrum as the op reads it: rfft(k, L), complex64 (H, L / 2 + 1), for
N <= 4096 and N > 65536, which for L = 2N (N a power of two from 128) equals
``tk_ops.reference.fftconv_spectrum(k, N)``; on the block path, rfft of each block of 4096 taps at 8192 points,
(H, ceil(Nk / 4096), 4097). Passing it as ``k_f=`` (with k None) skips the spectrum computation, for inference with
a fixed filter.

The ops are ``torch.ops.tk_ops.fftconv_fwd(u, k, pregate, postgate, k_f)``,
``torch.ops.tk_ops.fftconv_spectrum(k, n)`` and the backward ``torch.ops.tk_ops.fftconv_bwd(u, k, pregate, postgate,
k_f, dy, output_mask) -> (du, dk, dpregate, dpostgate)`` (kernels/fftconv/binding.cpp, which holds every argument
rule).

Gradients flow to u, k (in k's dtype) and the gates through ``torch.ops.tk_ops.fftconv_bwd`` (registered as the
op's autograd formula in C++, kernels/fftconv/autograd.cpp; torch.compile and CUDA graphs take it like any op): those
of u and the gates run the forward kernel again (on the time-reversed output gradient for u and pregate), the
filter's runs kernels of its own on the same transforms (fp32 sums over the batch); past N = 65536 all of them come
from cuFFT, as the forward does there. The cached spectrum is for inference and gets no gradient: a ``k_f``
that requires one is refused, as is ``fftconv_spectrum`` of a filter that requires one (pass k itself to train it);
with a ``k_f`` that needs none, u and the gates still get their gradients.
"""
from __future__ import annotations

import torch

from . import _ext
from .errors import InputError

__all__ = ["fftconv", "fftconv_spectrum"]


def fftconv(u: torch.Tensor, k: torch.Tensor | None, pregate: torch.Tensor | None = None,
            postgate: torch.Tensor | None = None, k_f: torch.Tensor | None = None) -> torch.Tensor:
    """y = postgate * causal_conv(u * pregate, k), differentiable in u, k and the gates (module docstring). Pass k,
    or k = None and its spectrum ``k_f = fftconv_spectrum(k, N)``."""
    return _ext.call("fftconv", "fftconv_fwd", "tk_ops.fftconv", u, k, pregate, postgate, k_f)


def fftconv_spectrum(k: torch.Tensor, N: int) -> torch.Tensor:
    """The spectrum of the filters k (H, Nk) for sequences of length N, as ``fftconv(..., k_f=)`` takes it: complex64
    rfft(k, L) (H, L / 2 + 1), L the FFT size of length N, or per filter block for 4096 < N <= 65536 (module docstring)."""
    if isinstance(N, bool) or not isinstance(N, int):
        raise InputError(f"tk_ops.fftconv_spectrum: N must be an int, got {type(N).__name__}")
    return _ext.call("fftconv", "fftconv_spectrum", "tk_ops.fftconv_spectrum", k, N)
