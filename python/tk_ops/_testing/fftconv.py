"""The FFT convolution's seam (torch.ops.tk_ops_testing, kernels/fftconv/binding.cpp): the backward by the algorithm
tk_ops.fftconv runs past the block path (cuFFT through ATen, kernels/fftconv/fftconv_cufft.cpp) at an FFT size the
caller names, on the device of the tensors, CPU included.

The op checks its arguments with fftconv_bwd's rules plus the FFT size's, and raises the op's own errors (ValueError,
TypeError). It has no autograd.
"""
from __future__ import annotations

import torch

from .. import _ext


def bwd_by_cufft(u: torch.Tensor, k: torch.Tensor, pregate: torch.Tensor | None, postgate: torch.Tensor | None,
                 dy: torch.Tensor, output_mask: tuple[bool, bool, bool, bool], fft: int):
    """(du, dk, dpregate, dpostgate) of y = postgate * causal_conv(u * pregate, k) for the output's gradient dy, each
    where output_mask (u, k, pregate, postgate) asks for it ((0,) tensors elsewhere), at the FFT size fft >= 2N."""
    _ext.require("fftconv")  # loads the extension, which defines torch.ops.tk_ops_testing
    return torch.ops.tk_ops_testing.fftconv_bwd_by_cufft(u, k, pregate, postgate, dy, list(output_mask), fft)
