"""Hugging Face transformers on the tk_ops kernels: ``attn_implementation="tk_ops"`` and ``swap_linears``.

    from transformers import AutoModelForCausalLM
    from tk_ops.integrations import transformers as tk_transformers

    tk_transformers.register()                       # once per process; register(strict=True) raises on fallbacks
    model = AutoModelForCausalLM.from_config(config, attn_implementation="tk_ops", dtype=torch.bfloat16).cuda()
    model.set_attn_implementation("tk_ops")          # or switch a loaded model
    report = tk_transformers.swap_linears(model, skip=("lm_head",))   # bf16 nn.Linear -> tk_ops.nn.Linear

**What runs where.** :func:`register` adds an attention function to transformers' ``AttentionInterface`` and a mask
function to its ``AttentionMaskInterface`` under one name. The mask function keeps the masks transformers builds for
causal and sliding-window layers out of the attention matrix (as its flash-attention masks do), so the attention
function sees one of:

======================================  =========================================================================
what the model is given                 what runs
======================================  =========================================================================
no padding (training, prefill, decode)  ``tk_ops.attention`` on the (B, H, N, D) tensors: causal, window, softcap,
                                        GQA; decoding (Nq < Nk, a KV cache) aligned bottom-right
a 2-D attention_mask with zeros         the tokens gathered into documents (one per row, left or right padding)
                                        and ``tk_ops.flash_attn.flash_attn_varlen_func``; padded query rows give 0
packed rows: position_ids that restart  ``flash_attn_varlen_func`` on the flattened rows, one document per run of
(DataCollatorWithFlattening), or the    positions that count up by one (transformers' own definition), or on the
cu_seq_lens_q/k, max_length_q/k kwargs  offsets given
any other mask (custom mask functions,  transformers' boolean SDPA mask and ``tk_ops.scaled_dot_product_attention``,
bidirectional masks, a 4-D mask given)  which runs the kernels where the mask is a band and torch's SDPA otherwise
======================================  =========================================================================

Causality comes from the ``is_causal`` argument or the module's ``is_causal`` (default True), the window from the
``sliding_window`` argument the model passes, as for flash attention. transformers' sliding window of W lets query i
see keys i - W + 1 .. i, W keys (``kv_idx > q_idx - W``): the kernels' window ``(W - 1, 0)``; a non-causal window is
``|i - j| <= W``. ``softcap`` (Gemma 2) caps the scaled scores; ``scaling`` is passed as the kernels' scale. Packed
rows are recognised two ways: from the mask transformers builds when it detects packing itself (no cache, any batch
size), and, for a batch of one row, from ``position_ids`` in the attention call (where a cache, on by default with
``use_cache=True``, turned transformers' own detection off): a document starts wherever a position is not the
previous one plus one. The attention function returns ``(out (B, Nq, H, D), None)``, the layout of transformers'
sdpa and flash-attention functions.

**Fallbacks.** Calls the kernels cannot take run transformers' own code and warn once per reason per process
(:class:`FallbackWarning`, a ``tk_ops.sdpa.FallbackWarning``): ``dropout`` (attention dropout while training),
``output_attentions``, ``s_aux`` (attention sinks), ``position_bias``, ``cache`` (the paged cache of continuous
batching), ``device`` (CPU tensors), ``dtype`` (not bfloat16 / float16, nor float32 under CUDA autocast to one of
them), ``shape``, ``head_dim`` (one the build's kernels do not take, or a value head dimension that differs) and
``attention_mask`` (a 4-D mask with a softcap, a padding mask with gaps inside a row under a sliding window, a mask
of another form). The fallback runs transformers' ``sdpa_attention_forward`` on the mask the kernels would have
used (materialised), or the model's own ``eager_attention_forward`` where SDPA cannot serve (softcap, attention
sinks, ``output_attentions``, which then returns the weights); query rows that see no key give 0, as on the kernels.
``register(strict=True)`` raises the tk_ops error for the reason instead (``InputError``, ``DTypeError``,
``DeviceMismatchError``). CUDA tensors need the built extension: where it is missing the call raises, as every
tk_ops op does, rather than falling back in silence.

**Costs.** The dense path is the op call and a few attribute tests. The padding and packing paths read their mask
or position ids on the host once per forward (one synchronisation, kept for every layer that sees the same tensor),
and gather the tokens into documents and back (two copies of q and one of k and v per layer, as flash attention's
unpadding does). Under torch.compile the dense path of a batch of several rows with a cache (transformers' default,
``use_cache=True``) traces whole (``fullgraph=True``); a single row (whose position_ids are read for packing), padding,
packing, and calls without a cache that carry position_ids (while tracing transformers cannot rule packing out, so
the documents path runs) break the graph and run eagerly between graphs. Static caches work (the keys past the last
query are dropped) at one synchronisation per forward.

**swap_linears** replaces, in place, every ``torch.nn.Linear`` whose parameters ``tk_ops.nn.Linear`` can take as they
are: bfloat16 weight (and bias), in and out features multiples of 8. The new modules hold the same ``Parameter``
objects (no copy; tied weights and optimizer state stay valid). Others are left alone and reported with the reason,
among them every float32 layer: a model kept in float32 with bf16 autocast (float32 master weights) has nothing this
function can swap, since the tk_ops GEMM takes bfloat16 parameters.
"""
from __future__ import annotations

