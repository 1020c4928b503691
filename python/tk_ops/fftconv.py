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
    """Causal long convolution by FFT (the sequence mixer of Hyena / H3-style models), forward and backward, on
    Hopper tensor cores: one filter per channel, with optional input and output gates::

        v = u * pregate                                                   # pregate None: v = u
        y[b, h, n] = postgate[b, h, n] * sum_{m <= n, m < Nk} k[h, m] v[b, h, n - m]   # postgate None: no gate

    which without gates is ``irfft(rfft(u, 2N) * rfft(k, 2N))[..., :N]``. The float64 reference is
    ``tk_ops.reference.fftconv``. Sequences up to 4096 are one FFT each; up to 65536 they are cut into blocks of
    4096 samples combined in frequency; longer ones (to 2^20) convolve with cuFFT in float32.

    Args:
        u: (B, H, N) bfloat16 or float16 CUDA tensor, 1 <= N <= 2^20 (other layouts are copied to dense rows).
        k: (H, Nk) float32 (bfloat16 and float16 accepted), 1 <= Nk <= N: one filter per channel, tap 0 first. None
            when its spectrum ``k_f`` is passed instead (exactly one of the two).
        pregate: None, or (B, H, N) in u's dtype, multiplied into u before the convolution.
        postgate: None, or (B, H, N) in u's dtype, multiplied into the result.
        k_f: None, or the filter's spectrum as :func:`fftconv_spectrum` returns it for this N (complex64), with k
            None: skips the filter's transform, for inference with a fixed filter.

    Returns:
        y (B, H, N) in u's dtype.

    Autograd:
        Differentiable in u, k (its gradient in k's dtype, summed over the batch in fp32) and the gates, through a
        C++ autograd formula on the tk_ops kernels (cuFFT past N = 65536). ``k_f`` gets no gradient: a ``k_f`` that
        requires grad is refused while gradients are enabled (pass k itself to train the filter); with one that does
        not, u and the gates still get theirs. Traces under ``torch.compile(fullgraph=True)`` and captures into CUDA
        graphs.

    Raises:
        InputError: u is not 3-D, N is 0 or above 2^20, k is not (H, Nk) with 1 <= Nk <= N, a gate's shape is not u's,
            both or neither of k and k_f are given, k_f has the wrong shape for N, or k_f requires grad.
        DTypeError: u is not bfloat16 or float16, a gate is not in u's dtype, k is not float32, bfloat16 or float16,
            or k_f is not complex64.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            fftconv family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        u = torch.randn(8, 768, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = (torch.randn(768, 4096, device="cuda") / 64).requires_grad_()          # float32 filters
        gate = torch.sigmoid(torch.randn(8, 768, 4096, device="cuda")).bfloat16()
        y = tk_ops.fftconv(u, k, postgate=gate)                                     # (8, 768, 4096) bfloat16
        y.float().square().mean().backward()                                        # u.grad, k.grad (float32)

    Kernel design: docs/fftconv.md.
    """
    return _ext.call("fftconv", "fftconv_fwd", "tk_ops.fftconv", u, k, pregate, postgate, k_f)


def fftconv_spectrum(k: torch.Tensor, N: int) -> torch.Tensor:
    """The spectrum of the filters k for sequences of length N, as ``fftconv(u, None, ..., k_f=...)`` reads it:
    computed once, it saves the filter's transform on every later call with a fixed filter (inference).

    For N <= 4096 and N > 65536 it is ``rfft(k, L)``, L the FFT size the op uses for N (up to 4096: the smallest of
    256, 512, ..., 8192 that is at least 2N; past 65536: the smallest power of two >= 2N); for L = 2N (N a power of
    two from 128) this equals ``tk_ops.reference.fftconv_spectrum(k, N)``. For 4096 < N <= 65536 it is the rfft of
    each block of 4096 taps at 8192 points.

    Args:
        k: (H, Nk) float32 (bfloat16 and float16 accepted) CUDA tensor, 1 <= Nk <= N.
        N: the sequence length the spectrum is for, a Python int, 1 <= N <= 2^20.

    Returns:
        complex64 ``(H, L / 2 + 1)``, or ``(H, ceil(Nk / 4096), 4097)`` for 4096 < N <= 65536.

    Autograd:
        Not differentiable: the spectrum is for inference. A k that requires grad is refused while gradients are
        enabled (its result would silently cut the filter off the graph); pass k itself to :func:`fftconv` to
        train it, or compute the spectrum under ``torch.no_grad()`` or of ``k.detach()``.

    Raises:
        InputError: N is not an int or out of range, k is not 2-D with 1 <= Nk <= N, or k requires grad.
        DTypeError: k is not float32, bfloat16 or float16.
        DeviceMismatchError: k is on the CPU.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            fftconv family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        k = torch.randn(768, 4096, device="cuda") / 64
        k_f = tk_ops.fftconv_spectrum(k, 4096)                   # (768, 4097) complex64, L = 8192
        u = torch.randn(8, 768, 4096, device="cuda", dtype=torch.bfloat16)
        y = tk_ops.fftconv(u, None, k_f=k_f)                     # equals tk_ops.fftconv(u, k) up to rounding
    """
    if isinstance(N, bool) or not isinstance(N, int):
        raise InputError(f"tk_ops.fftconv_spectrum: N must be an int, got {type(N).__name__}")
    return _ext.call("fftconv", "fftconv_spectrum", "tk_ops.fftconv_spectrum", k, N)
