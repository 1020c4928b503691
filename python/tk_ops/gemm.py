"""Matrix multiplication on Hopper tensor cores: bf16 ``matmul`` and fp8 ``scaled_mm``.

Both are torch custom ops (``torch.ops.tk_ops.matmul`` / ``scaled_mm``), defined with their CUDA kernels, their
Meta kernels (so they trace under ``torch.compile(fullgraph=True)``) and their argument rules in
kernels/gemm/binding.cpp; they capture into CUDA graphs. A third op, ``torch.ops.tk_ops.linear(x, weight, bias)``,
is what :class:`tk_ops.nn.Linear` calls. ``matmul`` and ``linear`` are differentiable, their products on the same
kernels; the autograd formulas are C++ (kernels/gemm/autograd.cpp), because a training step calls them often and a
formula registered from Python costs more host time per call than a small GEMM takes.

The functions here are one op call each: the ops check everything, and a failure is re-raised as the tk_ops
exception of its kind (tk_ops.errors).
"""
from __future__ import annotations

import torch

from . import _ext


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Matrix product ``a @ b`` of bfloat16 matrices on Hopper tensor cores: fp32 accumulation, one bfloat16
    rounding of each output element.

    Args:
        a: (M, K) bfloat16 CUDA tensor, or (..., M, K) whose leading dimensions are folded into M. Any M and K
            (K = 0 gives zeros); a is read in place in either memory order.
        b: (K, N) bfloat16 on a's device, row-major or the transpose of an (N, K) row-major tensor
            (``weight.t()`` of an ``nn.Linear``): both are read in place. N must be a multiple of 8, and so must
            K or M (TMA moves rows whose stride is a multiple of 16 bytes).

    Returns:
        c (..., M, N) bfloat16, a's leading dimensions kept: ``c = a @ b``.

    Autograd:
        Differentiable in a and b; the backward runs the same GEMM (dA = dC @ b^T, dB = a^T @ dC) from a C++
        autograd formula. Traces under ``torch.compile(fullgraph=True)`` and captures into CUDA graphs.

    Raises:
        DTypeError: a or b is not bfloat16 (for fp8 use :func:`scaled_mm`).
        InputError: b is not 2-D, the inner sizes differ, N (or both K and M) is not a multiple of 8, or an
            extent reaches 2^31.
        DeviceMismatchError: a or b is on the CPU, or they are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack
            the gemm family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        a = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)       # an nn.Linear weight (N, K)
        c = tk_ops.matmul(a, w.t())                                             # (4096, 2048) bfloat16
        c.float().square().mean().backward()

    Kernel design: docs/gemm.md.
    """
    return _ext.call("gemm", "matmul", "tk_ops.matmul", a, b)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp8 e4m3 matrix product ``(a * scale_a) @ (b * scale_b)`` with fp32 scales, like ``torch._scaled_mm``:
    fp32 accumulation, the scales applied to the fp32 sums, one rounding to ``out_dtype``.

    Args:
        a: (M, K) ``torch.float8_e4m3fn`` CUDA tensor, row-major (call ``.contiguous()`` otherwise), 16-byte
            aligned.
        b: (K, N) ``torch.float8_e4m3fn`` on a's device, column-major, i.e. ``w.t()`` for an (N, K) row-major
            ``w``; 16-byte aligned. K must be a multiple of 16 and N of 8.
        scale_a: float32, one element (per-tensor scaling) or (M, 1), one scale per row of a (row-wise).
        scale_b: float32, one element (per tensor) or (1, N), one scale per column of b. Either scale may stay
            per tensor while the other is row-wise, as ``torch._scaled_mm`` allows.
        out_dtype: the result's dtype, ``torch.bfloat16`` (the default), ``torch.float16`` or ``torch.float32``.

    Returns:
        c (M, N) in ``out_dtype``: ``c[i, j] = scale_a[i] * scale_b[j] * sum_k a[i, k] b[k, j]`` (a scale held per
        tensor applies to every i or j).

    Autograd:
        Not differentiable: the op has no backward formula, so no gradient reaches a, b or the scales (fp8
        training recipes quantize in their own autograd functions and call this in them). It traces under
        ``torch.compile(fullgraph=True)`` and captures into CUDA graphs.

    Raises:
        DTypeError: a or b is not float8_e4m3fn.
        InputError: a scale is not float32 or has a shape other than those above, ``out_dtype`` is not one of
            the three, a or b is not 2-D or not in the layout above, the inner sizes differ, K is not a multiple
            of 16 or N of 8, or a pointer is not 16-byte aligned.
        DeviceMismatchError: a tensor is on the CPU or on another GPU.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack
            the gemm family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        x = torch.randn(4096, 1024, device="cuda")
        w = torch.randn(2048, 1024, device="cuda")
        sx = x.abs().amax(dim=1, keepdim=True) / 448.0                          # (M, 1): row-wise
        sw = w.abs().amax(dim=1, keepdim=True).t() / 448.0                      # (1, N)
        x8 = (x / sx).to(torch.float8_e4m3fn)
        w8 = (w / sw.t()).to(torch.float8_e4m3fn)
        y = tk_ops.scaled_mm(x8, w8.t(), sx, sw)                                # (4096, 2048) bfloat16, ~ x @ w.t()

    Kernel design: docs/gemm.md.
    """
    return _ext.call("gemm", "scaled_mm", "tk_ops.scaled_mm", a, b, scale_a, scale_b, out_dtype)