import sys
import warnings
import weakref
from typing import NamedTuple

import torch
import torch.nn.functional as F
import transformers
from transformers import masking_utils as _masks
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ..attention import attention as _tk_attention
from ..attention import head_dims
from ..errors import DeviceMismatchError, DTypeError, InputError, TkOpsError
from ..flash_attn import flash_attn_varlen_func
from ..nn.gemm import Linear as _TkLinear
from ..reference.attention import attention_visible
from ..sdpa import FallbackWarning as _SdpaFallbackWarning
from ..sdpa import scaled_dot_product_attention

__all__ = ["REASONS", "FallbackWarning", "SwapReport", "attention_forward", "prepare_mask", "register",
           "swap_linears"]

NAME = "tk_ops.integrations.transformers"


class FallbackWarning(_SdpaFallbackWarning):
    """The tk_ops attention function ran transformers' own attention for a call the kernels cannot take (once per
    reason per process)."""


# Why a call falls back, and what register(strict=True) raises for it.
REASONS: dict[str, type[TkOpsError]] = {
    "dropout": InputError,
    "output_attentions": InputError,
    "s_aux": InputError,
    "position_bias": InputError,
    "cache": InputError,
    "shape": InputError,
    "device": DeviceMismatchError,
    "dtype": DTypeError,
    "head_dim": InputError,
    "attention_mask": InputError,
}
_warned: set[str] = set()

# What the kernels take; the build adds its head dimensions (read on the first CUDA call).
_KERNEL_DEVICE_TYPES: tuple[str, ...] = ("cuda",)
_KERNEL_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16)
_built_dims: tuple[int, ...] | None = None

# Keyword arguments this module reads; the rest reach transformers' functions on a fallback.
_CONSUMED = frozenset({"position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "use_cache",
                       "output_attentions", "is_causal", "seq_idx", "cache"})


# ---------------------------------------------------------------- registration


def register(name: str = "tk_ops", *, strict: bool = False) -> str:
    """Register the tk_ops attention under ``name`` with transformers (``AttentionInterface`` and
    ``AttentionMaskInterface``), so that ``from_pretrained(..., attn_implementation=name)``, ``from_config`` and
    ``model.set_attn_implementation(name)`` select it. ``strict=True``: calls the kernels cannot take raise the
    tk_ops error instead of falling back (the module docstring lists the reasons). Registering again replaces the
    previous registration. Returns ``name``.

    ``name`` may not contain "flash" (transformers would load flash-attention packages for it) nor look like a hub
    kernel ("org/repo")."""
    if not isinstance(name, str) or not name or "flash" in name or "/" in name or name.startswith("paged|"):
        raise InputError(f"{NAME}.register: name {name!r} must be a non-empty string without 'flash' (transformers "
                         "treats those as flash attention), '/' (a hub kernel) or a 'paged|' prefix")

    def tk_ops_attention(module, query, key, value, attention_mask, *args, **kwargs):
        return attention_forward(module, query, key, value, attention_mask, *args, strict=strict, **kwargs)

    tk_ops_attention.__doc__ = attention_forward.__doc__
    transformers.AttentionInterface.register(name, tk_ops_attention)
    _masks.AttentionMaskInterface.register(name, prepare_mask)
    return name


# ---------------------------------------------------------------- masks


