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
    """Attention with its row log-sum-exp: ``(O, LSE)``, O exactly :func:`attention`'s output and
    ``LSE[b, h, i] = log(sum_j exp(s_ij))`` over the keys j that query i sees, s the scaled (and capped) scores;
    the statistic that merges partial attention results (split keys, ring attention).

    Query i (of Nq) sees key j (of Nk) when ``i + Nk - Nq - left <= j <= i + Nk - Nq + right``, where
    ``(left, right) = window``, a side of -1 is unlimited and ``causal=True`` sets right = 0: causal attention is
    aligned to the bottom-right corner, as in FlashAttention (SDPA's ``is_causal`` aligns top-left; the two agree
    when Nq == Nk). A query row that sees no key (possible when Nq > Nk) outputs zeros and LSE -inf, and
    its query gradient is zero. With ``softcap > 0`` each scaled score s becomes ``softcap * tanh(s / softcap)``
    before the softmax (Gemma 2), forward and backward; the kernels' tanh is the hardware approximation (relative
    error about 2^-11).

    Args:
        q: (B, Hq, Nq, D) bfloat16 or float16 CUDA tensor. D is 64, 96, 128 or 256 (``head_dims()`` in the module
            ``tk_ops.attention`` lists the build's); any Nq (ragged tails are masked). Strided views the kernels' TMA
            can address, such as (B, N, H, D) tensors viewed with ``.transpose(1, 2)``, are read in place; other
            layouts are copied.
        k: (B, Hk, Nk, D) in q's dtype and on q's device; any Nk. Hk must divide Hq (grouped-query and multi-query
            attention): query head h uses key/value head ``h // (Hq // Hk)``.
        v: shaped like k.
        causal: mask the keys after each query's (bottom-right aligned) diagonal.
        scale: the factor of the scores ``q . k``; None means ``1 / sqrt(D)``. Must be finite.
        window: ``(left, right)``, FlashAttention's sliding window in keys around the diagonal, each -1 (unlimited) or
            >= 0; key blocks wholly outside it are skipped rather than masked.
        softcap: 0 for none, else a positive finite cap on the scaled scores.

    Returns:
        ``(O, LSE)``: O (B, Hq, Nq, D) in q's dtype and q's memory order (q viewed from a (B, N, H, D) tensor gives
        an O laid out (B, N, H, D)); LSE (B, Hq, Nq) float32, natural log, -inf for a row that sees no key.

    Autograd:
        Differentiable in q, k and v (those that require grad) from O and from LSE: the tk_ops backward kernel
        recomputes the probabilities from LSE; dK and dV are summed over each group's query heads. A gradient
        reaching LSE is exact too and costs a second backward kernel call. Traces under
        ``torch.compile(fullgraph=True)`` and captures into CUDA graphs.

    Raises:
        InputError: q, k or v is not 4-D, D is not a head dimension the build takes, k and v differ in shape, the
            batch or head dimension of k differs from q's, or Hk does not divide Hq; ``causal`` not a bool, ``scale``
            not finite (or a bool), ``window`` not a pair of ints each -1 or >= 0, ``softcap`` negative or not finite.
        DTypeError: q, k and v are not all bfloat16 or all float16.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        q = torch.randn(2, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 4, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)   # 4 kv heads
        v = torch.randn_like(k, requires_grad=True)
        o1, lse1 = tk_ops.attention_with_lse(q, k[:, :, :2048], v[:, :, :2048])     # the first half of the keys
        o2, lse2 = tk_ops.attention_with_lse(q, k[:, :, 2048:], v[:, :, 2048:])     # the second half
        lse = torch.logaddexp(lse1, lse2)                                          # (2, 16, 4096) float32
        o = (torch.exp(lse1 - lse)[..., None] * o1 + torch.exp(lse2 - lse)[..., None] * o2).to(q.dtype)
        # o equals tk_ops.attention(q, k, v) up to rounding

    Kernel design: docs/attention.md.
    """
    window = _checked_options(causal, scale, window, softcap)
    return _ext.call("attention", "attention_fwd", "tk_ops.attention", q, k, v, causal, scale, window[0], window[1],
                     float(softcap))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> torch.Tensor:
    """Scaled dot-product attention on Hopper tensor cores, forward and backward:
    ``O = softmax(scale * q @ k^T + mask) @ v`` per batch and head, a drop-in for
    ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` (``enable_gqa=True`` when k and
    v have fewer heads).

    Query i (of Nq) sees key j (of Nk) when ``i + Nk - Nq - left <= j <= i + Nk - Nq + right``, where
    ``(left, right) = window``, a side of -1 is unlimited and ``causal=True`` sets right = 0: causal attention is
    aligned to the bottom-right corner, as in FlashAttention (SDPA's ``is_causal`` aligns top-left; the two agree
    when Nq == Nk). A query row that sees no key (possible when Nq > Nk) outputs zeros, and its query
    gradient is zero. With ``softcap > 0`` each scaled score s becomes ``softcap * tanh(s / softcap)``
    before the softmax (Gemma 2), forward and backward; the kernels' tanh is the hardware approximation (relative
    error about 2^-11).

    Args:
        q: (B, Hq, Nq, D) bfloat16 or float16 CUDA tensor. D is 64, 96, 128 or 256 (``head_dims()`` in the module
            ``tk_ops.attention`` lists the build's); any Nq (ragged tails are masked). Strided views the kernels' TMA
            can address, such as (B, N, H, D) tensors viewed with ``.transpose(1, 2)``, are read in place; other
            layouts are copied.
        k: (B, Hk, Nk, D) in q's dtype and on q's device; any Nk. Hk must divide Hq (grouped-query and multi-query
            attention): query head h uses key/value head ``h // (Hq // Hk)``.
        v: shaped like k.
        causal: mask the keys after each query's (bottom-right aligned) diagonal.
        scale: the factor of the scores ``q . k``; None means ``1 / sqrt(D)``. Must be finite.
        window: ``(left, right)``, FlashAttention's sliding window in keys around the diagonal, each -1 (unlimited) or
            >= 0; key blocks wholly outside it are skipped rather than masked.
        softcap: 0 for none, else a positive finite cap on the scaled scores.

    Returns:
        O (B, Hq, Nq, D) in q's dtype, laid out in q's memory order, as SDPA's output is (q viewed from a
        (B, N, H, D) tensor gives an O laid out (B, N, H, D)).

    Autograd:
        Differentiable in q, k and v (those that require grad) on the tk_ops backward kernel, which recomputes
        the probabilities from the forward's log-sum-exp; dK and dV are summed over each group's query heads.
        The formula is C++, so a call costs no Python autograd overhead; it traces under
        ``torch.compile(fullgraph=True)`` and captures into CUDA graphs.

    Raises:
        InputError: q, k or v is not 4-D, D is not a head dimension the build takes, k and v differ in shape, the
            batch or head dimension of k differs from q's, or Hk does not divide Hq; ``causal`` not a bool, ``scale``
            not finite (or a bool), ``window`` not a pair of ints each -1 or >= 0, ``softcap`` negative or not finite.
        DTypeError: q, k and v are not all bfloat16 or all float16.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        q = torch.randn(2, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 4, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)   # 4 kv heads
        v = torch.randn_like(k, requires_grad=True)
        o = tk_ops.attention(q, k, v, causal=True)                  # (2, 16, 4096, 128) bfloat16
        o_local = tk_ops.attention(q, k, v, window=(1023, 0))       # causal, each query sees its last 1024 keys
        o.float().square().mean().backward()

    Kernel design: docs/attention.md.
    """
    return attention_with_lse(q, k, v, causal, scale, window, softcap)[0]


