"""``tk_ops.scaled_dot_product_attention``: ``torch.nn.functional.scaled_dot_product_attention`` with the same
signature, semantics and result, run on the tk_ops attention kernels wherever they compute exactly what SDPA
computes, and on torch's own SDPA everywhere else.

    import tk_ops
    o = tk_ops.scaled_dot_product_attention(q, k, v, is_causal=True)   # (B, H, N, D) bf16 on an H100: the kernels
    torch.nn.functional.scaled_dot_product_attention = tk_ops.scaled_dot_product_attention  # safe: no recursion

The help of :func:`scaled_dot_product_attention` states which calls run on the kernels, which fall back, and what
each fallback reports. The helpers here are the same rules as pure functions, which the CPU tests check without a
GPU: :func:`fallback_reason` (why a call falls back), :func:`causal_plan` and :func:`mask_plan` (SDPA's masks as the
kernels' bands), :func:`autocast_dtype`.

**Causal alignment.** SDPA's ``is_causal`` is aligned top-left: query i sees key j iff j <= i. The kernels align
bottom-right (FlashAttention's convention, :mod:`tk_ops.attention`). The mapping is exact, so ``is_causal`` alone never
makes a call fall back: Nq == Nk is the kernels' causal; Nq > Nk is a window with an unlimited left side and
right = Nq - Nk; Nq < Nk is the kernels' causal on the first Nq keys, the only ones any query sees.

**Boolean masks** are read, not trusted: the band is found from the first broadcast slice (the least and greatest
offset j - i it lets through), then the whole mask is compared with that band. The answer is kept for the last mask
seen, keyed on the tensor (a weak reference) and its version counter, so a mask shared by a model's layers is read
once per forward and a mask modified in place is read again.

**Autocast.** SDPA is on autocast's lower-precision list; the casts are repeated here before the kernels so that
float32 models under ``torch.autocast("cuda")`` run on them and get SDPA's output dtype.

The fast path (CUDA 16-bit 4-D tensors, no mask, no dropout, not under autocast) is a few attribute tests and the
op call, about the host time of :func:`tk_ops.attention` itself; everything else takes a slower path with every
rule.
"""
from __future__ import annotations

import math
import warnings
import weakref
from collections.abc import Sequence
from typing import NamedTuple

import torch

from . import _ext
from .attention import head_dims
from .errors import DeviceMismatchError, DTypeError, InputError, TkOpsError

NAME = "tk_ops.scaled_dot_product_attention"
_HALF = (torch.bfloat16, torch.float16)
# The builtin behind torch.nn.functional.scaled_dot_product_attention, bound before anyone can replace it with us.
_torch_sdpa = torch._C._nn.scaled_dot_product_attention
# One C call on the fast path (torch.is_autocast_enabled("cuda") parses a device string); where this torch lacks
# it, the public function.
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None) or (lambda: torch.is_autocast_enabled("cuda"))


class FallbackWarning(UserWarning):
    """tk_ops.scaled_dot_product_attention ran torch's SDPA for a call the kernels cannot take (once per reason)."""


# Why a call falls back, and the exception strict=True raises for it. The keys are the names the warnings and the
# documentation use.
REASONS: dict[str, type[TkOpsError]] = {
    "nested": InputError,
    "dropout_p": InputError,
    "attn_mask": InputError,
    "dtype": DTypeError,
    "shape": InputError,
    "enable_gqa": InputError,
    "head_dim": InputError,
    "device": DeviceMismatchError,
}
_warned: set[str] = set()


class Band(NamedTuple):
    """A problem the kernels take: ``tk_ops.attention(q, k[..., :keys, :], v[..., :keys, :], causal,
    window=window)``, bottom-right aligned on the first ``keys`` keys."""
    causal: bool
    window: tuple[int, int]
    keys: int