def _cells(fn) -> dict:
    """The closure of a function, by variable name ({} for anything else)."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    if code is None:
        return {}
    try:
        return dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
    except ValueError:  # an empty cell
        return {}


def _code_of(factory, *args):
    """The code object of the closures `factory` builds: what identifies them whatever they captured."""
    try:
        return factory(*args).__code__
    except (TypeError, AttributeError):  # a transformers without that factory
        return None


_AND_CODE = _code_of(getattr(_masks, "and_masks", None))
_SLIDING_CODE = _code_of(getattr(_masks, "sliding_window_overlay", None), 1)
_PACKED_CODE = _code_of(getattr(_masks, "packed_sequence_mask_function", None), None)
_REMAP_CODE = _code_of(getattr(_masks, "remap_positions_for_packed_sequence", None), None, None)


class _Pattern(NamedTuple):
    window: int | None           # the mask's sliding window (the attention call passes its own)
    doc_ids: torch.Tensor | None  # packed rows: (B, N) document index per position


def _pattern(fn) -> _Pattern | None:
    """The causal patterns transformers builds its masks from: causal, causal with a sliding window, and either of
    them with packed rows. None for any other mask function (custom or/and functions, bidirectional, chunked), which
    then gets transformers' materialised mask."""
    if fn is _masks.causal_mask_function:
        return _Pattern(None, None)
    if _AND_CODE is None or getattr(fn, "__code__", None) is not _AND_CODE:
        return None
    parts = _cells(fn).get("mask_functions")
    if not isinstance(parts, tuple) or len(parts) != 2:
        return None
    codes = [getattr(p, "__code__", None) for p in parts]
    for i in (0, 1):  # and_masks(sliding_window_overlay(W), causal_mask_function), either order
        if parts[1 - i] is _masks.causal_mask_function and _SLIDING_CODE is not None and codes[i] is _SLIDING_CODE:
            window = _cells(parts[i]).get("sliding_window")
            return _Pattern(window, None) if isinstance(window, int) and window > 0 else None
    if _PACKED_CODE is not None and codes[0] is _PACKED_CODE and _REMAP_CODE is not None and codes[1] is _REMAP_CODE:
        ids = _cells(parts[0]).get("packed_sequence_mask")
        inner = _pattern(_cells(parts[1]).get("mask_function"))
        if isinstance(ids, torch.Tensor) and ids.dim() == 2 and inner is not None and inner.doc_ids is None:
            return _Pattern(inner.window, ids)
    return None


# Document ids handed to the attention function by prepare_mask, by id(): a 2-D integer mask from anywhere else is a
# padding mask (1 = token), as flash attention reads one.
_DOC_IDS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def prepare_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset: int = 0,
                 mask_function=None, attention_mask: torch.Tensor | None = None, **kwargs):
    """transformers' mask function for the tk_ops attention (``AttentionMaskInterface``): the arguments of
    ``masking_utils.sdpa_mask``. For causal and sliding-window masks it returns None (no padding: the kernels' own
    causal band), a (B, L) boolean padding mask over the keys up to the last query (L <= kv_length; later keys of a
    static cache are seen by no query), or, for rows transformers found packed, the (B, N) document index of every
    position. For any other mask it returns transformers' (B, 1, Nq, Nk) boolean SDPA mask, always materialised."""
    fn = _masks.causal_mask_function if mask_function is None else mask_function
    pattern = None if kwargs.get("use_vmap") else _pattern(fn)
    device = kwargs.get("device", "cpu")
    if pattern is not None and pattern.doc_ids is not None:
        ids = pattern.doc_ids
        if (attention_mask is None and q_length == kv_length == ids.shape[-1] and kv_offset == 0
                and int(q_offset) == 0 and ids.shape[0] in (1, batch_size)):
            ids = ids.expand(batch_size, -1).to(device)
            _DOC_IDS[id(ids)] = ids
            return ids
        pattern = None
    if pattern is not None:
        end = int(q_offset) + q_length - kv_offset  # the keys up to the last query
        if q_length <= end <= kv_length:
            if attention_mask is None:
                return None if end == kv_length else torch.ones(batch_size, end, dtype=torch.bool, device=device)
            if attention_mask.dim() == 2 and attention_mask.shape[0] in (1, batch_size):
                mask = attention_mask.to(device=device, dtype=torch.bool)
                if mask.shape[-1] < kv_offset + end:  # a static cache's unwritten slots: no token there
                    mask = F.pad(mask, (0, kv_offset + end - mask.shape[-1]))
                return mask[:, kv_offset:kv_offset + end].expand(batch_size, -1)
    kwargs = dict(kwargs, allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    return _masks.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                            kv_offset=kv_offset, mask_function=fn, attention_mask=attention_mask, **kwargs)


# ---------------------------------------------------------------- reading masks and positions on the host


class _Memo:
    """Answers computed from a tensor's values, kept for the last few tensors seen: a model's layers share one mask
    and one position_ids per forward, so they are read once. Keyed on the tensor (weakly), its version counter (a
    tensor modified in place is read again) and the caller's key; inference-mode tensors, which have no version
    counter, are read every time."""

    def __init__(self, size: int = 8):
        self.size = size
        self.entries: list[tuple] = []

    def get(self, tensor: torch.Tensor, key, compute):
        version = None if tensor.is_inference() else tensor._version
        if version is not None:
            for ref, ver, k, value in self.entries:
                if ref() is tensor and ver == version and k == key:
                    return value
        value = compute()
        if version is not None:
            alive = [e for e in self.entries if e[0]() is not None and e[0]() is not tensor]
            self.entries = alive[-(self.size - 1):] + [(weakref.ref(tensor), version, key, value)]
        return value


