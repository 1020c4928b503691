"""FlashAttention 2's functions on the tk_ops attention kernels: ``flash_attn_func``, ``flash_attn_varlen_func``,
``flash_attn_qkvpacked_func`` and ``flash_attn_kvpacked_func``, with flash-attn 2.8's signatures, defaults, layouts
and semantics (those of flash-attn >= 2.1), so that code written for ``flash_attn`` runs by changing its import:

    import tk_ops.flash_attn as flash_attn
    from tk_ops.flash_attn import flash_attn_func, flash_attn_varlen_func

Each function's help states its layouts, rules, result and errors. Background to the choices made there:

**No copies.** The kernels read strided views in place, so the (B, N, H, D) tensors flash-attn takes are handed
over as ``transpose(1, 2)`` views, and the output, written in q's memory order, comes back (B, N, H, D) contiguous.
Packed qkv and kv are split into views; their gradients are stacked back into the packed shape, the one copy
(``unbind``'s backward).

**The log-sum-exp of an empty row.** A row that sees no key has softmax_lse -inf here, the log-sum-exp of nothing,
which merges correctly with other partial results (``logaddexp`` leaves the other part unchanged); flash-attn 2
writes +inf, which would poison such a merge.

**S_dmask**, flash-attn's third result with ``return_attn_probs=True``, is the dropout pattern and unscaled
probabilities, for testing dropout. These kernels have no dropout, so it is None.

**deterministic=True** is refused only where a backward may run: the backward adds each key block's share of dQ
into an fp32 accumulator with TMA reduce-adds in whatever order the blocks finish, so dQ is not bit-reproducible,
and a silent acceptance would break the promise the flag asks for. The forward is deterministic (each task owns its
query rows), so the flag is accepted where no gradient is taken.

**No fallback**: a call the kernels cannot take raises the tk_ops error (flash-attn has no fallback either).
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
                    return_attn_probs: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, None]:
    """flash-attn 2.8's ``flash_attn_func`` on the tk_ops attention kernels: the same signature, defaults, layouts and
    semantics (flash-attn >= 2.1's), so code written for flash-attn runs by changing its import.

    Computes ``out = softmax(softmax_scale * q @ k^T + mask) @ v`` per batch and head, over (B, N, H, D) tensors.
    Causal masks and windows are aligned to the bottom-right corner: with ``window_size=(left, right)``, query i (of
    Nq) sees the keys j (of Nk) with ``i + Nk - Nq - left <= j <= i + Nk - Nq + right``, a negative side being
    unlimited, and ``causal=True`` sets right = 0 (query i sees the keys j <= i + Nk - Nq). ``softcap > 0`` replaces
    each scaled score s by ``softcap * tanh(s / softcap)`` before the softmax (the kernels' tanh is the hardware
    approximation, relative error about 2^-11); 0 or less turns it off. A query row that sees no key (possible when
    Nq > Nk, or under a window) outputs 0. Grouped-query and multi-query attention: query head h uses key/value head
    ``h // (Hq // Hk)``.

    The (B, N, H, D) tensors are read in place through transposed views and the output is written in q's memory
    order: no copy either way. There is no fallback: a call the kernels cannot take raises.

    Args:
        q: (B, Nq, Hq, D) bfloat16 or float16 CUDA tensor, D a head dimension the build takes
            (:func:`tk_ops.attention.head_dims`: 64, 96, 128 or 256 in a full build; flash-attn takes any multiple
            of 8 up to 256); any Nq.
        k: (B, Nk, Hk, D) in q's dtype on q's device, Hk dividing Hq; any Nk.
        v: shaped like k.
        dropout_p: the probability of dropping attention probabilities; only 0.0 is taken (the kernels have no
            dropout), so pass 0.0 in training too.
        softmax_scale: the factor of the scores ``q . k``; None means ``1 / sqrt(D)``. Must be finite.
        causal: mask the keys after each query's bottom-right aligned diagonal (the window's right side becomes 0).
        window_size: ``(left, right)``, the sliding window in keys around each query's diagonal; a negative side is
            unlimited, so ``(-1, -1)`` is no window.
        softcap: the cap of the scaled scores through tanh (Gemma 2) when > 0; 0 or less: no cap. Not +inf.
        alibi_slopes: must be None (the kernels add no ALiBi bias).
        deterministic: ask for a bit-reproducible backward. Accepted where no backward can run (under
            ``torch.no_grad()``, or with no input requiring grad), since the forward is deterministic; refused
            otherwise, since the backward adds dQ's parts by atomic reduce-adds in the order key blocks finish.
        return_attn_probs: also return the softmax log-sum-exp and None, as flash-attn does (despite the name, no
            probabilities: see Returns).

    Returns:
        ``out`` (B, Nq, Hq, D) in q's dtype, laid out in q's memory order (contiguous for a contiguous q). With
        ``return_attn_probs=True`` the tuple ``(out, softmax_lse, None)``: softmax_lse (B, Hq, Nq) float32 is the
        natural-log sum of exp(score) over the keys each query sees (scaled and capped scores), as flash-attn
        returns it, except for a row that sees no key: -inf here (the log-sum-exp of nothing, which merges
        correctly with other partial results), +inf in flash-attn 2. The third element, flash-attn's S_dmask (the
        dropout pattern), is None: there is no dropout.

    Autograd:
        Differentiable in q, k and v (those that require grad) through the tk_ops backward kernel, which recomputes
        the probabilities from the log-sum-exp; dK and dV are summed over each group's query heads, and a row that
        sees no key has a zero query gradient. softmax_lse is differentiable too (a loss that uses it costs a
        second backward call), where flash-attn ignores a gradient that reaches it.

    Raises:
        InputError: ``dropout_p > 0``, ``alibi_slopes`` given, or ``deterministic=True`` with a backward to come,
            each named before anything runs; q, k or v not 4-D; D not a head dimension the build takes; k and v of
            different shapes, k's batch or head dimension other than q's, or Hk not dividing Hq; ``softmax_scale``
            not finite, or ``softcap`` +inf.
        DTypeError: q, k and v are not all bfloat16 or all float16.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (H100 / H200).

    Example::

        q = torch.randn(2, 1024, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 1024, 4, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(2, 1024, 4, 128, device="cuda", dtype=torch.bfloat16)
        out = flash_attn_func(q, k, v, causal=True, window_size=(256, 0))   # (2, 1024, 16, 128)
        out.sum().backward()
        out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)   # lse (2, 16, 1024) float32
    """
    return _dense("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv: torch.Tensor, dropout_p: float = 0.0, softmax_scale: float | None = None,
                              causal: bool = False, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                              alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                              return_attn_probs: bool = False
                              ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, None]:
    """flash-attn 2.8's ``flash_attn_qkvpacked_func`` on the tk_ops attention kernels: :func:`flash_attn_func` on
    queries, keys and values stacked in one tensor qkv (B, N, 3, H, D), as a fused QKV projection gives them, with
    flash-attn's signature, defaults and semantics.

    Computes ``out = softmax(softmax_scale * q @ k^T + mask) @ v`` per batch and head, with q, k and v the three
    slices of qkv's dimension 2 (as many key/value heads as query heads, Nq = Nk = N). With
    ``window_size=(left, right)`` query i sees the keys j with ``i - left <= j <= i + right``, a negative side
    being unlimited, and ``causal=True`` sets right = 0 (query i sees the keys j <= i); every query sees at least
    its own key. ``softcap > 0`` replaces each scaled score s by ``softcap * tanh(s / softcap)`` before the softmax
    (the kernels' tanh is the hardware approximation, relative error about 2^-11); 0 or less turns it off.
    The three slices are read in place as views (no copy); their gradients are stacked into one tensor.

    Args:
        qkv: (B, N, 3, H, D) bfloat16 or float16 CUDA tensor, q, k and v stacked on dimension 2; D a head
            dimension the build takes (:func:`tk_ops.attention.head_dims`: 64, 96, 128 or 256 in a full build).
        dropout_p: the probability of dropping attention probabilities; only 0.0 is taken (the kernels have no
            dropout).
        softmax_scale: the factor of the scores ``q . k``; None means ``1 / sqrt(D)``. Must be finite.
        causal: query i sees the keys j <= i (the window's right side becomes 0).
        window_size: ``(left, right)``, the sliding window in keys around each query's diagonal; a negative side is
            unlimited, so ``(-1, -1)`` is no window.
        softcap: the cap of the scaled scores through tanh (Gemma 2) when > 0; 0 or less: no cap. Not +inf.
        alibi_slopes: must be None (the kernels add no ALiBi bias).
        deterministic: ask for a bit-reproducible backward. Accepted where no backward can run (under
            ``torch.no_grad()``, or when qkv does not require grad), since the forward is deterministic; refused
            otherwise, since the backward adds dQ's parts by atomic reduce-adds in the order key blocks finish.
        return_attn_probs: also return the softmax log-sum-exp and None, as flash-attn does (despite the name, no
            probabilities: see Returns).

    Returns:
        ``out`` (B, N, H, D) in qkv's dtype, contiguous. With ``return_attn_probs=True`` the tuple
        ``(out, softmax_lse, None)``: softmax_lse (B, H, N) float32 is the natural-log sum of exp(score) over the
        keys each query sees (scaled and capped scores), as flash-attn returns it, except for a row that sees no
        key: -inf here (the log-sum-exp of nothing, which merges correctly with other partial results), +inf in
        flash-attn 2. The third element, flash-attn's S_dmask (the dropout pattern), is None: there is no dropout.

    Autograd:
        Differentiable in qkv through the tk_ops backward kernel: its gradient comes back as one (B, N, 3, H, D)
        tensor (dQ, dK and dV stacked, one copy). softmax_lse is differentiable too (a loss that uses it costs a
        second backward call), where flash-attn ignores a gradient that reaches it.

    Raises:
        InputError: qkv not (B, N, 3, H, D); ``dropout_p > 0``, ``alibi_slopes`` given, or ``deterministic=True``
            with a backward to come, each named before anything runs; D not a head dimension the build takes;
            ``softmax_scale`` not finite, or ``softcap`` +inf.
        DTypeError: qkv is not bfloat16 or float16.
        DeviceMismatchError: qkv is on the CPU.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (H100 / H200).

    Example::

        qkv = torch.randn(2, 1024, 3, 16, 64, device="cuda", dtype=torch.float16, requires_grad=True)
        out = flash_attn_qkvpacked_func(qkv, causal=True)   # (2, 1024, 16, 64)
        out.sum().backward()                                # qkv.grad: (2, 1024, 3, 16, 64)
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
                             return_attn_probs: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, None]:
    """flash-attn 2.8's ``flash_attn_kvpacked_func`` on the tk_ops attention kernels: :func:`flash_attn_func` on q
    and keys and values stacked in one tensor kv (B, Nk, 2, Hk, D), as a fused KV projection or a KV cache holds
    them, with flash-attn's signature, defaults and semantics.

    Computes ``out = softmax(softmax_scale * q @ k^T + mask) @ v`` per batch and head, with k and v the two slices
    of kv's dimension 2. Causal masks and windows are aligned to the bottom-right corner: with
    ``window_size=(left, right)``, query i (of Nq) sees the keys j (of Nk) with
    ``i + Nk - Nq - left <= j <= i + Nk - Nq + right``, a negative side being unlimited, and ``causal=True`` sets
    right = 0 (query i sees the keys j <= i + Nk - Nq: a single query of a decoding step sees every key).
    ``softcap > 0`` replaces each scaled score s by ``softcap * tanh(s / softcap)`` before the softmax (the kernels'
    tanh is the hardware approximation, relative error about 2^-11); 0 or less turns it off. A query row that sees
    no key (possible when Nq > Nk, or under a window) outputs 0. Grouped-query and multi-query attention: query
    head h uses key/value head ``h // (Hq // Hk)``. The slices are read in place as views (no copy); their
    gradients are stacked into one tensor.

    Args:
        q: (B, Nq, Hq, D) bfloat16 or float16 CUDA tensor, D a head dimension the build takes
            (:func:`tk_ops.attention.head_dims`: 64, 96, 128 or 256 in a full build); any Nq.
        kv: (B, Nk, 2, Hk, D) in q's dtype on q's device, keys and values stacked on dimension 2, Hk dividing Hq;
            any Nk.
        dropout_p: the probability of dropping attention probabilities; only 0.0 is taken (the kernels have no
            dropout).
        softmax_scale: the factor of the scores ``q . k``; None means ``1 / sqrt(D)``. Must be finite.
        causal: mask the keys after each query's bottom-right aligned diagonal (the window's right side becomes 0).
        window_size: ``(left, right)``, the sliding window in keys around each query's diagonal; a negative side is
            unlimited, so ``(-1, -1)`` is no window.
        softcap: the cap of the scaled scores through tanh (Gemma 2) when > 0; 0 or less: no cap. Not +inf.
        alibi_slopes: must be None (the kernels add no ALiBi bias).
        deterministic: ask for a bit-reproducible backward. Accepted where no backward can run (under
            ``torch.no_grad()``, or with neither q nor kv requiring grad), since the forward is deterministic;
            refused otherwise, since the backward adds dQ's parts by atomic reduce-adds in the order key blocks
            finish.
        return_attn_probs: also return the softmax log-sum-exp and None, as flash-attn does (despite the name, no
            probabilities: see Returns).

    Returns:
        ``out`` (B, Nq, Hq, D) in q's dtype, laid out in q's memory order (contiguous for a contiguous q). With
        ``return_attn_probs=True`` the tuple ``(out, softmax_lse, None)``: softmax_lse (B, Hq, Nq) float32 is the
        natural-log sum of exp(score) over the keys each query sees (scaled and capped scores), as flash-attn
        returns it, except for a row that sees no key: -inf here (the log-sum-exp of nothing, which merges
        correctly with other partial results), +inf in flash-attn 2. The third element, flash-attn's S_dmask (the
        dropout pattern), is None: there is no dropout.

    Autograd:
        Differentiable in q and kv through the tk_ops backward kernel; kv's gradient comes back as one
        (B, Nk, 2, Hk, D) tensor (dK and dV, each summed over its group's query heads, stacked: one copy).
        softmax_lse is differentiable too (a loss that uses it costs a second backward call), where flash-attn
        ignores a gradient that reaches it.

    Raises:
        InputError: kv not (B, Nk, 2, Hk, D) or q not 4-D; ``dropout_p > 0``, ``alibi_slopes`` given, or
            ``deterministic=True`` with a backward to come, each named before anything runs; D not a head dimension
            the build takes; kv's batch, head count or D not fitting q's (Hk must divide Hq); ``softmax_scale`` not
            finite, or ``softcap`` +inf.
        DTypeError: q and kv are not both bfloat16 or both float16.
        DeviceMismatchError: a tensor is on the CPU, or q and kv are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (H100 / H200).

    Example::

        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)            # one decoding step
        kv = torch.randn(1, 4096, 2, 8, 128, device="cuda", dtype=torch.bfloat16)
        out = flash_attn_kvpacked_func(q, kv, causal=True)   # (1, 1, 32, 128): the query is the last position
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
                           return_attn_probs: bool = False, block_table: torch.Tensor | None = None
                           ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, None]:
    """flash-attn 2.8's ``flash_attn_varlen_func`` on the tk_ops attention kernels (:func:`tk_ops.attention_varlen`):
    attention over documents of different lengths packed one after another with no padding, each attending only
    within itself, with flash-attn's signature, defaults and semantics.

    Document i is rows ``cu_seqlens_q[i] .. cu_seqlens_q[i + 1]`` of q and rows
    ``cu_seqlens_k[i] .. cu_seqlens_k[i + 1]`` of k and v, and is its own attention problem:
    ``softmax(softmax_scale * q_doc @ k_doc^T + mask) @ v_doc`` with Nq and Nk the document's lengths. Causal masks
    and windows are aligned to the bottom-right corner of each document: with ``window_size=(left, right)``, its
    query i sees its keys j with ``i + Nk - Nq - left <= j <= i + Nk - Nq + right``, a negative side being
    unlimited, and ``causal=True`` sets right = 0. ``softcap > 0`` replaces each scaled score s by
    ``softcap * tanh(s / softcap)`` before the softmax (the kernels' tanh is the hardware approximation, relative
    error about 2^-11); 0 or less turns it off. Empty documents are allowed. A query row that sees no key outputs
    0, and so do the rows past the last offset. Work never spans two documents: a NaN or inf in another document's
    rows, or in unused rows past the last offset, reaches neither this document's output nor its gradients.
    Grouped-query and multi-query attention: query head h uses key/value head ``h // (Hq // Hk)``.

    Args:
        q: (total_q, Hq, D) bfloat16 or float16 CUDA tensor, D a head dimension the build takes
            (:func:`tk_ops.attention.head_dims`: 64, 96, 128 or 256 in a full build; flash-attn takes any multiple
            of 8 up to 256).
        k: (total_k, Hk, D) in q's dtype on q's device, Hk dividing Hq.
        v: shaped like k.
        cu_seqlens_q: int32 offsets into q's rows, documents + 1 of them starting at 0, on q's GPU or in host
            memory. Host offsets are checked (0 first, never decreasing, within the tensor) and copied to the GPU;
            GPU offsets are not read on the host (that would wait for the GPU): the kernels clamp them into the
            tensor, the first document starting at row 0, and a decreasing offset makes an empty document.
        cu_seqlens_k: int32 offsets into k's and v's rows, as many as cu_seqlens_q, with the same rules.
        max_seqlen_q: the longest query document, an integer >= 0 (any type ``operator.index`` takes, a NumPy
            integer say), taken for compatibility: the kernels do not need it and the result does not depend on it.
        max_seqlen_k: likewise for the key documents.
        dropout_p: the probability of dropping attention probabilities; only 0.0 is taken (the kernels have no
            dropout).
        softmax_scale: the factor of the scores ``q . k``; None means ``1 / sqrt(D)``. Must be finite.
        causal: mask the keys after each query's diagonal, bottom-right aligned within its document (the window's
            right side becomes 0).
        window_size: ``(left, right)``, the sliding window in keys around each query's diagonal within its
            document; a negative side is unlimited, so ``(-1, -1)`` is no window.
        softcap: the cap of the scaled scores through tanh (Gemma 2) when > 0; 0 or less: no cap. Not +inf.
        alibi_slopes: must be None (the kernels add no ALiBi bias).
        deterministic: ask for a bit-reproducible backward. Accepted where no backward can run (under
            ``torch.no_grad()``, or with no input requiring grad), since the forward is deterministic; refused
            otherwise, since the backward adds dQ's parts by atomic reduce-adds in the order key blocks finish.
        return_attn_probs: also return the softmax log-sum-exp and None, as flash-attn does (despite the name, no
            probabilities: see Returns).
        block_table: must be None (no paged KV cache).

    Returns:
        ``out`` (total_q, Hq, D) in q's dtype. With ``return_attn_probs=True`` the tuple
        ``(out, softmax_lse, None)``: softmax_lse (Hq, total_q) float32 is the natural-log sum of exp(score) over
        the keys each packed query row sees (scaled and capped scores), flash-attn's varlen layout, except for a
        row that sees no key (rows past the last offset included): -inf here (the log-sum-exp of nothing, which
        merges correctly with other partial results), +inf in flash-attn 2. The third element, flash-attn's
        S_dmask (the dropout pattern), is None: there is no dropout.

    Autograd:
        Differentiable in q, k and v (those that require grad) through the tk_ops backward kernel, which runs per
        document too; dK and dV are summed over each group's query heads. softmax_lse is differentiable too (a loss
        that uses it costs a second backward call), where flash-attn ignores a gradient that reaches it.

    Raises:
        InputError: ``block_table`` given, ``dropout_p > 0``, ``alibi_slopes`` given, or ``deterministic=True``
            with a backward to come, each named before anything runs; q, k or v not 3-D; D not a head dimension the
            build takes; k and v of different shapes or k's D other than q's; Hk not dividing Hq; offsets not 1-D
            or differing in count; host offsets that do not start at 0, decrease or pass the tensors' rows; a
            max_seqlen below 0; ``softmax_scale`` not finite, or ``softcap`` +inf. A max_seqlen that is not an
            integer raises Python's TypeError (``operator.index``).
        DTypeError: q, k and v are not all bfloat16 or all float16, or the offsets are not int32.
        DeviceMismatchError: a tensor is on the CPU, the tensors are on different GPUs, or offsets are on a GPU
            other than q's.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            attention family, or the GPU is not sm_90 (H100 / H200).

    Example::

        cu = torch.tensor([0, 300, 1024, 1500], dtype=torch.int32, device="cuda")   # three documents
        q = torch.randn(1500, 16, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1500, 4, 64, device="cuda", dtype=torch.bfloat16)
        out = flash_attn_varlen_func(q, k, v, cu, cu, 724, 724, causal=True)   # (1500, 16, 64)
        out.sum().backward()
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
