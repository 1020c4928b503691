"""Drop-in ``torch.nn`` modules whose compute runs on tk_ops kernels."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import _ext
from .attention import attention, attention_varlen, head_dims
from .based import based, based_step, value_dims
from .errors import DeviceMismatchError, DTypeError, ExtensionNotBuiltError, FamilyNotBuiltError, InputError
from .fftconv import fftconv
from .mamba2 import mamba2_chunk_scan, mamba2_step

__all__ = ["Linear", "Attention", "BasedLinearAttention", "Mamba2", "LongConv"]


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
        # The head dimensions come from the build; without one (a model made on a machine without the kernels, to
        # load or inspect weights) the attention op checks it at the first call instead.
        try:
            supported = head_dims()
        except (ExtensionNotBuiltError, FamilyNotBuiltError):
            supported = None
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
        # The op checks the offsets too, but its messages name its own arguments (cu_seqlens_q, max_seqlen_k); these
        # speak of the module's, and fail before the projection runs.
        name, e = "tk_ops.nn.Attention", self.embed_dim
        if cu_seqlens is None:
            raise InputError(f"{name}: max_seqlen is only taken with cu_seqlens (packed documents)")
        if not isinstance(cu_seqlens, torch.Tensor):
            raise DTypeError(f"{name}: cu_seqlens must be an int32 tensor of document offsets, got "
                             f"{type(cu_seqlens).__name__}")
        if cu_seqlens.dtype != torch.int32:
            raise DTypeError(f"{name}: cu_seqlens must be int32 (torch.int32), got {cu_seqlens.dtype}")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
            raise InputError(f"{name}: cu_seqlens must be 1-D with (documents + 1) offsets, got shape "
                             f"{tuple(cu_seqlens.shape)}")
        if max_seqlen is None:
            max_seqlen = x.shape[-2]  # no document is longer than the input (class docstring)
        elif isinstance(max_seqlen, bool) or not isinstance(max_seqlen, int) or max_seqlen < 0:
            raise InputError(f"{name}: max_seqlen must be None or a Python int >= 0 (the longest document), got "
                             f"{max_seqlen!r}")
        if x.dim() not in (2, 3) or x.shape[-1] != e or (x.dim() == 3 and x.shape[0] != 1):
            raise InputError(f"{name}: with cu_seqlens the input must be packed documents, (total_tokens, {e}) or "
                             f"(1, total_tokens, {e}), got shape {tuple(x.shape)}")
        if cu_seqlens.device != x.device and cu_seqlens.device.type != "cpu":
            raise DeviceMismatchError(f"{name}: cu_seqlens must be on the input's device {x.device} or in host "
                                      f"memory, got {cu_seqlens.device}")
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


class BasedLinearAttention(torch.nn.Module):
    """The Based linear-attention mixer: ``x (B, N, d_model) -> (B, N, d_model)``, causal, with a recurrent state for
    chunked prefill and decoding.

    One fused projection ``qkv`` (a :class:`Linear`, d_model -> 2 * H * feature_dim + d_model) makes the queries and
    keys (feature_dim = 16 per head, the Taylor feature map's input) and the values (Dv = d_model / H per head),
    :func:`tk_ops.based` mixes them and ``proj`` (a :class:`Linear`, d_model -> d_model) projects back; all three run
    on tk_ops kernels, forward and backward. Dv must be a multiple of 16 up to 128 (:func:`tk_ops.based.value_dims`;
    checking it loads the extension). The rows of ``qkv.weight`` are the H query heads, the H key heads (feature_dim
    rows each), then the H value heads (Dv rows each); an equivalent PyTorch module computes::

        q, k, v = qkv(x).split([H * 16, H * 16, d_model], dim=-1)     # each viewed (B, N, H, 16 or Dv)
        s = q_i . k_j / sqrt(16) per head;  w = 1 + s + s^2 / 2 for j <= i, 0 after
        o_i = sum_j w_ij v_j / (sum_j w_ij + eps)                       # without the division if not normalize
        y = proj(o)                                                     # heads concatenated

    which is the Based model's linear attention (hazyresearch/based, its Taylor feature map gives the same w). Its
    checkpoints load directly: ``load_state_dict`` also accepts its parameter names (``proj_q``, ``proj_k``,
    ``proj_v``, ``out_proj`` or ``proj_o``, with as many key/value heads as query heads) and fuses them.

    ``forward(x, state=None, output_final_state=False)`` continues from ``state`` (as returned, or from
    :meth:`init_state`) and returns ``(y, state)`` when ``output_final_state``: chunked prefill. ``step(x_t, state)``
    decodes one token per sequence, x_t (B, d_model) or (B, 1, d_model), updating ``state`` in place. The state is
    :func:`tk_ops.based`'s: (kv (B, H, Dv, 273), k_sum (B, H, 273)), float32. Parameters are bfloat16 unless
    ``dtype`` says otherwise (the projections compute in bfloat16).
    """

    def __init__(self, d_model: int, num_heads: int, feature_dim: int = 16, normalize: bool = True, eps: float = 1e-6,
                 bias: bool = False, device=None, dtype=None):
        super().__init__()
        name = "tk_ops.nn.BasedLinearAttention"
        for arg, value in (("d_model", d_model), ("num_heads", num_heads), ("feature_dim", feature_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        if feature_dim != 16:
            raise InputError(f"{name}: feature_dim must be 16 (the kernels build the Taylor feature map's 273 "
                             f"features for 16), got {feature_dim}")
        if d_model % num_heads:
            raise InputError(f"{name}: d_model={d_model} must be a multiple of num_heads={num_heads}")
        value_dim = d_model // num_heads
        # The value dimensions come from the build; without one (a model made on a machine without the kernels, to
        # load or inspect weights) the op checks it at the first call instead.
        try:
            supported = value_dims()
        except (ExtensionNotBuiltError, FamilyNotBuiltError):
            supported = None
        if supported is not None and value_dim not in supported:
            raise InputError(f"{name}: the value dimension d_model / num_heads = {value_dim} must be a multiple of 16 "
                             f"from {min(supported)} to {max(supported)}; choose num_heads so that it is")
        if not isinstance(normalize, bool):
            raise InputError(f"{name}: normalize must be a bool, got {type(normalize).__name__}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
            raise InputError(f"{name}: eps must be a finite number >= 0, got {eps!r}")
        dtype = torch.bfloat16 if dtype is None else dtype
        self.d_model, self.num_heads, self.feature_dim, self.value_dim = d_model, num_heads, feature_dim, value_dim
        self.normalize, self.eps = normalize, float(eps)
        self.qkv = Linear(d_model, 2 * num_heads * feature_dim + d_model, bias=bias, device=device, dtype=dtype)
        self.proj = Linear(d_model, d_model, bias=bias, device=device, dtype=dtype)
        self.register_load_state_dict_pre_hook(_fuse_based_projections)

    def _split(self, y: torch.Tensor):
        """q, k, v as (..., H, 16 / Dv) views of the fused projection's output (no copies)."""
        h, f = self.num_heads, self.feature_dim
        q, k, v = y.split([h * f, h * f, self.d_model], dim=-1)
        return q.unflatten(-1, (h, f)), k.unflatten(-1, (h, f)), v.unflatten(-1, (h, self.value_dim))

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None,
                output_final_state: bool = False):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise InputError(f"tk_ops.nn.BasedLinearAttention: input must be (batch, seq_len, {self.d_model}), "
                             f"got shape {tuple(x.shape)}")
        b, n, _ = x.shape
        # (B, N, H, D) slices viewed as (B, H, N, D): the kernel reads them in place, and o comes back in the same
        # (B, N, H, Dv) order, so the reshape below is a view too.
        q, k, v = (t.transpose(1, 2) for t in self._split(self.qkv(x)))
        out = based(q, k, v, None, self.normalize, self.eps, initial_state=state,
                    output_final_state=output_final_state)
        o, final = out if output_final_state else (out, None)
        y = self.proj(o.transpose(1, 2).reshape(b, n, self.d_model))
        return (y, final) if output_final_state else y

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One decoding step: x (B, d_model) or (B, 1, d_model), one new token per sequence; ``state`` (from
        :meth:`init_state` or ``forward(..., output_final_state=True)``) is updated in place. Returns y shaped like
        x."""
        if x.dim() not in (2, 3) or x.shape[-1] != self.d_model or (x.dim() == 3 and x.shape[1] != 1):
            raise InputError(f"tk_ops.nn.BasedLinearAttention.step: input must be (batch, {self.d_model}) or "
                             f"(batch, 1, {self.d_model}), one token per sequence, got shape {tuple(x.shape)}")
        x2 = x.reshape(x.shape[0], self.d_model)
        q, k, v = self._split(self.qkv(x2))  # (B, H, 16 / Dv) strided views: the step kernel reads any strides
        o = based_step(q, k, v, state, None, self.normalize, self.eps)
        return self.proj(o.reshape(x2.shape)).view(x.shape)

    def init_state(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """An empty state for ``batch`` sequences: zeros kv (batch, H, Dv, 273) and k_sum (batch, H, 273), float32,
        on the module's device unless ``device`` is given."""
        device = self.proj.weight.device if device is None else device
        features = 1 + self.feature_dim + self.feature_dim ** 2
        return (torch.zeros(batch, self.num_heads, self.value_dim, features, device=device, dtype=torch.float32),
                torch.zeros(batch, self.num_heads, features, device=device, dtype=torch.float32))

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, feature_dim={self.feature_dim}, "
                f"value_dim={self.value_dim}, normalize={self.normalize}, eps={self.eps}")


