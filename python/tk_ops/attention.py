"""Attention (flash attention) on Hopper tensor cores, forward and backward: a drop-in for
``torch.nn.functional.scaled_dot_product_attention``.

``attention(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0)`` takes (B, H, N, D) tensors
like SDPA: bf16 or fp16, head dimension 64, 96, 128 or 256, any sequence lengths (ragged tails are masked),
different query and key lengths, and grouped-query / multi-query attention (K and V with fewer heads).
``attention_with_lse`` also returns the row log-sum-exp.

Causal attention with Nq != Nk is aligned to the bottom-right corner, as in FlashAttention: query i sees
keys j <= i + Nk - Nq. Rows that see no key (possible when Nq > Nk) output zeros and log-sum-exp -inf, and
their query gradient is zero. (SDPA's ``is_causal`` aligns top-left instead; the two agree when Nq == Nk.)

``window=(left, right)`` is FlashAttention's sliding window: query i sees keys j with
i + Nk - Nq - left <= j <= i + Nk - Nq + right, -1 meaning no limit on that side; ``causal=True`` sets
right = 0. Key blocks wholly outside the window are skipped, not masked. ``softcap > 0`` passes the scaled
scores through softcap * tanh(scores / softcap) before the softmax (Gemma 2), forward and backward; the
kernels evaluate tanh with the hardware's approximation (relative error about 2^-11).

``attention_varlen`` takes packed documents like ``flash_attn_varlen_func`` (see its docstring).

Custom ops carry the kernels, defined with their CUDA kernels, their Meta kernels (so they trace under
``torch.compile(fullgraph=True)``, forward and backward) and their argument rules in
kernels/attention/binding.cpp; they capture into CUDA graphs (``attention_varlen_fwd`` / ``_bwd`` take the
packed tensors and offsets, then the same options):

- ``torch.ops.tk_ops.attention_fwd(q, k, v, causal=False, scale=None, window_left=-1, window_right=-1,
  softcap=0.0) -> (O, LSE)``
- ``torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, <the same options>) -> (dQ, dK, dV)``, which
  recomputes the probabilities from LSE; dK and dV are summed over the query heads of each group (GQA).

Outputs (and gradients) take their input's memory order, as SDPA's do: q viewed from a (B, N, H, D) tensor
gives O laid out (B, N, H, D). Strided views the kernels' TMA can address are read in place, others copied.

The autograd formula of ``attention_fwd`` calls ``attention_bwd``; it is C++ (kernels/attention/autograd.cpp),
registered when the extension loads, because a formula registered from Python costs tens of microseconds of
host time per call. Gradients reach q, k and v only where they require them. A gradient flowing into LSE
(when the log-sum-exp of ``attention_with_lse`` feeds the loss) is exact too; it costs a second backward call.
"""
from __future__ import annotations

import torch

from . import _ext
from .errors import InputError


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       scale: float | None = None, window: tuple[int, int] = (-1, -1),
                       softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(O, LSE)``: O as :func:`attention`, and LSE (B, H, Nq) float32, the natural-log sum over the
    visible keys of exp(score) per query row (-inf for a row that sees no key). Both are differentiable
    (a loss that uses LSE costs a second backward kernel call)."""
    window = _checked_options(causal, scale, window, softcap)
    return _ext.call("attention", "attention_fwd", "tk_ops.attention", q, k, v, causal, scale, window[0], window[1],
                     float(softcap))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> torch.Tensor:
    """softmax(scale * q @ k^T [+ causal mask]) @ v for (B, H, N, D) tensors, like
    ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` (bottom-right causal alignment
    when Nq != Nk; see the module docstring). K and V may have fewer heads than Q (GQA / MQA): query head h
    uses key/value head h // (Hq // Hk). Default scale 1/sqrt(D). ``window=(left, right)`` limits the keys
    around the diagonal (-1: unlimited), ``softcap > 0`` caps the scores (module docstring). Returns
    (B, Hq, Nq, D) in the input dtype. Differentiable: the backward runs on the tk_ops backward kernel.
    """
    return attention_with_lse(q, k, v, causal, scale, window, softcap)[0]


def head_dims() -> list[int]:
    """The head dimensions this build's attention kernels take."""
    return list(_ext.require("attention").attention_head_dims())


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _checked_options(causal, scale, window, softcap, op: str = "tk_ops.attention") -> tuple[int, int]:
    """The Python types of the options, which the op cannot see (torch would take causal=1 for True and
    scale=True for 1.0); their values are the op's rules. Returns the window as a tuple."""
    if not isinstance(causal, bool):
        raise InputError(f"{op}: causal must be a bool, got {type(causal).__name__}")
    if isinstance(scale, bool):
        raise InputError(f"{op}: scale must be a finite number or None, got {scale!r}")
    if not isinstance(window, (tuple, list)) or len(window) != 2 or not all(_is_int(w) for w in window):
        raise InputError(f"{op}: window must be a pair of ints (left, right), -1 meaning unlimited, got {window!r}")
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise InputError(f"{op}: softcap must be a number (0 for none), got {softcap!r}")
    return int(window[0]), int(window[1])


def attention_varlen_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                              cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                              scale: float | None = None, window: tuple[int, int] = (-1, -1),
                              softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(O, LSE)`` of :func:`attention_varlen`: O (total_q, Hq, D) and LSE (Hq, total_q) float32, the packed
    layout of flash_attn_varlen_func's ``return_attn_probs`` log-sum-exp."""
    window = _checked_options(causal, scale, window, softcap, "tk_ops.attention_varlen")
    if not (_is_int(max_seqlen_q) and _is_int(max_seqlen_k)):
        raise InputError("tk_ops.attention_varlen: max_seqlen_q and max_seqlen_k must be Python ints, got "
                         f"{max_seqlen_q!r} and {max_seqlen_k!r}")
    return _ext.call("attention", "attention_varlen_fwd", "tk_ops.attention_varlen", q, k, v, cu_seqlens_q,
                     cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, window[0], window[1], float(softcap))


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool = False,
                     scale: float | None = None, window: tuple[int, int] = (-1, -1), softcap: float = 0.0
                     ) -> torch.Tensor:
    """Attention over packed documents, like ``flash_attn_varlen_func``: q (total_q, Hq, D), k and v
    (total_k, Hk, D) hold the documents one after another; document i is rows cu_seqlens_q[i] ..
    cu_seqlens_q[i + 1] of q and cu_seqlens_k[i] .. cu_seqlens_k[i + 1] of k and v (int32 offsets, documents + 1
    of them, starting at 0, on q's GPU or in host memory). Each document is its own attention problem, with the
    options of :func:`attention` (causal bottom-right aligned within it, window, softcap, GQA); tasks never span
    two documents (only a document's last partial tile computes, and masks, the next one's rows), and empty
    documents are allowed. ``max_seqlen_q`` / ``max_seqlen_k`` are accepted for flash-attn compatibility (Python
    ints >= 0; the kernels do not need them). Rows past the last offset see no key: their output is 0. Offsets in
    host memory are checked (0 first, never decreasing, within the tensors) and copied to the GPU; offsets on the
    GPU are not read on the host (that would wait for it): the kernels clamp them into the tensors (the first
    document starting at row 0), and a decreasing offset makes an empty document. Rows outside a document may
    hold anything: a NaN or inf in the next document's rows, or in unused rows past the last offset, reaches neither
    this document's output nor its gradients. Differentiable in q, k and v (the backward runs per document too).
    Returns O (total_q, Hq, D) in the input dtype."""
    return attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                     window, softcap)[0]