_memo = _Memo()


class _Rows(NamedTuple):
    """Documents for flash_attn_varlen_func: which (batch, position) rows of q and of k / v form them (None: every
    row, flattened), their int32 offsets on the device, the longest of each, and how many keys (from the first) the
    rows are taken from."""
    q_index: tuple[torch.Tensor, torch.Tensor] | None
    k_index: tuple[torch.Tensor, torch.Tensor] | None
    cu_q: torch.Tensor
    cu_k: torch.Tensor
    max_q: int
    max_k: int
    keys: int


class _Padding(NamedTuple):
    all_valid: bool
    gaps: bool  # some row's tokens are not contiguous
    rows: _Rows | None


def _offsets(lengths: torch.Tensor, device) -> torch.Tensor:
    return F.pad(lengths.cumsum(0), (1, 0)).to(device=device, dtype=torch.int32)


@torch.compiler.disable
def _padding_plan(mask: torch.Tensor, nq: int, nk: int) -> _Padding:
    """The documents of a (B, L) padding mask over the first L keys, the queries being the last nq of them: one copy
    of the mask to the host, then offsets and row indices copied back."""
    def compute():
        m = mask.detach().to("cpu", torch.bool)
        length = m.shape[1]
        lens_k = m.sum(1)
        if bool(lens_k.sum() == m.numel()):
            return _Padding(True, False, None)
        first = m.int().argmax(1)
        last = length - 1 - m.flip(1).int().argmax(1)
        gaps = bool(((last - first + 1 != lens_k) & (lens_k > 0)).any())
        qm = m[:, length - nq:]
        lens_q = qm.sum(1)
        dev = mask.device
        rows = _Rows(tuple(i.to(dev) for i in qm.nonzero(as_tuple=True)),
                     tuple(i.to(dev) for i in m.nonzero(as_tuple=True)), _offsets(lens_q, dev), _offsets(lens_k, dev),
                     int(lens_q.max()), int(lens_k.max()), length)
        return _Padding(False, gaps, rows)
    return _memo.get(mask, ("padding", nq, nk), compute)


def _starts_rows(starts: torch.Tensor, total: int, keys: int, device) -> _Rows:
    """Flattened rows cut into documents at the True entries of `starts` (host, (total,), the first True)."""
    cu = torch.cat([starts.nonzero().flatten(), torch.tensor([total])])
    longest = int(cu.diff().max())
    cu = cu.to(device=device, dtype=torch.int32)
    return _Rows(None, None, cu, cu, longest, longest, keys)


@torch.compiler.disable
def _document_plan(ids: torch.Tensor, device) -> _Rows:
    """Flattened rows of (B, N) document ids: a document starts at each row's start and wherever the id changes."""
    def compute():
        d = ids.detach().cpu()
        starts = torch.ones_like(d, dtype=torch.bool)
        starts[:, 1:] = d[:, 1:] != d[:, :-1]
        return _starts_rows(starts.flatten(), d.numel(), d.shape[1], device)
    return _memo.get(ids, ("documents", str(device)), compute)


@torch.compiler.disable
def _position_plan(position_ids: torch.Tensor, device) -> _Rows | None:
    """One row's documents from its positions (a document starts wherever a position is not the previous one plus
    one, as transformers' masks define them), or None when the row is a single run."""
    def compute():
        p = position_ids.detach().reshape(-1).cpu()
        starts = torch.ones_like(p, dtype=torch.bool)
        starts[1:] = p[1:] != p[:-1] + 1
        if int(starts.sum()) == 1:
            return None
        return _starts_rows(starts, p.numel(), p.numel(), device)
    return _memo.get(position_ids, ("positions", str(device)), compute)


