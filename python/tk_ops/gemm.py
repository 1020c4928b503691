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
    """``a @ b`` for bf16 matrices, fp32 accumulation, bf16 result.

    ``a`` is (M, K), or (..., M, K) whose leading dimensions are folded into M; ``b`` is (K, N), either
    row-major or the transpose of an (N, K) row-major tensor (``weight.t()`` of an ``nn.Linear``): both are
    read in place. Any M and K; N must be a multiple of 8, and K or M too (TMA moves rows whose stride is a
    multiple of 16 bytes).
    """
    return _ext.call("gemm", "matmul", "tk_ops.matmul", a, b)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp8 e4m3 ``(a * scale_a) @ (b * scale_b)`` with fp32 scales, like ``torch._scaled_mm``.

    ``a`` is (M, K) row-major; ``b`` is (K, N) column-major, i.e. ``w.t()`` for an (N, K) row-major ``w``.
    K must be a multiple of 16 and N of 8. ``out_dtype`` is bfloat16, float16 or float32.
    Scales as torch._scaled_mm takes them: one element each (per tensor), or ``scale_a`` (M, 1), one per row of
    ``a``, and ``scale_b`` (1, N), one per column of ``b`` (row-wise scaling); either may also stay per tensor.
    """
    return _ext.call("gemm", "scaled_mm", "tk_ops.scaled_mm", a, b, scale_a, scale_b, out_dtype)