def head_dims() -> list[int]:
    """The head dimensions (the last extent of q, k and v) this build's attention kernels take.

    Returns:
        A list of ints, ``[64, 96, 128, 256]`` in a full build (configs.py may leave some out). Loading
        the extension is all it costs; nothing here has a gradient.

    Raises:
        ExtensionNotBuiltError, FamilyNotBuiltError: the extension is not built or lacks the attention kernels.

    Example::

        from tk_ops.attention import head_dims
        num_heads = next(embed_dim // d for d in sorted(head_dims(), reverse=True) if embed_dim % d == 0)
    """
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
    """:func:`attention_varlen` with its row log-sum-exp: ``(O, LSE)``, O exactly ``attention_varlen``'s output
    and ``LSE[h, t] = log(sum_j exp(s_tj))`` over the keys j that packed query row t sees (the layout of
    flash-attn's varlen ``softmax_lse``).

    Documents are packed one after another: document i is rows ``cu_seqlens_q[i] .. cu_seqlens_q[i + 1]`` of q
    and rows ``cu_seqlens_k[i] .. cu_seqlens_k[i + 1]`` of k and v, and each is its own attention problem with
    :func:`attention`'s options (causal aligned bottom-right within the document, window, softcap, GQA).

    Args:
        q: (total_q, Hq, D) bfloat16 or float16 CUDA tensor, D a head dimension the build takes (64, 96, 128 or 256).
        k: (total_k, Hk, D) in q's dtype, Hk dividing Hq.
        v: shaped like k.
        cu_seqlens_q: int32 (documents + 1,) offsets into q's rows, starting at 0, on q's GPU or in host memory.
        cu_seqlens_k: int32 offsets into k's rows, as many as cu_seqlens_q.
        max_seqlen_q: Python int >= 0, for flash-attn compatibility (the kernels do not need it).
        max_seqlen_k: likewise.
        causal: per document, bottom-right aligned.
        scale: the factor of the scores; None means ``1 / sqrt(D)``.
        window: ``(left, right)`` sliding window within each document, -1 for an unlimited side.
        softcap: 0 for none, else a positive finite cap on the scaled scores.

    Returns:
        ``(O, LSE)``: O (total_q, Hq, D) in q's dtype; LSE (Hq, total_q) float32, -inf for a row that sees no key
        (rows past the last offset, rows of a document with no keys).

    Autograd:
        Differentiable in q, k and v from O and from LSE (a gradient reaching LSE costs a second backward call);
        the backward runs per document too.

    Raises:
        InputError: q, k or v is not 3-D, D is not a head dimension the build takes, Hk does not divide Hq, the
            offsets differ in count, host offsets do not start at 0, decrease or pass the tensors' rows, or a
            max_seqlen is not a Python int >= 0; ``causal`` not a bool, ``scale`` not finite (or a bool), ``window``
            not a pair of ints each -1 or >= 0, ``softcap`` negative or not finite.
        DTypeError: q, k and v are not all bfloat16 or all float16, or the offsets are not int32.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        cu = torch.tensor([0, 300, 1024, 1500], dtype=torch.int32, device="cuda")   # three documents
        q = torch.randn(1500, 16, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16)
        o, lse = tk_ops.attention_varlen_with_lse(q, k, v, cu, cu, 724, 724, causal=True)
        # o (1500, 16, 64) bfloat16, lse (16, 1500) float32
    """
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
    """Attention over packed documents, like flash-attn's ``flash_attn_varlen_func``: documents of different
    lengths stored one after another, each attending only within itself, with no padding.

    Document i is rows ``cu_seqlens_q[i] .. cu_seqlens_q[i + 1]`` of q and rows
    ``cu_seqlens_k[i] .. cu_seqlens_k[i + 1]`` of k and v. Each document is its own attention problem,
    ``softmax(scale * q_doc @ k_doc^T + mask) @ v_doc`` with the options of :func:`attention` (causal aligned
    bottom-right within it, window, softcap, GQA); work never spans two documents, and empty documents are
    allowed. Rows past the last offset see no key: their output is 0. Rows outside a document may hold anything:
    a NaN or inf in the next document's rows, or in unused rows past the last offset, reaches neither this
    document's output nor its gradients.

    Args:
        q: (total_q, Hq, D) bfloat16 or float16 CUDA tensor, D one of 64, 96, 128, 256 (the build's ``head_dims()``).
        k: (total_k, Hk, D) in q's dtype on q's device, Hk dividing Hq (query head h uses key/value head ``h // (Hq //
            Hk)``).
        v: shaped like k.
        cu_seqlens_q: int32 offsets, documents + 1 of them, starting at 0, on q's GPU or in host memory. Host offsets
            are checked (0 first, never decreasing, within the tensors) and copied to the GPU; GPU offsets are not
            read on the host (that would wait for the GPU): the kernels clamp them into the tensors (the first
            document starting at row 0), and a decreasing offset makes an empty document.
        cu_seqlens_k: int32 offsets into k and v, as many as cu_seqlens_q, with the same rules.
        max_seqlen_q: Python int >= 0, accepted for flash-attn compatibility; the kernels do not need it and the
            result does not depend on it.
        max_seqlen_k: likewise.
        causal: mask the keys after each query's diagonal, bottom-right aligned within the document.
        scale: the factor of the scores; None means ``1 / sqrt(D)``. Must be finite.
        window: ``(left, right)`` sliding window within each document, each -1 (unlimited) or >= 0.
        softcap: 0 for none, else a positive finite cap on the scaled scores.

    Returns:
        O (total_q, Hq, D) in q's dtype.

    Autograd:
        Differentiable in q, k and v; the backward runs per document too. Traces under
        ``torch.compile(fullgraph=True)`` and captures into CUDA graphs.

    Raises:
        InputError: q, k or v is not 3-D, D is not a head dimension the build takes, Hk does not divide Hq, the
            offsets are not 1-D or differ in count, host offsets do not start at 0, decrease or pass the tensors'
            rows, or a max_seqlen is not a Python int >= 0; ``causal`` not a bool, ``scale`` not finite (or a bool),
            ``window`` not a pair of ints each -1 or >= 0, ``softcap`` negative or not finite.
        DTypeError: q, k and v are not all bfloat16 or all float16, or the offsets are not int32.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        cu = torch.tensor([0, 300, 1024, 1500], dtype=torch.int32, device="cuda")   # three documents
        q = torch.randn(1500, 16, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        o = tk_ops.attention_varlen(q, k, v, cu, cu, 724, 724, causal=True)      # (1500, 16, 64)
        o.float().square().mean().backward()

    Kernel design: docs/attention.md.
    """
    return attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                                     window, softcap)[0]