def causal_plan(nq: int, nk: int) -> Band:
    """SDPA's ``is_causal`` (top-left: query i sees key j iff j <= i) as the kernels' bottom-right band.

    With d = Nk - Nq the kernels' row i sees j <= i + d + right. Nq == Nk: causal (right 0). Nq > Nk: right =
    Nq - Nk, no left limit. Nq < Nk: keys past Nq - 1 are seen by no query, so the kernels' causal on the first
    Nq keys (where d = 0)."""
    if nq < nk:
        return Band(True, (-1, -1), nq)
    if nq > nk:
        return Band(False, (-1, nq - nk), nk)
    return Band(True, (-1, -1), nk)


def mask_plan(mask: torch.Tensor, attn_shape: Sequence[int]) -> Band | None:
    """The band a boolean ``attn_mask`` is, for attention weights of shape ``attn_shape`` (..., Nq, Nk), or None
    when the kernels cannot express it: not boolean, not broadcastable, not the same band in every broadcast slice,
    or a last query row that sees no key (under bottom-right alignment the last row always sees the last key).

    The band is found from the mask's own offsets j - i: lo and hi, the least and greatest offset it lets through,
    then the mask must be exactly lo <= j - i <= hi. Keys past the last one any row sees (Nq - 1 + hi) are dropped,
    which moves the kernels' diagonal onto the band's right edge. Costs one synchronisation (the values decide)."""
    nq, nk = attn_shape[-2], attn_shape[-1]
    if (mask.dtype != torch.bool or not 2 <= mask.dim() <= len(attn_shape) or nq == 0 or nk == 0
            or mask.numel() == 0):
        return None
    if any(m != 1 and m != a for m, a in zip(reversed(mask.shape), reversed(attn_shape))):
        return None
    device = mask.device
    offsets = torch.arange(nk, device=device) - torch.arange(nq, device=device).unsqueeze(1)  # (Nq, Nk): j - i
    first = mask[(0,) * (mask.dim() - 2)].expand(nq, nk)
    # Offsets run from 1 - Nq to Nk - 1: Nk and -Nq stand for "none" in the reductions.
    lo = torch.where(first, offsets, nk).amin()
    hi = torch.where(first, offsets, -nq).amax()
    same = (mask == ((offsets >= lo) & (offsets <= hi))).all()
    lo, hi, same = torch.stack((lo, hi, same.to(lo.dtype))).tolist()
    if not same or lo > hi:  # not a band, or no key visible at all
        return None
    keys = min(nk, nq + hi)
    left, right = keys - nq - lo, hi - (keys - nq)
    if left < 0:
        return None
    if lo <= 1 - nq:  # every row's band starts at or before key 0
        left = -1
    if hi >= keys - 1:  # every row's band reaches the last key kept
        right = -1
    if right == 0:
        return Band(True, (left, -1), keys)
    return Band(False, (left, right), keys)


def autocast_dtype(dtype: torch.dtype, target: torch.dtype | None) -> torch.dtype:
    """The dtype SDPA computes an input of ``dtype`` in under autocast to ``target`` (None: autocast off): every
    floating dtype but float64 is cast."""
    if target is None or dtype == torch.float64 or not dtype.is_floating_point:
        return dtype
    return target