def _packed_rows(kwargs: dict, b: int, nq: int, nk: int, device) -> _Rows | None:
    """Packed rows given without a mask: the offsets flash attention's kwargs carry, or position ids that restart
    within a single row."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    if cu_q is not None and cu_k is not None and max_q is not None and max_k is not None:
        return _Rows(None, None, cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k), nk)
    pos = kwargs.get("position_ids")
    if (b == 1 and nq == nk and nq > 1 and isinstance(pos, torch.Tensor) and pos.dim() == 2 and pos.shape[0] == 1
            and pos.shape[1] == nq):
        return _position_plan(pos, device)
    return None


# ---------------------------------------------------------------- the attention function


class _Dense(NamedTuple):
    keys: int  # the first `keys` keys (a static cache's later slots dropped)


class _General(NamedTuple):
    mask: torch.Tensor


def _window(sliding_window, causal: bool) -> tuple[int, int]:
    """transformers' sliding window as the kernels' (left, right): causal, query i sees keys i - W + 1 .. i
    (``kv_idx > q_idx - W``), W keys; otherwise |i - j| <= W."""
    if sliding_window is None or sliding_window <= 0:
        return (-1, -1)
    w = int(sliding_window)
    return (w - 1, 0) if causal else (w, w)


@torch.compiler.assume_constant_result
def _head_dims_of_build() -> tuple[int, ...]:
    # A property of the build: read once, while tracing too (torch.compile would otherwise trace the query).
    return tuple(head_dims())


def _dims() -> tuple[int, ...]:
    global _built_dims
    if _built_dims is None:
        _built_dims = _head_dims_of_build()
    return _built_dims


def _kernel_reason(query, key, value, dropout, kwargs) -> tuple[tuple[str, str] | None, torch.dtype | None]:
    """(why the kernels cannot take this call, or None; the dtype they compute in)."""
    if dropout:
        return ("dropout", f"dropout={dropout!r} (attention dropout while training; the kernels have none)"), None
    if kwargs.get("output_attentions"):
        return ("output_attentions", "output_attentions=True (the kernels do not form the attention weights)"), None
    for option in ("s_aux", "position_bias", "cache"):
        if kwargs.get(option) is not None:
            what = {"s_aux": "attention sinks (s_aux)", "position_bias": "an additive position_bias",
                    "cache": "a paged cache (continuous batching)"}[option]
            return (option, f"{what} is not supported by the kernels"), None
    tensors = (query, key, value)
    if any(not isinstance(t, torch.Tensor) or t.is_nested or t.dim() != 4 for t in tensors):
        return ("shape", "query, key and value must be 4-D (batch, heads, seq, head_dim) dense tensors"), None
    b, hq, nq, d = query.shape
    if key.shape[:3] != value.shape[:3] or key.shape[0] != b or key.shape[3] != d:
        return ("shape", (f"query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} are "
                          "not (B, Hq, Nq, D), (B, Hk, Nk, D), (B, Hk, Nk, Dv)")), None
    hk, nk = key.shape[1], key.shape[2]
    if query.numel() == 0 or nk == 0 or hk == 0 or hq % hk:
        return ("shape", (f"{hq} query heads over {hk} key/value heads, {nq} queries, {nk} keys (the kernels need "
                          "key/value heads dividing the query heads and non-empty tensors)")), None
    if any(t.device != query.device for t in tensors) or query.device.type not in _KERNEL_DEVICE_TYPES:
        return ("device", (f"query, key and value are on {query.device}, {key.device}, {value.device} (the kernels "
                           "take CUDA tensors)")), None
    dtypes = {t.dtype for t in tensors}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    if dtype not in _KERNEL_DTYPES:
        kind = query.device.type
        target = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
        if target in _KERNEL_DTYPES and all(t.dtype.is_floating_point and t.dtype != torch.float64 for t in tensors):
            dtype = target  # what SDPA and transformers' flash attention compute in under autocast
        else:
            return ("dtype", (f"query, key and value are {', '.join(str(t.dtype) for t in tensors)} (the kernels "
                              "compute in bfloat16 or float16; float32 runs on them under autocast)")), None
    if value.shape[3] != d:
        return ("head_dim", f"value's head dimension {value.shape[3]} differs from query's {d}"), None
    if d not in _dims():
        return ("head_dim", f"head dimension {d} (this build's kernels take {', '.join(map(str, _dims()))})"), None
    return None, dtype


def _plan(attention_mask, query, key, causal: bool, window, softcap, kwargs):
    """What runs on the kernels (_Dense, _Rows, _General), or a fallback reason."""
    b, _, nq, _ = query.shape
    nk = key.shape[2]
    mask = attention_mask
    if mask is None:
        rows = _packed_rows(kwargs, b, nq, nk, query.device)
        return _Dense(nk) if rows is None else rows
    if not isinstance(mask, torch.Tensor):
        return "attention_mask", f"an attention mask of type {type(mask).__name__}"
    if mask.dim() == 2 and _DOC_IDS.get(id(mask)) is mask:
        if mask.shape != (b, nq) or nq != nk:
            return "attention_mask", f"document ids of shape {tuple(mask.shape)} for {nq} queries and {nk} keys"
        return _document_plan(mask, query.device)
    if mask.dim() == 2:
        if mask.shape[0] != b or not nq <= mask.shape[1] <= nk or mask.dtype.is_floating_point:
            return "attention_mask", (f"a 2-D mask of shape {tuple(mask.shape)} and dtype {mask.dtype} for {nq} "
                                      f"queries and {nk} keys (a padding mask is (batch, keys), 1 for tokens)")
        padding = _padding_plan(mask, nq, nk)
        if padding.all_valid:
            return _Dense(mask.shape[1])
        if padding.gaps and window != (-1, -1):
            return "attention_mask", ("a padding mask with gaps inside a row under a sliding window (the window counts "
                                      "the gaps' positions, which the documents drop)")
        return padding.rows
    if mask.dim() == 4:
        if softcap:
            return "attention_mask", "a 4-D attention mask with a softcap (tk_ops' SDPA takes no softcap)"
        return _General(mask)
    return "attention_mask", f"an attention mask of shape {tuple(mask.shape)}"


def _gather(t: torch.Tensor, keys: int, index) -> torch.Tensor:
    """(B, H, N, D) -> (rows, H, D): the rows `index` picks among the first `keys` positions (all, flattened, when
    None)."""
    t = t[:, :, :keys].transpose(1, 2)
    return t.reshape(-1, t.shape[2], t.shape[3]) if index is None else t[index]


def attention_forward(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask,
                      dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
                      softcap: float | None = None, is_causal: bool | None = None, *, strict: bool = False,
                      **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The tk_ops attention with transformers' attention-function interface (what :func:`register` installs).

    ``query`` (B, Hq, Nq, D), ``key`` and ``value`` (B, Hk, Nk, D) as the model's attention module passes them (Hk
    dividing Hq; Nk >= Nq with a KV cache), ``attention_mask`` as :func:`prepare_mask` made it (or a 4-D mask),
    ``scaling`` the score scale, ``sliding_window`` transformers' window (W keys up to the query), ``softcap`` the
    score cap, ``is_causal`` overriding ``module.is_causal``; keyword arguments ``position_ids``, ``cu_seq_lens_q``,
    ``cu_seq_lens_k``, ``max_length_q``, ``max_length_k`` for packed rows. Returns ``(out (B, Nq, Hq, D), None)``, or
    the fallback's (out, weights) (module docstring for what runs where)."""
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = _window(sliding_window, causal)
    found, dtype = _kernel_reason(query, key, value, dropout, kwargs)
    plan = None
    if found is None:
        plan = _plan(attention_mask, query, key, causal, window, softcap, kwargs)
        if type(plan) is tuple:  # (reason, what); the plans are named tuples
            found = plan
    if found is not None:
        return _fallback(found, strict, module, query, key, value, attention_mask, dropout, scaling, sliding_window,
                         softcap, causal, kwargs)
    if query.dtype != dtype:
        query = query.to(dtype)
    if key.dtype != dtype:
        key = key.to(dtype)
    if value.dtype != dtype:
        value = value.to(dtype)
    cap = float(softcap) if softcap else 0.0
    if isinstance(plan, _Dense):
        if plan.keys != key.shape[2]:
            key, value = key[:, :, :plan.keys], value[:, :, :plan.keys]
        # O comes back in q's memory order: (B, N, H, D) for the projections' (B, N, H, D) views, so the transpose
        # is the contiguous tensor the output projection reads.
        return _tk_attention(query, key, value, causal, scaling, window, cap).transpose(1, 2), None
    if isinstance(plan, _General):
        out = scaled_dot_product_attention(query, key, value, attn_mask=plan.mask, scale=scaling,
                                           enable_gqa=query.shape[1] != key.shape[1], strict=strict)
        return out.transpose(1, 2), None
    b, hq, nq, d = query.shape
    out = flash_attn_varlen_func(_gather(query, nq, plan.q_index), _gather(key, plan.keys, plan.k_index),
                                 _gather(value, plan.keys, plan.k_index), plan.cu_q, plan.cu_k, plan.max_q, plan.max_k,
                                 softmax_scale=scaling, causal=causal, window_size=window, softcap=cap)
    if plan.q_index is None:
        return out.reshape(b, nq, hq, d), None
    full = out.new_zeros(b, nq, hq, d)  # padded query rows see no key: 0, as flash attention's padding gives
    full[plan.q_index] = out
    return full, None


