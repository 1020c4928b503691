"""Drop-in ``torch.nn`` modules whose compute runs on tk_ops kernels."""
from __future__ import annotations

import torch

from . import _ext
from .attention import attention, head_dims
from .errors import ExtensionNotBuiltError, FamilyNotBuiltError, InputError

__all__ = ["Linear", "Attention"]


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # One op, forward and backward in C++ (kernels/gemm/autograd.cpp), its checks included: a Python autograd
    # formula would cost more host time per call than the GEMM itself at small sizes, and dW comes out in the
    # weight's own layout, so nothing is copied between the GEMMs and the optimizer.
    try:
        return _ext.ops("gemm").linear(x, weight, bias)
    except Exception as e:
        if torch.compiler.is_compiling():
            raise
        raise _ext.op_error(e, "tk_ops.nn.Linear", "linear", (x, weight, bias)) from None


class Linear(torch.nn.Linear):
    """``nn.Linear`` computing ``x @ weight.T + bias`` with the tk_ops bf16 GEMM, forward and backward.

    Same constructor, parameters and state_dict as ``torch.nn.Linear``; parameters are created in bfloat16
    unless ``dtype`` says otherwise (the kernels compute in bfloat16, so the module must be bfloat16 when it
    runs). ``in_features`` and ``out_features`` must be multiples of 8: the products of the forward and the
    backward then meet TMA's 16-byte row rule for any number of tokens.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=torch.bfloat16):
        # The module's own promise (every token count works, forward and backward), checked once here; the op
        # checks each call's tensors.
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if v % 8:
                raise InputError(f"tk_ops.nn.Linear: {name}={v} must be a multiple of 8")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Linear":
        """A tk_ops Linear holding (a bfloat16 copy of) an existing nn.Linear's parameters."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  device=linear.weight.device)
        with torch.no_grad():
            new.weight.copy_(linear.weight)
            if linear.bias is not None:
                new.bias.copy_(linear.bias)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(x, self.weight, self.bias)


class Attention(torch.nn.Module):
    """Multi-head self-attention for a transformer block: ``x (B, N, E) -> (B, N, E)``.

    One fused projection ``qkv`` (a :class:`Linear`, E -> (H + 2 * Hkv) * D) makes the queries, keys and
    values, :func:`tk_ops.attention` mixes them and ``proj`` (a :class:`Linear`, H * D -> E) projects back; all
    three run on tk_ops kernels, forward and backward. D = E / H is the head dimension (64 or 128: the ones
    the build's kernels take, :func:`tk_ops.attention.head_dims`; checking it loads the extension).
    ``num_kv_heads`` < ``num_heads`` gives grouped-query attention (1: multi-query); query head h uses
    key/value head h // (H / Hkv). ``causal`` masks future positions.

    The rows of ``qkv.weight`` are the H query heads, then the Hkv key heads, then the Hkv value heads, each
    D rows long; an equivalent PyTorch module computes::

        q, k, v = qkv(x).split([H * D, Hkv * D, Hkv * D], dim=-1)   # each viewed (B, N, heads, D)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=causal, enable_gqa=True)
        y = proj(o.transpose(1, 2).reshape(B, N, H * D))

    Parameters are bfloat16 by default (the projections compute in bfloat16).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None, causal: bool = False,
                 bias: bool = False, device=None, dtype=torch.bfloat16):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"tk_ops.nn.Attention: {name} must be a positive int, got {value!r}")
        if embed_dim % num_heads:
            raise InputError(f"tk_ops.nn.Attention: embed_dim={embed_dim} must be a multiple of num_heads={num_heads}")
        head_dim = embed_dim // num_heads
        # The head dimensions come from the build; without one (a model made on a machine without the kernels, to
        # load or inspect weights) the attention op checks it at the first call instead.
        try:
            supported = head_dims()
        except (ExtensionNotBuiltError, FamilyNotBuiltError):
            supported = None
        if supported is not None and head_dim not in supported:
            dims = " or ".join(str(d) for d in supported)
            raise InputError(f"tk_ops.nn.Attention: the head dimension embed_dim / num_heads = {head_dim} must be "
                             f"{dims}; choose num_heads = " + " or ".join(f"embed_dim / {d}" for d in supported))
        if num_heads % num_kv_heads:
            raise InputError(f"tk_ops.nn.Attention: num_heads={num_heads} must be a multiple of "
                             f"num_kv_heads={num_kv_heads} (grouped-query attention)")
        if not isinstance(causal, bool):
            raise InputError(f"tk_ops.nn.Attention: causal must be a bool, got {type(causal).__name__}")
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim, self.causal = head_dim, causal
        self.qkv = Linear(embed_dim, (num_heads + 2 * num_kv_heads) * head_dim, bias=bias, device=device, dtype=dtype)
        self.proj = Linear(num_heads * head_dim, embed_dim, bias=bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise InputError(f"tk_ops.nn.Attention: input must be (batch, seq_len, {self.embed_dim}), "
                             f"got shape {tuple(x.shape)}")
        b, n, _ = x.shape
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = self.qkv(x).view(b, n, h + 2 * hkv, d)
        # (B, N, heads, D) slices viewed as (B, heads, N, D): the attention kernel reads them in place.
        q, k, v = (t.transpose(1, 2) for t in qkv.split([h, hkv, hkv], dim=2))
        o = attention(q, k, v, causal=self.causal)
        return self.proj(o.transpose(1, 2).reshape(b, n, h * d))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, causal={self.causal}")
