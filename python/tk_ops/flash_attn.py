"""FlashAttention 2's functions on the tk_ops attention kernels: ``flash_attn_func``, ``flash_attn_varlen_func``,
``flash_attn_qkvpacked_func`` and ``flash_attn_kvpacked_func``, with flash-attn 2.8's signatures, defaults, layouts
and semantics, so that code written for ``flash_attn`` runs by changing its import:

    import tk_ops.flash_attn as flash_attn
    from tk_ops.flash_attn import flash_attn_func, flash_attn_varlen_func

**Layouts.** q (B, Nq, Hq, D), k and v (B, Nk, Hk, D); packed qkv (B, N, 3, H, D) and kv (B, Nk, 2, Hk, D); varlen
q (total_q, Hq, D), k and v (total_k, Hk, D) with int32 ``cu_seqlens_q`` / ``cu_seqlens_k`` (documents + 1 offsets
from 0). bfloat16 or float16, CUDA, head dimension one of :func:`tk_ops.attention.head_dims` (flash-attn takes any
multiple of 8 up to 256; the others raise :class:`~tk_ops.errors.InputError`). Hk must divide Hq (GQA / MQA: query
head h uses key/value head h // (Hq // Hk)). The kernels read the (B, N, H, D) tensors through transposed views in
place, and the output comes back (B, N, H, D) contiguous: no copies either way; packed tensors are split into
views, and their gradients are stacked into one (B, N, 3 or 2, H, D) tensor, one copy.

**Semantics** (flash-attn >= 2.1): ``softmax_scale`` defaults to 1 / sqrt(D). ``causal=True`` is aligned to the
bottom-right corner: query i sees keys j <= i + Nk - Nq. ``window_size=(left, right)`` lets query i see the keys
i + Nk - Nq - left <= j <= i + Nk - Nq + right, a negative side being unlimited; ``causal`` sets right = 0.
``softcap > 0`` replaces each scaled score s by softcap * tanh(s / softcap); 0 (or less) turns it off. A row that
sees no key outputs 0. For varlen, each document is its own problem (causal and windows within it); query rows past
the last offset output 0.

**Returns.** ``out`` in q's layout, or with ``return_attn_probs=True`` the tuple (out, softmax_lse, None):
softmax_lse is float32, (B, Hq, Nq) for the fixed-length functions and (Hq, total_q) for varlen, the natural-log
sum of exp(score) over the visible keys, as flash-attn returns it, except for rows that see no key: -inf here (the
log-sum-exp of nothing, which merges correctly with other partial results), +inf in flash-attn 2. The third element,
flash-attn's S_dmask, is None: it is the dropout pattern and unscaled probabilities, for testing dropout, and these
kernels have no dropout. softmax_lse is differentiable here (a loss that uses it costs a second backward call);
flash-attn ignores a gradient that reaches it.

**Not supported** (each raises :class:`~tk_ops.errors.InputError` naming the option): ``dropout_p > 0``,
``alibi_slopes``, ``block_table`` (paged KV cache), and ``deterministic=True`` on a call whose backward may run
(gradients enabled and an input requiring them): the backward adds each key block's share of dQ into an fp32
accumulator with TMA reduce-adds in whatever order the blocks finish, so dQ is not bit-reproducible. The forward is
deterministic, so ``deterministic=True`` is accepted where no gradient is taken.
"""
from __future__ import annotations

import operator

import torch

from . import _ext
from .errors import InputError

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func"]


def _refuse(name: str, dropout_p, alibi_slopes, deterministic, tensors, block_table=None) -> None:
    """Raise InputError for the first option the kernels do not implement."""
    if dropout_p:
        raise InputError(f"tk_ops.flash_attn.{name}: dropout_p={dropout_p!r} is not supported (the kernels have no "
                         "dropout); pass dropout_p=0.0")
    if alibi_slopes is not None:
        raise InputError(f"tk_ops.flash_attn.{name}: alibi_slopes is not supported (the kernels add no ALiBi bias)")
    if block_table is not None:
        raise InputError(f"tk_ops.flash_attn.{name}: block_table (a paged KV cache) is not supported")
    if deterministic and torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise InputError(
            f"tk_ops.flash_attn.{name}: deterministic=True is not supported for a call whose backward may run: the "
            "backward adds each key block's share of dQ into an fp32 accumulator by atomic reduce-adds in the order "
            "the blocks finish, so dQ can differ in its last bits between runs. The forward is deterministic: "
            "deterministic=True is accepted under torch.no_grad() or without inputs that require grad")


def _window(window_size) -> tuple[int, int]:
    left, right = window_size
    return (-1 if left < 0 else int(left)), (-1 if right < 0 else int(right))


