"""``tk_ops.nn.Attention``: fused QKV projection, tk_ops attention and the output projection."""
from __future__ import annotations

import math

import torch

from .. import _ext
from ..attention import attention, attention_varlen, head_dims
from ..errors import InputError
from .gemm import Linear


class Attention(torch.nn.Module):
    """Multi-head self-attention for a transformer block: ``x (B, N, E) -> (B, N, E)``, or packed documents
    ``x (total_tokens, E) -> (total_tokens, E)`` with ``cu_seqlens``.

    One fused projection ``qkv`` (a :class:`Linear`, E -> (H + 2 * Hkv) * D) makes the queries, keys and
    values, :func:`tk_ops.attention` (or :func:`tk_ops.attention_varlen` for packed documents) mixes them and
    ``proj`` (a :class:`Linear`, H * D -> E) projects back; all three run on tk_ops kernels, forward and backward.
    D = E / H is the head dimension (64, 96, 128 or 256: the ones the build's kernels take,
    :func:`tk_ops.attention.head_dims`; checking it loads the extension). ``num_kv_heads`` < ``num_heads`` gives
    grouped-query attention (1: multi-query); query head h uses key/value head h // (H / Hkv). ``causal`` masks
    future positions. The keyword-only options are those of :func:`tk_ops.attention`: ``window=(left, right)``,
    FlashAttention's sliding window, lets position i see the keys j with i - left <= j <= i + right (-1: no limit
    on that side; ``causal`` sets right = 0), and ``softcap > 0`` replaces each scaled score s with
    softcap * tanh(s / softcap) before the softmax (Gemma 2).

    The rows of ``qkv.weight`` are the H query heads, then the Hkv key heads, then the Hkv value heads, each
    D rows long; an equivalent PyTorch module computes::

        q, k, v = qkv(x).split([H * D, Hkv * D, Hkv * D], dim=-1)   # each viewed (B, N, heads, D)
        s = q @ k^T / sqrt(D) per head                  # key/value head h // (H / Hkv) for query head h
        s = softcap * tanh(s / softcap)                 # only if softcap > 0
        s[i, j] = -inf unless i - left <= j <= i + right   # a side of -1 is unlimited; causal: right = 0
        o = softmax(s, dim=-1) @ v
        y = proj(o.transpose(1, 2).reshape(B, N, H * D))

    which with the default window and softcap is ``F.scaled_dot_product_attention(q, k, v, is_causal=causal,
    enable_gqa=True)`` on the (B, heads, N, D) transposes.

    ``forward(x, cu_seqlens=None, max_seqlen=None)``: with ``cu_seqlens`` (int32, documents + 1 offsets starting
    at 0, on x's device or in host memory, as flash_attn_varlen_func takes them) x holds documents back to back,
    (total_tokens, E) or (1, total_tokens, E), and y has x's shape. Rows cu_seqlens[i] .. cu_seqlens[i + 1] are
    document i, which
    attends only within itself: y is the module applied to each document on its own (its causal mask and window
    measured inside it), concatenated; the work stays inside documents. Rows past the last offset see no
    key (their attention output is 0, so y there is ``proj``'s bias, or 0). ``max_seqlen``, a Python int (the
    longest document's length, as flash-attn takes it), is accepted for compatibility: the kernels do not need it
    and the results do not depend on it. None passes the number of tokens; the module never computes the exact
    value itself, since reading cu_seqlens on the host would wait for the GPU.

    Parameters are bfloat16 by default (the projections compute in bfloat16).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, causal: bool = False,
                 bias: bool = False, device=None, dtype=torch.bfloat16, *, window: tuple[int, int] = (-1, -1),
                 softcap: float = 0.0):
        super().__init__()
        name = "tk_ops.nn.Attention"
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for arg, value in (("embed_dim", embed_dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        if embed_dim % num_heads:
            raise InputError(f"{name}: embed_dim={embed_dim} must be a multiple of num_heads={num_heads}")
        head_dim = embed_dim // num_heads
        supported = _ext.if_built(head_dims)  # the head dimensions this build's kernels take
        if supported is not None and head_dim not in supported:
            *others, last = supported
            dims = f"{', '.join(map(str, others))} or {last}" if others else str(last)
            raise InputError(f"{name}: the head dimension embed_dim / num_heads = {head_dim} must be "
                             f"{dims}; choose num_heads = " + " or ".join(f"embed_dim / {d}" for d in supported))
        if num_heads % num_kv_heads:
            raise InputError(f"{name}: num_heads={num_heads} must be a multiple of "
                             f"num_kv_heads={num_kv_heads} (grouped-query attention)")
        if not isinstance(causal, bool):
            raise InputError(f"{name}: causal must be a bool, got {type(causal).__name__}")
        # The op checks its options at every call too; checked here as well, a bad configuration fails where the
        # model is built rather than at its first forward.
        if (not isinstance(window, (tuple, list)) or len(window) != 2
                or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window)):
            raise InputError(f"{name}: window must be a pair of ints (left, right), each -1 (unlimited) or a number "
                             f"of keys >= 0, got {window!r}")
        if (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
                or not 0 <= softcap < math.inf):
            raise InputError(f"{name}: softcap must be 0 (none) or a positive finite number, got {softcap!r}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim, self.causal = head_dim, causal
        self.window, self.softcap = (int(window[0]), int(window[1])), float(softcap)
        self.qkv = Linear(embed_dim, (num_heads + 2 * num_kv_heads) * head_dim, bias=bias, device=device, dtype=dtype)
        self.proj = Linear(num_heads * head_dim, embed_dim, bias=bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                max_seqlen: int | None = None) -> torch.Tensor:
        # The dense path pays one test for the packed one; max_seqlen without cu_seqlens goes there to be refused.
        if cu_seqlens is not None or max_seqlen is not None:
            return self._forward_packed(x, cu_seqlens, max_seqlen)
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise InputError(f"tk_ops.nn.Attention: input must be (batch, seq_len, {self.embed_dim}), "
                             f"got shape {tuple(x.shape)} (packed documents also take cu_seqlens)")
        b, n, _ = x.shape
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv(x).view(b, n, h + 2 * hkv, d)
        # (B, N, heads, D) slices viewed as (B, heads, N, D): the attention kernel reads them in place.
        q, k, v = (t.transpose(1, 2) for t in qkv.split([h, hkv, hkv], dim=2))
        o = attention(q, k, v, self.causal, None, self.window, self.softcap)
        return self.proj(o.transpose(1, 2).reshape(b, n, h * d))

    def _forward_packed(self, x: torch.Tensor, cu_seqlens, max_seqlen) -> torch.Tensor:
        # The offsets and max_seqlen are the op's to check (as cu_seqlens_q / _k and max_seqlen_q / _k); the shape
        # of x is the module's, which the reshapes below depend on.
        name, e = "tk_ops.nn.Attention", self.embed_dim
        if cu_seqlens is None:
            raise InputError(f"{name}: max_seqlen is only taken with cu_seqlens (packed documents)")
        if x.dim() not in (2, 3) or x.shape[-1] != e or (x.dim() == 3 and x.shape[0] != 1):
            raise InputError(f"{name}: with cu_seqlens the input must be packed documents, (total_tokens, {e}) or "
                             f"(1, total_tokens, {e}), got shape {tuple(x.shape)}")
        if max_seqlen is None:
            max_seqlen = x.shape[-2]  # no document is longer than the input (class docstring)
        total = x.shape[-2]
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        # (total, heads, D) slices of the projection, read in place by the kernels like the dense path's views.
        q, k, v = self.qkv(x).view(total, h + 2 * hkv, d).split([h, hkv, hkv], dim=1)
        o = attention_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, self.causal, None, self.window,
                             self.softcap)
        return self.proj(o.reshape(x.shape[:-1] + (h * d,)))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, causal={self.causal}, window={self.window}, softcap={self.softcap}")
