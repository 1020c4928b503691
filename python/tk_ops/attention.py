"""Attention (flash attention) on Hopper tensor cores, forward and backward: a drop-in for
``torch.nn.functional.scaled_dot_product_attention``.

``attention(q, k, v, causal=False, scale=None)`` takes (B, H, N, D) tensors like SDPA: bf16 or fp16,
head dimension 64 or 128, any sequence lengths (ragged tails are masked), different query and key lengths,
and grouped-query / multi-query attention (K and V with fewer heads). ``attention_with_lse`` also returns
the row log-sum-exp.

Causal attention with Nq != Nk is aligned to the bottom-right corner, as in FlashAttention: query i sees
keys j <= i + Nk - Nq. Rows that see no key (possible when Nq > Nk) output zeros and log-sum-exp -inf, and
their query gradient is zero. (SDPA's ``is_causal`` aligns top-left instead; the two agree when Nq == Nk.)

Two custom ops carry the kernels, each with a fake implementation, so they trace under
``torch.compile(fullgraph=True)`` (forward and backward) and capture into CUDA graphs:

- ``torch.ops.tk_ops.attention_fwd(q, k, v, causal, scale) -> (O, LSE)``
- ``torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, causal, scale) -> (dQ, dK, dV)``, which
  recomputes the probabilities from LSE; dK and dV are summed over the query heads of each group (GQA).

The autograd formula of ``attention_fwd`` calls ``attention_bwd``; it is C++ (kernels/attention/autograd.cpp),
registered when the extension loads, because a formula registered from Python costs tens of microseconds of
host time per call. Gradients reach q, k and v only where they require them. A gradient flowing into LSE
(when the log-sum-exp of ``attention_with_lse`` feeds the loss) is exact too; it costs a second backward call.
"""
from __future__ import annotations

import math

import torch

from . import _ext
from .errors import DTypeError, InputError

_lib = torch.library.Library("tk_ops", "FRAGMENT")
_lib.define("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)")
_lib.define("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor o, Tensor dout, Tensor lse, bool causal, float scale) "
            "-> (Tensor dq, Tensor dk, Tensor dv)")

HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16, torch.float16)


def _heads_inner(t: torch.Tensor) -> bool:
    """Whether an output made from the (B, H, N, D) input ``t`` is laid out (B, N, H, D) in memory: when ``t``
    is, i.e. its head stride is below its sequence stride (H > 1 and N > 1). The kernels' outputs follow
    their input's memory order, as scaled_dot_product_attention's do, so that the transposes and reshapes
    around attention in a transformer block stay views. The C++ binding applies the same rule."""
    return t.shape[1] > 1 and t.shape[2] > 1 and t.stride(1) < t.stride(2)


def _empty_like_order(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    b, h, n, d = t.shape
    dtype = t.dtype if dtype is None else dtype
    if _heads_inner(t):
        return t.new_empty((b, n, h, d), dtype=dtype).transpose(1, 2)
    return t.new_empty((b, h, n, d), dtype=dtype)


@torch.library.register_fake("tk_ops::attention_fwd")
def _attention_fwd_fake(q, k, v, causal, scale):
    b, h, n, d = q.shape
    return _empty_like_order(q), q.new_empty((b, h, n), dtype=torch.float32)


@torch.library.register_fake("tk_ops::attention_bwd")
def _attention_bwd_fake(q, k, v, o, dout, lse, causal, scale):
    # In the input dtype and memory order: dQ shaped like q, dK and dV like k and v (summed over each GQA group).
    return _empty_like_order(q), _empty_like_order(k), _empty_like_order(v)


def _tma_readable(t: torch.Tensor) -> bool:
    """Whether the kernel can read this (B, H, N, D) view's strides in place: D dense, the other strides
    multiples of 8 elements (16 bytes, the TMA rule); size-1 axes may have any stride. (A start address that
    is not 16-byte aligned is caught by the op itself, which copies such a tensor: data_ptr() cannot be read
    while torch.compile traces.)"""
    if t.stride(3) != 1:
        return False
    return all(t.shape[i] == 1 or (t.stride(i) > 0 and t.stride(i) % 8 == 0) for i in range(3))


def _check(q, k, v, causal, scale) -> float:
    for label, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"tk_ops.attention: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in DTYPES:
            raise DTypeError(f"tk_ops.attention: {label} must be bfloat16 or float16, got {t.dtype}")
        if t.dim() != 4:
            raise InputError(f"tk_ops.attention: {label} must be 4-D (batch, heads, seq_len, head_dim) like "
                             f"scaled_dot_product_attention, got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise DTypeError(f"tk_ops.attention: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, hq, nq, d = q.shape
    if d not in HEAD_DIMS:
        raise InputError(f"tk_ops.attention: head_dim must be 64 or 128, got {d}")
    if k.shape != v.shape:
        raise InputError(f"tk_ops.attention: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise InputError(f"tk_ops.attention: k and v must be (B, Hk, Nk, D) with q's batch {b} and head_dim {d}, "
                         f"got {tuple(k.shape)}")
    hk = k.shape[1]
    if hk == 0 or hq % hk:
        raise InputError(f"tk_ops.attention: the query heads ({hq}) must be a multiple of the key/value heads ({hk}) "
                         f"(grouped-query attention)")
    if not isinstance(causal, bool):
        raise InputError(f"tk_ops.attention: causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise InputError(f"tk_ops.attention: scale must be a finite number or None, got {scale!r}")
    return float(scale)


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(O, LSE)``: O as :func:`attention`, and LSE (B, H, Nq) float32, the natural-log sum over the
    visible keys of exp(scale * q.k) per query row (-inf for a row that sees no key). Both are differentiable
    (a loss that uses LSE costs a second backward kernel call)."""
    scale = _check(q, k, v, causal, scale)
    _ext.check_device(q=q, k=k, v=v)
    _ext.require("attention")
    # Strided views TMA can address (e.g. (B, N, H, D).transpose(1, 2)) are read in place; others are copied.
    q, k, v = (t if _tma_readable(t) else t.contiguous() for t in (q, k, v))
    return torch.ops.tk_ops.attention_fwd(q, k, v, causal, scale)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """softmax(scale * q @ k^T [+ causal mask]) @ v for (B, H, N, D) tensors, like
    ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` (bottom-right causal alignment
    when Nq != Nk; see the module docstring). K and V may have fewer heads than Q (GQA / MQA): query head h
    uses key/value head h // (Hq // Hk). Default scale 1/sqrt(D). Returns (B, Hq, Nq, D) in the input dtype.
    Differentiable: the backward runs on the tk_ops backward kernel.
    """
    return attention_with_lse(q, k, v, causal, scale)[0]