# ---------------------------------------------------------------- fallback


def _documents(cu: torch.Tensor, total: int, device):
    """Per row of `total` flattened rows: its document (-1 past the last offset), its index in it, the document's
    length."""
    cu = cu.to(device=device, dtype=torch.long)
    rows = torch.arange(total, device=device)
    doc = torch.searchsorted(cu, rows, right=True) - 1
    inside = (doc >= 0) & (doc < cu.numel() - 1)
    at = doc.clamp(0, max(cu.numel() - 2, 0))
    start, length = cu[at], cu[at + 1] - cu[at]
    return torch.where(inside, doc, -1), rows - start, length


def _document_visible(cu_q, cu_k, tq: int, tk: int, causal: bool, window, device) -> torch.Tensor:
    """(1, 1, tq, tk) bool: the kernels' varlen semantics, each document its own problem aligned bottom-right."""
    dq, iq, lq = _documents(cu_q, tq, device)
    dk, ik, lk = _documents(cu_k, tk, device)
    rel = ik[None, :] - (iq[:, None] + lk[None, :] - lq[:, None])
    visible = (dq[:, None] == dk[None, :]) & (dq[:, None] >= 0)
    left, right = window
    if causal:
        right = 0
    if right >= 0:
        visible &= rel <= right
    if left >= 0:
        visible &= rel >= -left
    return visible[None, None]


