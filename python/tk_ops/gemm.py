"""Matrix multiplication on Hopper tensor cores: bf16 ``matmul`` and fp8 ``scaled_mm``.

Both are torch custom ops (``torch.ops.tk_ops.matmul`` / ``scaled_mm``) with fake implementations, so
they trace under ``torch.compile(fullgraph=True)`` and capture into CUDA graphs. A third op,
``torch.ops.tk_ops.linear(x, weight, bias)``, is what :class:`tk_ops.nn.Linear` calls. ``matmul`` and
``linear`` are differentiable, their products on the same kernels; the autograd formulas are C++
(kernels/gemm/autograd.cpp), registered when the extension loads, because a training step calls them often
and a formula registered from Python costs more host time per call than a small GEMM takes.
"""
from __future__ import annotations

import torch

from . import _ext
from .errors import DTypeError, InputError

_lib = torch.library.Library("tk_ops", "FRAGMENT")
_lib.define("matmul(Tensor a, Tensor b) -> Tensor")
_lib.define("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_lib.define("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType out_dtype) -> Tensor")


@torch.library.register_fake("tk_ops::matmul")
def _matmul_fake(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("tk_ops::linear")
def _linear_fake(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.register_fake("tk_ops::scaled_mm")
def _scaled_mm_fake(a, b, scale_a, scale_b, out_dtype):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


def _check_operands(name: str, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, k_multiple: int) -> None:
    for label, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"tk_ops.{name}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            raise DTypeError(f"tk_ops.{name}: {label} must be {dtype}, got {t.dtype}")
        if t.dim() != 2:
            raise InputError(f"tk_ops.{name}: {label} must be 2-D, got shape {tuple(t.shape)}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise InputError(f"tk_ops.{name}: a is {m}x{k} but b is {k2}x{n}: inner dimensions must match")
    if k % k_multiple or n % 8:
        raise InputError(
            f"tk_ops.{name}: K={k} must be a multiple of {k_multiple} and N={n} a multiple of 8 "
            f"(TMA moves rows whose stride is a multiple of 16 bytes); pad the tensors")


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for bf16 matrices, fp32 accumulation, bf16 result.

    ``a`` is (M, K), or (..., M, K) whose leading dimensions are folded into M; ``b`` is (K, N), either
    row-major or the transpose of an (N, K) row-major tensor (``weight.t()`` of an ``nn.Linear``): both are
    read in place. Any M and N; K and N must be multiples of 8.
    """
    if isinstance(a, torch.Tensor) and a.dim() > 2:
        lead = a.shape[:-1]
        return matmul(a.reshape(-1, a.shape[-1]), b).reshape(*lead, b.shape[-1])
    _check_operands("matmul", a, b, torch.bfloat16, 8)
    _ext.check_device(a=a, b=b)
    _ext.require("gemm")
    return torch.ops.tk_ops.matmul(a, b)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp8 e4m3 ``(a * scale_a) @ (b * scale_b)`` with fp32 scales, like ``torch._scaled_mm``.

    ``a`` is (M, K) row-major; ``b`` is (K, N) column-major, i.e. ``w.t()`` for an (N, K) row-major ``w``.
    K must be a multiple of 16 and N of 8. ``out_dtype`` is bfloat16, float16 or float32.
    Scales as torch._scaled_mm takes them: one element each (per tensor), or ``scale_a`` (M, 1), one per row of
    ``a``, and ``scale_b`` (1, N), one per column of ``b`` (row-wise scaling); either may also stay per tensor.
    """
    _check_operands("scaled_mm", a, b, torch.float8_e4m3fn, 16)
    if not a.is_contiguous():
        raise InputError("tk_ops.scaled_mm: a must be row-major (call .contiguous())")
    if not b.t().is_contiguous():
        raise InputError("tk_ops.scaled_mm: b must be column-major: pass w.t() for a contiguous (N, K) tensor w")
    (m, _), n = a.shape, b.shape[1]
    for label, s, vector_shape, what in (("scale_a", scale_a, (m, 1), "per row of a"),
                                         ("scale_b", scale_b, (1, n), "per column of b")):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise InputError(f"tk_ops.scaled_mm: {label} must be a float32 tensor")
        if s.numel() != 1 and tuple(s.shape) != vector_shape:
            raise InputError(f"tk_ops.scaled_mm: {label} must have one element (per tensor) or shape "
                             f"{vector_shape} ({what}), got shape {tuple(s.shape)}")
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise InputError(f"tk_ops.scaled_mm: out_dtype must be bfloat16, float16 or float32, got {out_dtype}")
    _ext.check_device(a=a, b=b, scale_a=scale_a, scale_b=scale_b)
    _ext.require("gemm")
    return torch.ops.tk_ops.scaled_mm(a, b, scale_a, scale_b, out_dtype)
