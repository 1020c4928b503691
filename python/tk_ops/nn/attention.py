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
    D = E / H is the head dimension (64, 96, 128 or 256: the ones the build's kernels take, which ``head_dims()``
    of the module ``tk_ops.attention`` lists; checking it loads the extension). ``num_kv_heads`` < ``num_heads`` gives
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

    Args:
        embed_dim: E, the model width; a multiple of num_heads.
        num_heads: H, the query heads; D = E / H must be a head dimension the build's kernels take.
        num_kv_heads: Hkv, the key/value heads, dividing H (None: H; 1: multi-query attention).
        causal: mask future positions (each position sees itself and the earlier ones).
        bias: give both projections a bias.
        device: where the parameters are created (None: torch's default device).
        dtype: the parameters' dtype, bfloat16 by default (the projections compute in bfloat16).
        window: keyword-only ``(left, right)``, each -1 (unlimited) or >= 0: position i sees the keys i - left <= j <=
            i + right (``causal`` sets right = 0).
        softcap: keyword-only; 0 for none, else a positive finite cap on the scaled scores.

    ``forward(x)`` returns y (B, N, E) for x (B, N, E), or y (total_tokens, E) for packed documents with
    ``cu_seqlens`` (:meth:`forward`), in the parameters' dtype.

    Autograd:
        Every parameter and x train, on the tk_ops kernels: the projections' GEMMs and the attention backward.

    Raises:
        InputError: at construction, a size is not a positive int, embed_dim is not a multiple of num_heads, the head
            dimension is not one the build takes (checked at construction where the extension is installed, else at
            the first forward), num_kv_heads does not divide num_heads, causal is not a bool, or window or softcap is
            out of range.

    Example::

        attn = tk_ops.nn.Attention(2048, 16, num_kv_heads=4, causal=True, device="cuda")   # D = 128, GQA
        x = torch.randn(8, 1024, 2048, device="cuda", dtype=torch.bfloat16)
        y = attn(x)                                                  # (8, 1024, 2048) bfloat16
        y.float().square().mean().backward()
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, causal: bool = False,
                 bias: bool = False, device: torch.device | str | None = None, dtype: torch.dtype = torch.bfloat16,
                 *, window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> None:
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
        """Self-attention of x: the qkv projection, :func:`tk_ops.attention` (or :func:`tk_ops.attention_varlen` for
        packed documents) with the module's options, and the output projection.

        Without ``cu_seqlens``, x is a batch of sequences of one length. With ``cu_seqlens``, x holds documents back
        to back: rows ``cu_seqlens[i] .. cu_seqlens[i + 1]`` are document i, which attends only within itself, so y
        is the module applied to each document on its own (its causal mask and window measured inside it),
        concatenated, and the work stays inside documents. Rows past the last offset see no key: their attention
        output is 0, so y there is ``proj``'s bias, or 0.

        Args:
            x: (B, N, embed_dim) CUDA tensor in the parameters' dtype (bfloat16); with ``cu_seqlens``, (total_tokens,
                embed_dim) or (1, total_tokens, embed_dim).
            cu_seqlens: None, or int32 offsets, documents + 1 of them starting at 0, on x's device or in host memory,
                as flash_attn_varlen_func takes them.
            max_seqlen: None, or a Python int, the longest document's length, accepted for flash-attn compatibility:
                the kernels do not need it and the result does not depend on it. None passes the number of tokens (the
                module never reads cu_seqlens on the host, which would wait for the GPU).

        Returns:
            y shaped like x: (B, N, embed_dim), or x's packed shape, in the parameters' dtype.

        Autograd:
            Differentiable in x and every parameter, through the tk_ops GEMM and attention backward kernels.

        Raises:
            InputError: x is not (B, N, embed_dim) (or a packed shape with ``cu_seqlens``), ``max_seqlen`` is given
                without ``cu_seqlens``, or the offsets break :func:`tk_ops.attention_varlen`'s rules.
            DTypeError: x is not the parameters' dtype (bfloat16), or cu_seqlens is not int32.
            DeviceMismatchError: x is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                gemm or attention family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            attn = tk_ops.nn.Attention(1024, 16, causal=True, device="cuda")      # D = 64
            y = attn(torch.randn(2, 512, 1024, device="cuda", dtype=torch.bfloat16))   # (2, 512, 1024)
            cu = torch.tensor([0, 100, 612, 1024], dtype=torch.int32, device="cuda")  # three documents
            y_packed = attn(torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16), cu_seqlens=cu)
        """
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