def _reference_inputs(query, key, value, attention_mask, causal: bool, window, kwargs):
    """(query, key, value, mask, is_causal, flattened) for transformers' functions: the mask the kernels would have
    used, materialised as (B, 1, Nq, Nk) booleans (None where SDPA's own is_causal says the same), on (1, H, rows, D)
    tensors for packed rows (flattened True)."""
    b, _, nq, _ = query.shape
    nk = key.shape[2]
    device = query.device
    mask = attention_mask
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and _DOC_IDS.get(id(mask)) is mask:
        band = attention_visible(nq, nk, causal, window, device)
        return query, key, value, (mask[:, :, None] == mask[:, None, :])[:, None] & band, False, False
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        keys = mask.shape[1]
        band = attention_visible(nq, keys, causal, window, device)
        visible = band & mask.to(device=device, dtype=torch.bool)[:, None, None, :]
        return query, key[:, :, :keys], value[:, :, :keys], visible, False, False
    if mask is not None:
        return query, key, value, mask, False, False
    cu = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if (cu[0] is not None and cu[1] is not None and kwargs.get("max_length_q") is not None
            and kwargs.get("max_length_k") is not None):
        cu_q, cu_k = cu
    else:
        pos = kwargs.get("position_ids")
        rows = None
        if b == 1 and nq == nk and nq > 1 and isinstance(pos, torch.Tensor) and pos.shape == (1, nq):
            rows = _position_plan(pos, device)
        if rows is None:
            if window == (-1, -1) and (not causal or nq == nk or nq == 1):
                return query, key, value, None, causal and nq > 1, False
            return query, key, value, attention_visible(nq, nk, causal, window, device)[None, None], False, False
        cu_q = cu_k = rows.cu_q
    flat = [t.transpose(1, 2).reshape(1, -1, t.shape[1], t.shape[3]).transpose(1, 2) for t in (query, key, value)]
    visible = _document_visible(cu_q, cu_k, flat[0].shape[2], flat[1].shape[2], causal, window, device)
    return flat[0], flat[1], flat[2], visible, False, True


def _fallback(found, strict: bool, module, query, key, value, attention_mask, dropout, scaling, sliding_window,
              softcap, causal: bool, kwargs):
    reason, what = found
    if strict:
        raise REASONS[reason](f"{NAME}: {what}; the tk_ops kernels cannot run this call (register(strict=True))")
    out, weights = _transformers_attention(module, query, key, value, attention_mask, dropout, scaling,
                                           sliding_window, softcap, causal, kwargs)
    if reason not in _warned:  # after the call: one that raised spends no warning
        _warned.add(reason)
        warnings.warn(f"{NAME}: {what}; ran transformers' attention instead (shown once per process for the reason "
                      f"{reason!r}; register(strict=True) raises instead)", FallbackWarning, stacklevel=3)
    return out, weights