def fallback_reason(query_shape: Sequence[int], key_shape: Sequence[int], value_shape: Sequence[int],
                    dtypes: Sequence[torch.dtype], devices: Sequence[torch.device | str], *,
                    attn_mask_dtype: torch.dtype | None = None, attn_mask_device: torch.device | str | None = None,
                    dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False,
                    head_dims: Sequence[int] | None = None, nested: bool = False) -> tuple[str, str] | None:
    """Why a call runs torch's SDPA instead of the kernels, as (reason, what about the arguments), or None when the
    kernels take it (a boolean mask must still be a band: :func:`mask_plan`). ``dtypes`` are those the call computes
    in (:func:`autocast_dtype`), ``devices`` those of query, key and value, ``head_dims`` the build's (None: not
    checked). The first reason in this order is given: nested, dropout_p, attn_mask, dtype, shape, enable_gqa,
    head_dim, device."""
    if nested:
        return "nested", "query, key or value is a nested tensor"
    if dropout_p != 0:
        return "dropout_p", f"dropout_p={dropout_p!r} (the kernels have no dropout)"
    if attn_mask_dtype is not None:
        if is_causal:
            return "attn_mask", "attn_mask is given with is_causal=True (SDPA refuses the pair)"
        if attn_mask_dtype != torch.bool:
            return "attn_mask", (f"attn_mask has dtype {attn_mask_dtype} (an additive mask; the kernels take boolean "
                                 "masks that are bands)")
        if attn_mask_device is not None and torch.device(attn_mask_device) != torch.device(devices[0]):
            return "attn_mask", f"attn_mask is on {attn_mask_device}, query on {devices[0]}"
    if len(set(dtypes)) != 1:
        return "dtype", "query, key and value have different dtypes " + ", ".join(map(str, dtypes))
    if dtypes[0] not in _HALF:
        return "dtype", (f"query.dtype is {dtypes[0]} (the kernels compute in bfloat16 or float16; other floating "
                         "dtypes but float64 run on them under torch.autocast)")
    q, k, v = tuple(query_shape), tuple(key_shape), tuple(value_shape)
    if len(q) < 3 or len(k) != len(q) or len(v) != len(q):
        return "shape", (f"query, key and value have shapes {q}, {k}, {v} (the kernels take 3-D or more, one rank for "
                         "all three)")
    if q[:-3] != k[:-3] or k[:-1] != v[:-1] or k[-1] != q[-1]:
        return "shape", (f"query {q}, key {k} and value {v} are not (..., Hq, Nq, E), (..., H, Nk, E), (..., H, Nk, "
                         "Ev) with the same batch dimensions")
    hq, hk = q[-3], k[-3]
    if hq != hk:
        if not enable_gqa:
            return "enable_gqa", (f"query has {hq} heads and key and value {hk}, without enable_gqa=True (SDPA "
                                  "broadcasts a single head, refuses others)")
        if hk == 0 or hq % hk:
            return "shape", f"enable_gqa=True with {hk} key/value heads, which do not divide the {hq} query heads"
    if v[-1] != q[-1]:
        return "head_dim", f"value's head dimension {v[-1]} differs from query's {q[-1]}"
    if head_dims is not None and q[-1] not in head_dims:
        return "head_dim", (f"head dimension {q[-1]} (this build's kernels take "
                            f"{', '.join(map(str, head_dims))})")
    if any(torch.device(d) != torch.device(devices[0]) for d in devices) or torch.device(devices[0]).type != "cuda":
        return "device", f"query, key and value are on {', '.join(map(str, devices))} (the kernels take CUDA tensors)"
    return None


_dims: tuple[int, ...] | None = None
# (a weak reference to the last boolean mask read, its version, the attention shape, its plan)
_mask_memo: tuple | None = None


@torch.compiler.assume_constant_result
def _built_head_dims() -> tuple[int, ...]:
    # A property of the build: read once, while tracing too (torch.compile would otherwise trace the query op).
    return tuple(head_dims())


def _load_dims() -> tuple[int, ...]:
    global _dims
    _dims = _built_head_dims()
    return _dims


def _run(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, band: Band, scale) -> torch.Tensor:
    """The kernels on (B, H, N, D) tensors for the band (the first band.keys keys)."""
    causal, (left, right), keys = band
    if keys != key.shape[-2]:
        key, value = key.narrow(-2, 0, keys), value.narrow(-2, 0, keys)
    return _ext.call("attention", "attention_fwd", NAME, query, key, value, causal, scale, left, right, 0.0)[0]


def _kernel_path(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, band: Band, scale,
                 dtype: torch.dtype) -> torch.Tensor:
    """The kernels for inputs of any rank >= 3 (leading dimensions folded into the batch), in ``dtype``."""
    if query.dtype != dtype:
        query = query.to(dtype)
    if key.dtype != dtype:
        key = key.to(dtype)
    if value.dtype != dtype:
        value = value.to(dtype)
    if query.dim() == 4:
        return _run(query, key, value, band, scale)
    shape = query.shape
    batch = math.prod(shape[:-3])
    out = _run(*(t.reshape((batch,) + tuple(t.shape[-3:])) for t in (query, key, value)), band, scale)
    return out.view(shape)  # splits the folded batch dimension again: always a view