def _fuse_based_projections(module, state_dict, prefix, *args):
    """load_state_dict hook: the Based model's separate q, k, v projections (proj_q, proj_k, proj_v) become the rows
    of qkv, and its output projection (out_proj or proj_o) becomes proj."""
    for suffix in ("weight", "bias"):
        parts = [prefix + f"proj_{x}.{suffix}" for x in "qkv"]
        if all(p in state_dict for p in parts):
            state_dict[prefix + f"qkv.{suffix}"] = torch.cat([state_dict.pop(p) for p in parts])
        for out_name in ("out_proj", "proj_o"):
            if prefix + f"{out_name}.{suffix}" in state_dict:
                state_dict[prefix + f"proj.{suffix}"] = state_dict.pop(prefix + f"{out_name}.{suffix}")


class Mamba2(torch.nn.Module):
    """The Mamba-2 mixer: ``u (B, L, d_model) -> (B, L, d_model)``, causal, with a cache for chunked prefill and
    decoding; mamba_ssm's ``Mamba2`` module (single process, ``d_ssm`` = the whole inner width), with its parameter
    names, shapes and defaults, so that its state_dict loads: ``in_proj.weight``, ``conv1d.weight`` / ``.bias``,
    ``dt_bias``, ``A_log``, ``D``, ``norm.weight``, ``out_proj.weight`` (and the projections' biases when ``bias``).

    With d_inner = expand * d_model, H = d_inner / headdim heads and G = ngroups::

        z, xBC, dt = in_proj(u).split([d_inner, d_inner + 2 G d_state, H])
        x, B, C    = silu(causal depthwise conv1d(xBC)).split([d_inner, G d_state, G d_state])
        y = tk_ops.mamba2_chunk_scan(x, dt, -exp(A_log), B, C, chunk_size, D=D, dt_bias=dt_bias, dt_softplus=True,
                                     dt_limit=dt_limit, z=None if rmsnorm else z)
        y = norm(y, z)     # gated RMSNorm over groups of d_inner / G: rms_norm(y * silu(z)) * weight
                           # (norm_before_gate: rms_norm(y) * weight * silu(z))
        out = out_proj(y)

    ``in_proj`` and ``out_proj`` are :class:`Linear` (tk_ops GEMMs, bfloat16 unless ``dtype`` says otherwise; their
    widths must be multiples of 8, so H must be when d_inner + 2 G d_state is); the convolution and the gated RMSNorm
    are PyTorch, in float32; ``conv1d``, ``dt_bias``, ``A_log``, ``D`` and ``norm.weight`` are float32 parameters
    whatever ``dtype`` is (mamba_ssm's checkpoints in other dtypes load into them). The scan's rules apply: headdim
    and d_state 64 or 128, chunk_size 64, 128 or 256 (checked at the first call).

    Every parameter trains: the scan's backward, the GEMMs' and PyTorch's for the rest.

    Decoding: ``cache = init_cache(batch)``; ``forward(u, cache)`` continues from the cache and leaves it at the
    prompt's end (a chunked prefill: call it again with the next piece); ``step(u_t, cache)`` then decodes one token per
    sequence, u_t (B, d_model) or (B, 1, d_model), with :func:`tk_ops.mamba2_step`. The cache is ``(conv_state,
    ssm_state)``, mamba_ssm's layout: conv_state (B, d_inner + 2 G d_state, d_conv) holds the last d_conv inputs of the
    convolution, ssm_state (B, H, headdim, d_state); both float32, updated in place. ``step`` runs without gradients.
    As in mamba_ssm, ``step`` applies no ``dt_limit`` clamp (equal to ``forward`` with the default limits, where the
    softplus already makes dt positive).
    """

    # The chunked scan forward runs: mamba2_chunk_scan's signature (a PyTorch twin of the module may swap in its own).
    scan = staticmethod(mamba2_chunk_scan)

    def __init__(self, d_model: int, d_state: int = 128, d_conv: int = 4, expand: int = 2, headdim: int = 64,
                 ngroups: int = 1, chunk_size: int = 256, A_init_range: tuple[float, float] = (1.0, 16.0),
                 D_has_hdim: bool = False, rmsnorm: bool = True, norm_before_gate: bool = False,
                 dt_min: float = 0.001, dt_max: float = 0.1, dt_init_floor: float = 1e-4,
                 dt_limit: tuple[float, float] = (0.0, float("inf")), bias: bool = False, conv_bias: bool = True,
                 conv_init: float | None = None, layer_idx: int | None = None, device=None, dtype=None):
        super().__init__()
        name = "tk_ops.nn.Mamba2"
        for arg, value in (("d_model", d_model), ("d_state", d_state), ("d_conv", d_conv), ("expand", expand),
                           ("headdim", headdim), ("ngroups", ngroups), ("chunk_size", chunk_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        d_inner = expand * d_model
        if d_inner % headdim:
            raise InputError(f"{name}: expand * d_model = {d_inner} must be a multiple of headdim = {headdim}")
        nheads = d_inner // headdim
        if nheads % ngroups:
            raise InputError(f"{name}: ngroups = {ngroups} must divide the number of heads expand * d_model / headdim "
                             f"= {nheads}")
        if not (0 < A_init_range[0] <= A_init_range[1]):
            raise InputError(f"{name}: A_init_range must be (low, high) with 0 < low <= high, got {A_init_range!r}")
        for flag, value in (("D_has_hdim", D_has_hdim), ("rmsnorm", rmsnorm), ("norm_before_gate", norm_before_gate),
                            ("bias", bias), ("conv_bias", conv_bias)):
            if not isinstance(value, bool):
                raise InputError(f"{name}: {flag} must be a bool, got {type(value).__name__}")
        dtype = torch.bfloat16 if dtype is None else dtype
        f32 = dict(device=device, dtype=torch.float32)
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.headdim, self.ngroups, self.chunk_size, self.layer_idx = headdim, ngroups, chunk_size, layer_idx
        self.d_inner, self.nheads = d_inner, nheads
        self.D_has_hdim, self.rmsnorm, self.norm_before_gate = D_has_hdim, rmsnorm, norm_before_gate
        self.dt_limit = (float(dt_limit[0]), float(dt_limit[1]))
        self.conv_dim = d_inner + 2 * ngroups * d_state

        self.in_proj = Linear(d_model, 2 * d_inner + 2 * ngroups * d_state + nheads, bias=bias, device=device,
                              dtype=dtype)
        self.conv1d = torch.nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, padding=d_conv - 1,
                                      bias=conv_bias, **f32)
        if conv_init is not None:
            torch.nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        # mamba_ssm's initialisation: dt log-uniform in [dt_min, dt_max] (floored), stored as softplus^-1(dt); A
        # uniform in A_init_range, stored as its log; D one.
        dt = torch.exp(torch.rand(nheads, **f32) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=dt_init_floor)
        self.dt_bias = torch.nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = torch.nn.Parameter(torch.empty(nheads, **f32).uniform_(*A_init_range).log())
        self.D = torch.nn.Parameter(torch.ones(d_inner if D_has_hdim else nheads, **f32))
        for p in (self.dt_bias, self.A_log, self.D):
            p._no_weight_decay = True
        if rmsnorm:
            self.norm = _GatedRMSNorm(d_inner, eps=1e-5, norm_before_gate=norm_before_gate,
                                      group_size=d_inner // ngroups, device=device)
        self.out_proj = Linear(d_inner, d_model, bias=bias, device=device, dtype=dtype)

    # ------------------------------------------------------------------ pieces shared by forward and step

    def _split_projection(self, zxbcdt: torch.Tensor):
        return zxbcdt.split([self.d_inner, self.conv_dim, self.nheads], dim=-1)

    def _split_conv_output(self, xBC: torch.Tensor):
        """x (..., H, headdim), B and C (..., G, d_state): views."""
        g, n = self.ngroups, self.d_state
        x, B, C = xBC.split([self.d_inner, g * n, g * n], dim=-1)
        return x.unflatten(-1, (self.nheads, self.headdim)), B.unflatten(-1, (g, n)), C.unflatten(-1, (g, n))

    def _scan_parameters(self):
        A = -torch.exp(self.A_log.float())
        D = self.D.float()
        return A, (D.view(self.nheads, self.headdim) if self.D_has_hdim else D), self.dt_bias.float()

    def _finish(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The gated norm (or nothing: without rmsnorm the scan already gated y) and the output projection; y and z
        (..., d_inner)."""
        if self.rmsnorm:
            y = self.norm(y, z)
        return self.out_proj(y.to(self.out_proj.weight.dtype))

    # ------------------------------------------------------------------ calls

    def forward(self, u: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """u (B, L, d_model) -> (B, L, d_model). With ``cache`` (from :meth:`init_cache`), the sequence continues
        from it and the cache is left at its end, in place."""
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise InputError(f"tk_ops.nn.Mamba2: input must be (batch, seq_len, {self.d_model}), got shape "
                             f"{tuple(u.shape)}")
        b, l, _ = u.shape
        conv_state, ssm_state = self._check_cache(cache, b) if cache is not None else (None, None)
        z, xBC, dt = self._split_projection(self.in_proj(u))
        # The causal depthwise convolution in float32: over the cache's last d_conv - 1 inputs and the new ones, or
        # over zeros (the padding) without a cache.
        xBC_t = xBC.transpose(1, 2).float()  # (B, conv_dim, L)
        if conv_state is not None:
            extended = torch.cat([conv_state[:, :, 1:], xBC_t], dim=-1)
            conv = F.conv1d(extended, self.conv1d.weight, self.conv1d.bias, groups=self.conv_dim)
            with torch.no_grad():
                conv_state.copy_(extended[:, :, -self.d_conv:])
        else:
            conv = self.conv1d(xBC_t)[..., :l]
        xBC = F.silu(conv).to(u.dtype if u.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16)
        x, B, C = self._split_conv_output(xBC.transpose(1, 2).contiguous())
        A, D, dt_bias = self._scan_parameters()
        gate = None if self.rmsnorm else z.unflatten(-1, (self.nheads, self.headdim))
        out = self.scan(x, dt.float(), A, B, C, self.chunk_size, D=D, z=gate, dt_bias=dt_bias,
                                initial_states=ssm_state, dt_softplus=True, dt_limit=self.dt_limit,
                                return_final_states=ssm_state is not None)
        if ssm_state is not None:
            y, final = out
            with torch.no_grad():
                ssm_state.copy_(final)
        else:
            y = out
        return self._finish(y.flatten(-2), z)

    @torch.no_grad()
    def step(self, u: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One decoding step: u (B, d_model) or (B, 1, d_model), one new token per sequence; ``cache`` (from
        :meth:`init_cache`, after a prefill by ``forward(u, cache)`` or not) is updated in place. Returns the output
        shaped like u."""
        if u.dim() not in (2, 3) or u.shape[-1] != self.d_model or (u.dim() == 3 and u.shape[1] != 1):
            raise InputError(f"tk_ops.nn.Mamba2.step: input must be (batch, {self.d_model}) or (batch, 1, "
                             f"{self.d_model}), one token per sequence, got shape {tuple(u.shape)}")
        b = u.shape[0]
        conv_state, ssm_state = self._check_cache(cache, b)
        u2 = u.reshape(b, self.d_model)
        z, xBC, dt = self._split_projection(self.in_proj(u2))
        # The convolution's window moves by one token: the oldest input leaves, the new one enters at the end.
        conv_state.copy_(conv_state.roll(shifts=-1, dims=-1))
        conv_state[:, :, -1] = xBC
        conv = (conv_state * self.conv1d.weight[:, 0]).sum(-1)
        if self.conv1d.bias is not None:
            conv = conv + self.conv1d.bias
        x, B, C = self._split_conv_output(F.silu(conv).to(xBC.dtype))
        A, D, dt_bias = self._scan_parameters()
        gate = None if self.rmsnorm else z.unflatten(-1, (self.nheads, self.headdim))
        # dt stays a strided slice of the projection, in its dtype: the step reads it in place.
        y = mamba2_step(ssm_state, x, dt, A, B, C, D=D, z=gate, dt_bias=dt_bias, dt_softplus=True)
        return self._finish(y.flatten(-2), z).view(u.shape)

    def init_cache(self, batch: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """An empty cache for ``batch`` sequences: zeros conv_state (batch, d_inner + 2 G d_state, d_conv) and
        ssm_state (batch, H, headdim, d_state), float32, on the module's device unless ``device`` is given."""
        device = self.out_proj.weight.device if device is None else device
        return (torch.zeros(batch, self.conv_dim, self.d_conv, device=device, dtype=torch.float32),
                torch.zeros(batch, self.nheads, self.headdim, self.d_state, device=device, dtype=torch.float32))

    def _check_cache(self, cache, batch: int):
        shapes = ((batch, self.conv_dim, self.d_conv), (batch, self.nheads, self.headdim, self.d_state))
        if (not isinstance(cache, (tuple, list)) or len(cache) != 2
                or not all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and tuple(t.shape) == s
                           for t, s in zip(cache, shapes))):
            got = (", ".join(f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
                             for t in cache) if isinstance(cache, (tuple, list)) else type(cache).__name__)
            raise InputError(f"tk_ops.nn.Mamba2: the cache must be (conv_state {shapes[0]}, ssm_state {shapes[1]}), "
                             f"float32, as init_cache({batch}) makes it; got {got}")
        return cache[0], cache[1]

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, expand={self.expand}, "
                f"headdim={self.headdim}, ngroups={self.ngroups}, nheads={self.nheads}, chunk_size={self.chunk_size}, "
                f"rmsnorm={self.rmsnorm}")


class _GatedRMSNorm(torch.nn.Module):
    """mamba_ssm's gated RMSNorm (its parameter ``weight``, no bias), in float32: with the gate silu(z) applied before
    the norm (or after it when ``norm_before_gate``), each group of ``group_size`` channels is divided by its root mean
    square (plus eps) and scaled by ``weight``. Returns y's dtype."""

    def __init__(self, hidden: int, eps: float, norm_before_gate: bool, group_size: int, device=None):
        super().__init__()
        self.eps, self.norm_before_gate, self.group_size = eps, norm_before_gate, group_size
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=torch.float32))

    def forward(self, y: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        x = y.float()
        if z is not None and not self.norm_before_gate:
            x = x * F.silu(z.float())
        groups = x.unflatten(-1, (-1, self.group_size))
        x = (groups * torch.rsqrt(groups.square().mean(-1, keepdim=True) + self.eps)).flatten(-2) * self.weight
        if z is not None and self.norm_before_gate:
            x = x * F.silu(z.float())
        return x.to(y.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, group_size={self.group_size}"


class LongConv(torch.nn.Module):
    """A long causal convolution with one learned filter per channel, on :func:`tk_ops.fftconv`: the sequence mixer of
    H3- and Hyena-style models. ``forward(u, pregate=None, postgate=None)`` takes u and the optional gates as
    (B, N, d_model), bfloat16 or float16 (the gates in u's dtype), 1 <= N <= max_len, and returns (B, N, d_model) in
    u's dtype::

        v = u * pregate                                     # pregate None: v = u
        y = postgate * (causal_conv(v, k_eff) + D * v)      # postgate None: no gating
        causal_conv(v, k_eff)[b, n, h] = sum_{m <= n} k_eff[h, m] v[b, n - m, h]
        k_eff[h, m] = k[h, m] * exp(-exp(log_decay[h]) * m / max_len)       m = 0 .. N - 1

    Parameters, float32 whatever the input's dtype (the op takes a float32 filter, and its gradient comes out in
    float32):

    - ``k`` (d_model, max_len): the explicit filter taps, N(0, 1 / max_len) at first, so that a channel's output has
      about the variance of its input over the window.
    - ``log_decay`` (d_model,): the log of each channel's decay rate alpha_h. The exponential window makes distant
      taps start small (a smooth, mostly local filter is what these models learn first, and an explicit filter of
      thousands of noisy taps trains poorly without it); being a parameter, each channel can widen or narrow it.
      At first the rates are evenly spaced over the channels so that the windows fall to 1e-2 after between
      ``decay_span[0]`` and ``decay_span[1]`` of max_len (alpha = ln(100) / span): Hyena's exponential modulation,
      whose defaults (0.3, 1.5) these are.
    - ``D`` (d_model,): the skip term, ones at first.

    A sequence shorter than max_len uses the filter's first N taps (time is measured in taps, so a prefix of a
    sequence gives the prefix of the output); a longer one is refused, and max_len itself may not exceed the kernels'
    longest sequence (2^20; checked when the extension is built, else at the first call).

    The skip D * v enters as the filter's tap 0 (k_eff[:, 0] + D: conv(v, k) + D v = conv(v, k + D delta)), so one
    fftconv call computes everything, postgate included, and D's gradient is the filter gradient's tap 0. The op
    reads (B, d_model, N) rows: u and the gates are handed to it as transposed views (it makes each dense, one copy),
    and y is a transposed (B, N, d_model) view of its (B, d_model, N) output. Every parameter, u and the gates train
    through the op's backward.
    """

    # The convolution forward runs, with tk_ops.fftconv's signature on (B, H, N) tensors (a PyTorch twin of the module
    # may swap in its own).
    conv = staticmethod(fftconv)

    def __init__(self, d_model: int, max_len: int, decay_span: tuple[float, float] = (0.3, 1.5), device=None):
        super().__init__()
        name = "tk_ops.nn.LongConv"
        for arg, value in (("d_model", d_model), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        # The longest sequence comes from the build; without one (a model made on a machine without the kernels, to
        # load or inspect weights) the op checks each call's length instead.
        try:
            longest = _ext.require("fftconv").fftconv_max_len()
        except (ExtensionNotBuiltError, FamilyNotBuiltError):
            longest = None
        if longest is not None and max_len > longest:
            raise InputError(f"{name}: max_len = {max_len} is longer than the longest sequence tk_ops.fftconv's "
                             f"kernels take, {longest}")
        if (not isinstance(decay_span, (tuple, list)) or len(decay_span) != 2
                or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in decay_span)
                or not 0 < decay_span[0] <= decay_span[1] < math.inf):
            raise InputError(f"{name}: decay_span must be (fastest, slowest) with 0 < fastest <= slowest, the "
                             f"fractions of max_len over which the channels' windows fall to 1e-2; got {decay_span!r}")
        self.d_model, self.max_len = d_model, max_len
        self.decay_span = (float(decay_span[0]), float(decay_span[1]))
        f32 = dict(device=device, dtype=torch.float32)
        self.k = torch.nn.Parameter(torch.empty(d_model, max_len, **f32))
        self.log_decay = torch.nn.Parameter(torch.empty(d_model, **f32))
        self.D = torch.nn.Parameter(torch.empty(d_model, **f32))
        for p in (self.log_decay, self.D):
            p._no_weight_decay = True
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initial values (class docstring): k N(0, 1 / max_len), the decay rates spread over decay_span, D one."""
        fastest, slowest = self.decay_span
        with torch.no_grad():
            self.k.normal_(0.0, self.max_len ** -0.5)
            rates = torch.linspace(math.log(100) / slowest, math.log(100) / fastest, self.d_model,
                                   device=self.log_decay.device, dtype=torch.float32)
            self.log_decay.copy_(rates.log())
            self.D.fill_(1.0)

    def effective_filter(self, n: int) -> torch.Tensor:
        """k_eff (d_model, n) for sequences of length n <= max_len: the first n taps, windowed, D added to tap 0."""
        t = torch.arange(n, device=self.k.device, dtype=torch.float32) * (1.0 / self.max_len)
        window = torch.exp(-self.log_decay.exp()[:, None] * t)
        return self.k[:, :n] * window + F.pad(self.D[:, None], (0, n - 1))

    def forward(self, u: torch.Tensor, pregate: torch.Tensor | None = None,
                postgate: torch.Tensor | None = None) -> torch.Tensor:
        self._check(u, pregate, postgate)
        pre, post = (None if g is None else g.transpose(1, 2) for g in (pregate, postgate))
        y = self.conv(u.transpose(1, 2), self.effective_filter(u.shape[1]), pre, post)
        return y.transpose(1, 2)

    def _check(self, u, pregate, postgate) -> None:
        # Here rather than in the op, so that the messages speak of the module's (B, N, d_model) layout.
        name = "tk_ops.nn.LongConv"
        if not isinstance(u, torch.Tensor) or u.dim() != 3 or u.shape[-1] != self.d_model:
            got = f"shape {tuple(u.shape)}" if isinstance(u, torch.Tensor) else type(u).__name__
            raise InputError(f"{name}: input must be (batch, seq_len, {self.d_model}), got {got}")
        if not 1 <= u.shape[1] <= self.max_len:
            raise InputError(f"{name}: seq_len = {u.shape[1]} must be between 1 and max_len = {self.max_len}, the "
                             f"filter's length; build the module with a larger max_len for longer sequences")
        if u.dtype not in (torch.bfloat16, torch.float16):
            raise DTypeError(f"{name}: input must be bfloat16 or float16, got {u.dtype}")
        for gate_name, gate in (("pregate", pregate), ("postgate", postgate)):
            if gate is None:
                continue
            if not isinstance(gate, torch.Tensor) or gate.shape != u.shape:
                got = f"shape {tuple(gate.shape)}" if isinstance(gate, torch.Tensor) else type(gate).__name__
                raise InputError(f"{name}: {gate_name} must have the input's shape {tuple(u.shape)}, got {got}")
            if gate.dtype != u.dtype:
                raise DTypeError(f"{name}: {gate_name} must have the input's dtype {u.dtype}, got {gate.dtype}")

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, decay_span={self.decay_span}"