def _transformers_attention(module, query, key, value, attention_mask, dropout, scaling, sliding_window, softcap,
                            causal: bool, kwargs):
    """transformers' sdpa attention, or the model's eager attention where SDPA lacks the feature, on the mask the
    kernels would have used; rows that see no key give 0."""
    if kwargs.get("cache") is not None:  # a paged cache updates itself inside transformers' function
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=causal, **kwargs)
    window = _window(sliding_window, causal)
    b, hq, nq, _ = query.shape
    q, k, v, mask, sdpa_causal, flattened = _reference_inputs(query, key, value, attention_mask, causal, window,
                                                              kwargs)
    needs_eager = bool(softcap) or kwargs.get("s_aux") is not None or bool(kwargs.get("output_attentions"))
    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None) if needs_eager else None
    if needs_eager and eager is None:
        raise InputError(f"{NAME}: softcap, attention sinks or output_attentions on a call the kernels cannot take, "
                         f"and {type(module).__name__}'s module defines no eager_attention_forward to fall back to")
    if eager is not None:
        if mask is None and sdpa_causal:
            mask = attention_visible(q.shape[2], k.shape[2], True, window, q.device)[None, None]
        additive = mask
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            additive = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask,
                                                                                          torch.finfo(q.dtype).min)
        extra = {name: val for name, val in kwargs.items() if name not in _CONSUMED}
        if softcap is not None:
            extra["softcap"] = softcap
        out, weights = eager(module, q, k, v, additive, dropout=dropout, scaling=scaling, **extra)
    else:
        extra = {name: val for name, val in kwargs.items() if name == "position_bias"}
        out, weights = sdpa_attention_forward(module, q, k, v, mask, dropout=dropout, scaling=scaling,
                                              is_causal=sdpa_causal, **extra)
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        seen = mask.any(-1).expand(out.shape[0], -1, -1)  # (B, 1, Nq)
        out = out.masked_fill(~seen.transpose(1, 2)[..., None], 0.0)
    if flattened:
        out = out.reshape(b, nq, hq, out.shape[-1])
    return out, weights


# ---------------------------------------------------------------- linears


class SwapReport(NamedTuple):
    """What :func:`swap_linears` did: how many ``nn.Linear`` modules it replaced, and the others by name, with why."""
    swapped: int
    skipped: dict[str, str]


def _skip_reason(name: str, module: torch.nn.Linear, skip: tuple[str, ...]) -> str | None:
    if any(name == s or name.endswith("." + s) for s in skip):
        return "listed in skip"
    if type(module) is not torch.nn.Linear:
        return f"{type(module).__name__} is a subclass of nn.Linear with its own behaviour"
    for what, n in (("in_features", module.in_features), ("out_features", module.out_features)):
        if n % 8:
            return f"{what}={n} is not a multiple of 8 (tk_ops.nn.Linear's TMA row rule)"
    for what, p in (("weight", module.weight), ("bias", module.bias)):
        if p is not None and p.dtype != torch.bfloat16:
            return (f"{what} is {p.dtype}: tk_ops.nn.Linear computes in bfloat16 on bfloat16 parameters, and swapping "
                    "does not copy or convert them")
    if module._forward_hooks or module._forward_pre_hooks or "forward" in module.__dict__:
        return "has forward hooks or a replaced forward (an accelerate or PEFT hook), which a new module would lose"
    if name == "":
        return "the model itself is the nn.Linear (nothing holds it to replace)"
    return None


def _sharing(linear: torch.nn.Linear) -> _TkLinear:
    """A tk_ops.nn.Linear holding `linear`'s own Parameter objects (built on the meta device: nothing allocated)."""
    new = _TkLinear(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta",
                    dtype=torch.bfloat16)
    new.weight = linear.weight
    if linear.bias is not None:
        new.bias = linear.bias
    new.train(linear.training)
    return new


def swap_linears(model: torch.nn.Module, *, skip=()) -> SwapReport:
    """Replace, in place, every ``torch.nn.Linear`` of ``model`` that ``tk_ops.nn.Linear`` takes as it is (bfloat16
    weight and bias, in and out features multiples of 8) by a ``tk_ops.nn.Linear`` holding the same Parameter
    objects: nothing is copied, tied weights stay tied, an optimizer built before keeps working, and the state_dict
    keeps its keys. ``skip``: module names (or dotted suffixes of them, e.g. ``"lm_head"``, ``"mlp.down_proj"``) to
    leave alone. Subclasses of nn.Linear, modules with forward hooks, and layers in another dtype are left alone too.
    The tk_ops GEMM runs on CUDA: swap before or after moving the model there. Returns a :class:`SwapReport`: the
    number replaced and {name: reason} for every nn.Linear left alone (tk_ops.nn.Linear modules already there are not
    counted)."""
    skip = (skip,) if isinstance(skip, str) else tuple(skip)
    replaced: dict[int, _TkLinear] = {}
    skipped: dict[str, str] = {}
    places = []
    for name, module in model.named_modules(remove_duplicate=False):
        if not isinstance(module, torch.nn.Linear) or isinstance(module, _TkLinear):
            continue
        reason = _skip_reason(name, module, skip)
        if reason is not None:
            skipped[name] = reason
            continue
        places.append(name)
    for name in places:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        if id(old) not in replaced:
            replaced[id(old)] = _sharing(old)
        setattr(parent, child, replaced[id(old)])
    return SwapReport(len(replaced), skipped)