def _plan_for_mask(mask: torch.Tensor, attn_shape: tuple[int, ...]) -> Band | None:
    global _mask_memo
    memo = _mask_memo
    if memo is not None and memo[0]() is mask and memo[2] == attn_shape and memo[1] == mask._version:
        return memo[3]
    plan = mask_plan(mask, attn_shape)
    if not mask.is_inference():  # inference tensors have no version counter to tell a modification
        _mask_memo = (weakref.ref(mask), mask._version, attn_shape, plan)
    return plan


def _fallback(found: tuple[str, str], strict: bool, query, key, value, attn_mask, dropout_p, is_causal, scale,
              enable_gqa) -> torch.Tensor:
    reason, what = found
    if strict:
        raise REASONS[reason](f"{NAME}: {what}; the tk_ops kernels cannot run this call (strict=True)")
    out = _torch_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if reason not in _warned:  # after the call: a call SDPA refuses raises its own error and spends no warning
        _warned.add(reason)
        warnings.warn(f"{NAME}: {what}; ran torch.nn.functional.scaled_dot_product_attention instead (shown once per "
                      f"process for the reason {reason!r}; strict=True raises instead)", FallbackWarning, stacklevel=4)
    return out


def _general(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, strict) -> torch.Tensor:
    """Every call the fast path does not take: the rules in full, then the kernels or torch's SDPA."""
    if query.is_nested or key.is_nested or value.is_nested:
        found = fallback_reason((), (), (), (), (), nested=True)
    else:
        cuda = query.is_cuda
        target = torch.get_autocast_dtype("cuda") if cuda and torch.is_autocast_enabled("cuda") else None
        dtypes = tuple(autocast_dtype(t.dtype, target) for t in (query, key, value))
        found = fallback_reason(
            query.shape, key.shape, value.shape, dtypes, (query.device, key.device, value.device),
            attn_mask_dtype=None if attn_mask is None else attn_mask.dtype,
            attn_mask_device=None if attn_mask is None else attn_mask.device, dropout_p=dropout_p,
            is_causal=bool(is_causal), enable_gqa=enable_gqa, head_dims=(_dims or _load_dims()) if cuda else None)
    if found is None:
        nq, nk = query.shape[-2], key.shape[-2]
        if attn_mask is not None:
            band = _plan_for_mask(attn_mask, tuple(query.shape[:-1]) + (nk,))
            if band is None:
                found = "attn_mask", ("a boolean attn_mask that is not one band lo <= j - i <= hi in every broadcast "
                                      "slice with a key for the last query row")
        else:
            band = causal_plan(nq, nk) if is_causal else Band(False, (-1, -1), nk)
    if found is not None:
        return _fallback(found, strict, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _kernel_path(query, key, value, band, scale, dtypes[0])


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, *, scale: float | None = None, enable_gqa: bool = False,
                                 strict: bool = False) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` with the same signature, semantics and result, run on the
    tk_ops attention kernels where they compute exactly what SDPA computes and on torch's own SDPA everywhere else.

    Computes ``softmax(scale * query @ key^T + mask) @ value`` per batch and head: a boolean ``attn_mask`` lets a
    (query, key) pair take part where it is True, a float one is added to the scores, ``is_causal=True`` lets query
    i see the keys j <= i (aligned top-left, SDPA's convention, for any Nq and Nk), and ``dropout_p`` drops
    attention probabilities. It may replace the torch function
    (``torch.nn.functional.scaled_dot_product_attention = tk_ops.scaled_dot_product_attention``): the fallback calls
    torch's builtin, bound when tk_ops is imported, so it never calls itself.

    **The kernels run** a call when all of these hold:

    - query, key and value are CUDA tensors on one device, all bfloat16 or all float16; under
      ``torch.autocast("cuda")`` with a bfloat16 or float16 autocast dtype, any floating dtypes but float64, which
      are cast to it first, as SDPA casts them;
    - they are 3-D or more, of one rank, with the same leading (batch) dimensions (none broadcast): query
      (..., Hq, Nq, E), key and value (..., Hk, Nk, E), E one of the build's head dimensions
      (:func:`tk_ops.attention.head_dims`) and value's last dimension E too; Hk == Hq, or Hk dividing Hq with
      ``enable_gqa=True``;
    - ``dropout_p == 0``;
    - there is no mask, or ``is_causal=True``, or a boolean ``attn_mask`` that is one band around a diagonal.

    *Causal.* The kernels align causal masks bottom-right; SDPA's top-left ``is_causal`` maps onto them exactly:
    Nq == Nk is their causal; Nq > Nk a window that reaches Nq - Nk keys right of their diagonal, so every row sees
    key 0 and none is empty, as in SDPA; Nq < Nk their causal on the first Nq keys, the only ones any query sees.

    *Boolean masks* (True: take part), 2-D or more and broadcastable to (..., Hq, Nq, Nk), run on the kernels when
    every broadcast slice is the same band, query i seeing exactly the keys j (0 <= j < Nk) with
    ``lo <= j - i <= hi`` for some lo <= hi, and the last query row sees at least one key. That covers SDPA's causal
    mask (``torch.ones(Nq, Nk, dtype=torch.bool).tril()``), bottom-right causal masks
    (``tril(diagonal=Nk - Nq)``), and causal or two-sided sliding windows. Rows at the top of a band that see no key
    output 0 with zero gradients, as SDPA's math backend gives. Reading a mask's values costs a few small GPU ops
    and one synchronisation; the answer is kept for the last mask seen until that tensor is modified (its version
    counter tells; an inference-mode mask has none and is read at every call, and a mask written by a kernel that
    bypasses torch is not seen to change). ``is_causal=True`` costs nothing: prefer it to a causal mask.

    **Every other call runs torch's SDPA.** The first of these reasons that applies names it: ``nested`` (a nested
    query, key or value); ``dropout_p`` (nonzero); ``attn_mask`` (a float, additive mask; a mask with
    ``is_causal=True``; a mask on another device than query; a boolean mask that is not such a band); ``dtype``
    (dtypes that differ after autocast's casts; outside CUDA autocast, a dtype other than bfloat16 / float16; under
    it, float64 or an autocast dtype other than bfloat16 / float16); ``shape`` (rank under 3; ranks or batch
    dimensions that differ, which SDPA broadcasts; key and value lengths or heads that differ, or key's last
    dimension other than E;
    ``enable_gqa=True`` with key heads that do not divide the query heads); ``enable_gqa`` (Hk != Hq without
    ``enable_gqa=True``, where SDPA broadcasts a single key head and refuses others); ``head_dim`` (value's last
    dimension other than E, or E not built); ``device`` (CPU tensors, or tensors on several devices). Each reason is
    reported once per process with a :class:`FallbackWarning` naming the argument, issued after torch's SDPA
    returned: arguments SDPA itself refuses (a mask with ``is_causal=True``, dtypes that differ, key heads that do
    not divide the query heads) raise torch's own error and spend no warning. ``strict=True`` raises the tk_ops
    error for the reason instead and never runs torch's kernels.

    Args:
        query: (..., Hq, Nq, E); the dimensions before the last three are batch dimensions (3-D: no batch).
        key: (..., Hk, Nk, E) with query's batch dimensions on the kernels (torch's SDPA broadcasts them).
        value: (..., Hk, Nk, Ev), shaped like key but for its last dimension.
        attn_mask: None; a boolean mask broadcastable to (..., Hq, Nq, Nk), True where query i may see key j; or a
            float mask added to the scores (torch's SDPA runs it). Not together with ``is_causal=True``.
        dropout_p: the probability of dropping each attention probability, applied whenever it is nonzero (SDPA
            knows no eval mode: pass 0.0 outside training). Nonzero runs torch's SDPA.
        is_causal: query i sees the keys j <= i, aligned top-left for any Nq and Nk.
        scale: the factor of the scores ``query . key``; None means ``1 / sqrt(E)``.
        enable_gqa: allow key and value fewer heads Hk than query's Hq, Hk dividing Hq (grouped-query attention):
            query head h uses key/value head ``h // (Hq // Hk)``.
        strict: raise the tk_ops error for a call that would run torch's SDPA, rather than warn and run it.
            Keyword-only, a tk_ops addition to SDPA's signature.

    Returns:
        The attention output, a tensor (..., Hq, Nq, Ev) in query's dtype, or the autocast dtype under CUDA
        autocast, as SDPA returns it. On the kernels it takes query's memory order for 4-D inputs, as SDPA's output
        does, and a row that sees no key is 0.

    Autograd:
        Differentiable in query, key and value on either path: on the kernels through the tk_ops backward kernel
        (dK and dV summed over each group's query heads; keys past the band's last one, which no query sees, get
        exact zero gradients), on the fallback through torch's SDPA. Under autocast, gradients reach float32 leaves
        in float32 through the casts. A boolean mask has no gradient; a float mask runs torch's SDPA, which
        differentiates it as torch does. The fast path (4-D CUDA 16-bit tensors, no mask, no dropout, not under
        autocast) traces under ``torch.compile(fullgraph=True)``; reading a mask synchronises, which breaks a graph.

    Raises:
        InputError: with ``strict=True``, for the reasons nested, dropout_p, attn_mask, shape, enable_gqa and
            head_dim; on a call the kernels take, a scale that is not finite or sizes past the kernels' limits.
        DTypeError: with ``strict=True``, for the reason dtype.
        DeviceMismatchError: with ``strict=True``, for the reason device.
        ExtensionNotBuiltError, FamilyNotBuiltError: a call with a (non-nested) CUDA query, where the extension is
            not built or lacks the attention kernels, whatever the path (the build's head dimensions decide it):
            the call raises rather than fall back in silence.
        UnsupportedDeviceError: a call the kernels take, on a GPU other than sm_90 (H100 / H200).
        Without ``strict``, arguments SDPA refuses raise torch's own error (a RuntimeError) from its SDPA.

    Example::

        q = torch.randn(2, 16, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = torch.randn(2, 2, 2, 1024, 128, device="cuda", dtype=torch.bfloat16).unbind(0)
        o = tk_ops.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (2, 16, 1024, 128)
        o.sum().backward()
        i = torch.arange(1024, device="cuda")
        local = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 256)   # causal, each query's last 256 keys
        o_local = tk_ops.scaled_dot_product_attention(q, k, v, attn_mask=local, enable_gqa=True)   # the kernels too
    """
    # The fast path: a few attribute tests, then the op. Anything unusual takes _general, which has every rule.
    if (attn_mask is None and not dropout_p and not _any_autocast() and query.dim() == 4 and query.is_cuda
            and not query.is_nested):
        dtype = query.dtype
        qs, ks = query.shape, key.shape
        if ((dtype is torch.bfloat16 or dtype is torch.float16) and key.dtype is dtype and value.dtype is dtype
                and len(ks) == 4 and value.shape == ks and ks[0] == qs[0] and ks[3] == qs[3]
                and qs[3] in (_dims or _load_dims())
                and (ks[1] == qs[1] or (enable_gqa and ks[1] > 0 and qs[1] % ks[1] == 0))):
            if is_causal and qs[2] != ks[2]:
                return _run(query, key, value, causal_plan(qs[2], ks[2]), scale)
            return _ext.call("attention", "attention_fwd", NAME, query, key, value, bool(is_causal),
                             scale, -1, -1, 0.0)[0]
    return _general(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, strict)