def _dense(name: str, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
           return_attn_probs):
    if dropout_p or alibi_slopes is not None or deterministic:
        _refuse(name, dropout_p, alibi_slopes, deterministic, (q, k, v))
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise InputError(f"tk_ops.flash_attn.{name}: q must be (batch, seqlen_q, nheads, headdim) and k, v (batch, "
                         f"seqlen_k, nheads_k, headdim), got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    left, right = _window(window_size)
    # (B, N, H, D) read as (B, H, N, D) views: the kernels take these strides in place and write O in q's memory
    # order, so the output's transpose is a contiguous (B, N, H, D) tensor.
    out, lse = _ext.call("attention", "attention_fwd", f"tk_ops.flash_attn.{name}", q.transpose(1, 2),
                         k.transpose(1, 2), v.transpose(1, 2), bool(causal), softmax_scale, left, right,
                         float(softcap) if softcap > 0 else 0.0)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                    return_attn_probs: bool = False):
    """flash-attn's ``flash_attn_func`` on the tk_ops kernels (module docstring for the rules).

    q (B, Nq, Hq, D), k and v (B, Nk, Hk, D), Hk dividing Hq; bfloat16 or float16 CUDA tensors. Returns out
    (B, Nq, Hq, D) in q's dtype, or (out, softmax_lse (B, Hq, Nq) float32, None) with ``return_attn_probs=True``.
    Causal and windows are aligned bottom-right (query i sees keys up to i + Nk - Nq); ``window_size`` sides < 0 are
    unlimited; ``softcap > 0`` caps the scores. Differentiable in q, k and v. ``dropout_p > 0``, ``alibi_slopes`` and
    ``deterministic=True`` with a backward to come raise InputError.

    Example::

        q = torch.randn(2, 1024, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 1024, 4, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(2, 1024, 4, 128, device="cuda", dtype=torch.bfloat16)
        out = flash_attn_func(q, k, v, causal=True, window_size=(256, 0))   # (2, 1024, 16, 128)
        out.sum().backward()
    """
    return _dense("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0, softmax_scale: float | None = None,
                              causal: bool = False, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                              return_attn_probs: bool = False):
    """flash-attn's ``flash_attn_qkvpacked_func``: :func:`flash_attn_func` on qkv (B, N, 3, H, D) (queries, keys,
    values stacked on dimension 2; as many key/value heads as query heads). The three are read in place as views;
    the gradient comes back as one (B, N, 3, H, D) tensor. Returns out (B, N, H, D), or (out, softmax_lse
    (B, H, N), None) with ``return_attn_probs=True``.

    Example::

        qkv = torch.randn(2, 1024, 3, 16, 64, device="cuda", dtype=torch.float16, requires_grad=True)
        out = flash_attn_qkvpacked_func(qkv, causal=True)   # (2, 1024, 16, 64)
    """
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise InputError("tk_ops.flash_attn.flash_attn_qkvpacked_func: qkv must be (batch, seqlen, 3, nheads, "
                         f"headdim), got shape {tuple(qkv.shape)}")
    q, k, v = qkv.unbind(2)
    return _dense("flash_attn_qkvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                             softmax_scale: float | None = None, causal: bool = False,
                             window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                             return_attn_probs: bool = False):
    """flash-attn's ``flash_attn_kvpacked_func``: :func:`flash_attn_func` on q (B, Nq, Hq, D) and kv
    (B, Nk, 2, Hk, D) (keys and values stacked on dimension 2; Hk dividing Hq). The gradient of kv comes back as one
    (B, Nk, 2, Hk, D) tensor. Returns out (B, Nq, Hq, D), or (out, softmax_lse (B, Hq, Nq), None) with
    ``return_attn_probs=True``.

    Example::

        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)            # one decoding step
        kv = torch.randn(1, 4096, 2, 8, 128, device="cuda", dtype=torch.bfloat16)
        out = flash_attn_kvpacked_func(q, kv, causal=True)   # (1, 1, 32, 128)
    """
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise InputError("tk_ops.flash_attn.flash_attn_kvpacked_func: kv must be (batch, seqlen_k, 2, nheads_k, "
                         f"headdim), got shape {tuple(kv.shape)}")
    k, v = kv.unbind(2)
    return _dense("flash_attn_kvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: float | None = None, causal: bool = False,
                           window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table: torch.Tensor | None = None):
    """flash-attn's ``flash_attn_varlen_func`` on :func:`tk_ops.attention_varlen` (its docstring for the offsets'
    rules): q (total_q, Hq, D), k and v (total_k, Hk, D) holding documents back to back; document i is rows
    cu_seqlens_q[i] .. cu_seqlens_q[i + 1] of q and cu_seqlens_k[i] .. cu_seqlens_k[i + 1] of k and v (int32, on the
    GPU or in host memory). Each document is its own attention problem, causal and windows aligned bottom-right
    within it. ``max_seqlen_q`` / ``max_seqlen_k`` are taken for compatibility (integers; the kernels do not need
    them). Returns out (total_q, Hq, D), or (out, softmax_lse (Hq, total_q) float32, None) with
    ``return_attn_probs=True``. ``block_table`` (paged KV), ``dropout_p > 0``, ``alibi_slopes`` and
    ``deterministic=True`` with a backward to come raise InputError.

    Example::

        lens = torch.tensor([0, 300, 1024, 1500], dtype=torch.int32, device="cuda")   # three documents
        q = torch.randn(1500, 16, 64, device="cuda", dtype=torch.bfloat16)
        k = v = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16)
        out = flash_attn_varlen_func(q, k, v, lens, lens, 724, 724, causal=True)   # (1500, 16, 64)
    """
    if dropout_p or alibi_slopes is not None or deterministic or block_table is not None:
        _refuse("flash_attn_varlen_func", dropout_p, alibi_slopes, deterministic, (q, k, v), block_table)
    left, right = _window(window_size)
    # flash-attn's C++ binding takes any integer-like maximum (a NumPy integer, say); the op takes Python ints.
    if type(max_seqlen_q) is not int:
        max_seqlen_q = operator.index(max_seqlen_q)
    if type(max_seqlen_k) is not int:
        max_seqlen_k = operator.index(max_seqlen_k)
    out, lse = _ext.call("attention", "attention_varlen_fwd", "tk_ops.flash_attn.flash_attn_varlen_func", q, k, v,
                         cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, bool(causal),
                         softmax_scale, left, right, float(softcap) if softcap > 0 else 0.0)
    return (out, lse, None) if return_attn_probs else out
