"""tk_ops.scaled_dot_product_attention without a GPU or the extension: its signature against torch's own schema,
which calls the kernels and which fall back (the rules as a pure function, each reason's warning shown once, each
reason's error under strict=True), the top-left causal and boolean-mask mappings onto the kernels' bottom-right
bands (every band of small sizes, against masks built here), the plans computed through the float64 reference of
the kernels' semantics against torch's SDPA, the glue around the op (ranks, key slicing, gradients) with the op
replaced by that reference, the mask memo, and CPU tensors giving torch's SDPA bit for bit."""
import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tk_ops
from tk_ops import _ext, reference, sdpa
from tk_ops.errors import DeviceMismatchError, DTypeError
from tk_ops.sdpa import Band, FallbackWarning, causal_plan, fallback_reason, mask_plan

BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
CUDA = (torch.device("cuda"),) * 3
DIMS = (64, 96, 128, 256)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Each test starts with no reason warned yet (the set is per process)."""
    monkeypatch.setattr(sdpa, "_warned", set())


def kernel_visible(nq: int, nk: int, band: Band) -> torch.Tensor:
    """(nq, nk) bool: what the kernels compute for `band`, written from tk_ops.attention's docstring: on the first
    band.keys keys, query i sees key j when i + d - left <= j <= i + d + right, d = keys - nq, a side of -1
    unlimited, causal meaning right = 0; the keys past band.keys are not seen."""
    left, right = band.window
    if band.causal:
        right = 0
    d = band.keys - nq
    seen = torch.zeros(nq, nk, dtype=torch.bool)
    for i in range(nq):
        for j in range(band.keys):
            seen[i, j] = (left < 0 or j >= i + d - left) and (right < 0 or j <= i + d + right)
    return seen


def sdpa_top_left(nq: int, nk: int) -> torch.Tensor:
    """SDPA's is_causal as its documentation writes it: torch.ones(L, S).tril(diagonal=0)."""
    return torch.ones(nq, nk, dtype=torch.bool).tril(diagonal=0)


# ---------------------------------------------------------------- the signature


def test_signature_is_torchs():
    """Names, order, defaults and keyword-only marks of torch's own schema (scale and enable_gqa keyword-only, which
    its docstring does not show), then strict, keyword-only and off by default."""
    schema = torch.ops.aten.scaled_dot_product_attention.default._schema
    params = list(inspect.signature(tk_ops.scaled_dot_product_attention).parameters.values())
    assert [p.name for p in params] == [a.name for a in schema.arguments] + ["strict"]
    for p, a in zip(params, schema.arguments):
        assert (p.kind == inspect.Parameter.KEYWORD_ONLY) == a.kwarg_only, p.name
        if a.has_default_value():
            assert p.default == a.default_value and type(p.default) is type(a.default_value), p.name
        else:
            assert p.default is inspect.Parameter.empty, p.name
    assert params[-1].kind == inspect.Parameter.KEYWORD_ONLY and params[-1].default is False
    assert tk_ops.scaled_dot_product_attention is sdpa.scaled_dot_product_attention


def test_docstrings_reachable():
    for f in (tk_ops.scaled_dot_product_attention, sdpa.mask_plan, sdpa.causal_plan, sdpa.fallback_reason):
        assert f.__doc__ and len(f.__doc__) > 100, f.__name__
    assert "Example" in tk_ops.scaled_dot_product_attention.__doc__
    assert "top-left" in sdpa.__doc__ and "Autocast" in sdpa.__doc__


# ---------------------------------------------------------------- which calls fall back, and why


def reason(q=(2, 4, 16, 64), k=(2, 4, 20, 64), v=None, dtypes=(BF16,) * 3, devices=CUDA, **kw):
    found = fallback_reason(q, k, k if v is None else v, dtypes, devices, head_dims=kw.pop("head_dims", DIMS), **kw)
    return None if found is None else found[0]


@pytest.mark.parametrize("kw, expected", [
    (dict(), None),
    (dict(dtypes=(FP16,) * 3), None),
    (dict(q=(4, 16, 64), k=(4, 20, 64)), None),                          # 3-D: (H, N, E)
    (dict(q=(2, 3, 4, 16, 128), k=(2, 3, 4, 20, 128)), None),            # 5-D: two batch dimensions
    (dict(q=(2, 8, 16, 64), k=(2, 2, 20, 64), enable_gqa=True), None),
    (dict(is_causal=True, q=(2, 4, 30, 64)), None),                      # Nq > Nk, top-left
    (dict(attn_mask_dtype=torch.bool, attn_mask_device="cuda"), None),   # still to be read: mask_plan
    (dict(q=(2, 4, 0, 64), k=(2, 4, 0, 64)), None),                      # empty lengths: the op's business
    (dict(nested=True), "nested"),
    (dict(dropout_p=0.1), "dropout_p"),
    (dict(dropout_p=0.1, dtypes=(FP32,) * 3, devices=("cpu",) * 3), "dropout_p"),  # the first reason in order
    (dict(attn_mask_dtype=BF16), "attn_mask"),                           # additive mask
    (dict(attn_mask_dtype=torch.bool, is_causal=True), "attn_mask"),     # SDPA refuses the pair
    (dict(attn_mask_dtype=torch.bool, attn_mask_device="cpu"), "attn_mask"),
    (dict(dtypes=(FP32,) * 3), "dtype"),
    (dict(dtypes=(FP64,) * 3), "dtype"),
    (dict(dtypes=(BF16, FP16, BF16)), "dtype"),                          # SDPA refuses
    (dict(q=(16, 64), k=(20, 64)), "shape"),                             # 2-D
    (dict(q=(2, 4, 16, 64), k=(4, 20, 64)), "shape"),                    # ranks differ (broadcast)
    (dict(q=(2, 4, 16, 64), k=(1, 4, 20, 64)), "shape"),                 # batch broadcast
    (dict(k=(2, 4, 20, 64), v=(2, 4, 21, 64)), "shape"),                 # key and value lengths differ
    (dict(k=(2, 4, 20, 128), v=(2, 4, 20, 64)), "shape"),                # key's E differs from query's
    (dict(q=(2, 6, 16, 64), k=(2, 4, 20, 64), enable_gqa=True), "shape"),  # 4 does not divide 6
    (dict(q=(2, 8, 16, 64), k=(2, 2, 20, 64)), "enable_gqa"),
    (dict(q=(2, 8, 16, 64), k=(2, 1, 20, 64)), "enable_gqa"),            # SDPA broadcasts one head
    (dict(v=(2, 4, 20, 128)), "head_dim"),                               # Ev != E
    (dict(q=(2, 4, 16, 80), k=(2, 4, 20, 80)), "head_dim"),
    (dict(q=(2, 4, 16, 96), k=(2, 4, 20, 96), head_dims=(64, 128)), "head_dim"),  # a build without 96
    (dict(q=(2, 4, 16, 80), k=(2, 4, 20, 80), head_dims=None), None),   # head dims unknown: not checked
    (dict(devices=("cpu",) * 3), "device"),
    (dict(devices=("meta",) * 3), "device"),
    (dict(devices=("cuda:0", "cuda:1", "cuda:0")), "device"),
], ids=lambda x: repr(x) if isinstance(x, str) or x is None else None)
def test_fallback_reasons(kw, expected):
    assert reason(**kw) == expected


def test_every_reason_has_a_tk_ops_error():
    assert set(sdpa.REASONS) == {"nested", "dropout_p", "attn_mask", "dtype", "shape", "enable_gqa", "head_dim",
                                 "device"}
    assert sdpa.REASONS["dtype"] is DTypeError and sdpa.REASONS["device"] is DeviceMismatchError
    assert all(issubclass(e, tk_ops.TkOpsError) for e in sdpa.REASONS.values())


@pytest.mark.parametrize("kw, words", [
    (dict(dropout_p=0.25), "dropout_p=0.25"),
    (dict(attn_mask_dtype=FP32), "attn_mask has dtype torch.float32"),
    (dict(dtypes=(FP32,) * 3), "query.dtype is torch.float32"),
    (dict(q=(2, 8, 16, 64), k=(2, 2, 20, 64)), "enable_gqa=True"),
    (dict(v=(2, 4, 20, 32)), "value's head dimension 32"),
    (dict(q=(2, 4, 16, 80), k=(2, 4, 20, 80)), "head dimension 80"),
    (dict(devices=("cpu",) * 3), "on cpu"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_reason_messages_name_the_argument(kw, words):
    q, k = kw.pop("q", (2, 4, 16, 64)), kw.pop("k", (2, 4, 20, 64))
    found = fallback_reason(q, k, kw.pop("v", k), kw.pop("dtypes", (BF16,) * 3), kw.pop("devices", CUDA),
                            head_dims=DIMS, **kw)
    assert found is not None and words in found[1], found


def test_autocast_dtype():
    """SDPA's autocast casts every floating input but float64 to the autocast dtype (fp16 under a bf16 autocast too);
    without autocast nothing changes."""
    assert sdpa.autocast_dtype(FP32, BF16) == BF16
    assert sdpa.autocast_dtype(FP16, BF16) == BF16
    assert sdpa.autocast_dtype(BF16, FP16) == FP16
    assert sdpa.autocast_dtype(FP64, BF16) == FP64
    assert sdpa.autocast_dtype(torch.int32, BF16) == torch.int32
    assert sdpa.autocast_dtype(FP32, None) == FP32
    assert sdpa.autocast_dtype(FP32, FP32) == FP32  # an autocast dtype the kernels lack: "dtype" then


# ---------------------------------------------------------------- causal alignment and boolean masks


@pytest.mark.parametrize("nq", range(8))
@pytest.mark.parametrize("nk", range(8))
def test_causal_plan_is_top_left(nq, nk):
    """SDPA's is_causal mask, built as its docs write it, is exactly what the kernels compute for the plan: no row
    that SDPA lets see a key is empty (with Nq > Nk every row sees key 0), none sees a key SDPA hides."""
    band = causal_plan(nq, nk)
    assert 0 <= band.keys <= nk
    assert torch.equal(kernel_visible(nq, nk, band), sdpa_top_left(nq, nk)), band
    if nq > nk > 0:
        assert sdpa_top_left(nq, nk).any(dim=1).all()  # no empty row: nothing to zero, unlike bottom-right causal


def test_causal_plan_shapes():
    assert causal_plan(5, 5) == Band(True, (-1, -1), 5)
    assert causal_plan(7, 3) == Band(False, (-1, 4), 3)     # the window's right side reaches the top-left diagonal
    assert causal_plan(3, 7) == Band(True, (-1, -1), 3)     # keys 3.. are seen by no query: dropped
    # The kernels' own causal with Nq != Nk is the other alignment: a plan that passed causal through would fail.
    assert not torch.equal(kernel_visible(7, 3, Band(True, (-1, -1), 3)), sdpa_top_left(7, 3))
    assert not torch.equal(kernel_visible(3, 7, Band(True, (-1, -1), 7)), sdpa_top_left(3, 7))


def offset_band(nq, nk, lo, hi):
    """(nq, nk) bool: query i sees key j when lo <= j - i <= hi."""
    offsets = torch.arange(nk) - torch.arange(nq)[:, None]
    return (offsets >= lo) & (offsets <= hi)


def band_masks(nq, nk):
    """Every mask lo <= j - i <= hi (within the matrix) of an (nq, nk) problem, with (lo, hi)."""
    for lo in range(-nq, nk + 1):
        for hi in range(lo, nk + 1):
            yield lo, hi, offset_band(nq, nk, lo, hi)


@pytest.mark.parametrize("nq", range(1, 7))
@pytest.mark.parametrize("nk", range(1, 7))
def test_mask_plan_every_band(nq, nk):
    """Every band of an (nq, nk) problem maps onto a plan whose kernel mask is the same mask, except those whose last
    query row sees nothing (or nothing is seen), which the kernels' bottom-right alignment cannot express: None."""
    for lo, hi, mask in band_masks(nq, nk):
        band = mask_plan(mask, (nq, nk))
        if not mask[-1].any():
            assert band is None, (lo, hi)
            continue
        assert band is not None, (lo, hi)
        assert torch.equal(kernel_visible(nq, nk, band), mask), (lo, hi, band)
        assert band.window[0] >= -1 and band.window[1] >= -1 and 1 <= band.keys <= nk


def test_mask_plan_named_masks():
    n = 6
    causal = sdpa_top_left(n, n)
    assert mask_plan(causal, (n, n)) == Band(True, (-1, -1), n)
    # top-left causal, Nq < Nk: the keys past Nq are dropped
    assert mask_plan(sdpa_top_left(3, 8), (3, 8)) == Band(True, (-1, -1), 3)
    # bottom-right causal, Nq > Nk: the top rows see nothing and give 0, as SDPA's math backend gives
    bottom_right = torch.ones(8, 3, dtype=torch.bool).tril(diagonal=3 - 8)
    assert mask_plan(bottom_right, (8, 3)) == Band(True, (-1, -1), 3)
    # a causal sliding window of 2 keys back
    window = causal & ~torch.ones(n, n, dtype=torch.bool).tril(diagonal=-3)
    assert mask_plan(window, (n, n)) == Band(True, (2, -1), n)
    # everything visible: no mask at all
    assert mask_plan(torch.ones(4, 9, dtype=torch.bool), (4, 9)) == Band(False, (-1, -1), 9)


def test_mask_plan_rejects():
    n = 5
    causal = sdpa_top_left(n, n)
    torch.manual_seed(0)
    random = torch.rand(n, n) < 0.5
    random[:, 0] = True
    assert mask_plan(random, (n, n)) is None
    holes = causal.clone()
    holes[3, 1] = False                                   # a band with a hole
    assert mask_plan(holes, (n, n)) is None
    assert mask_plan(torch.zeros(n, n, dtype=torch.bool), (n, n)) is None
    last_empty = causal.clone()
    last_empty[-1] = False
    assert mask_plan(last_empty, (n, n)) is None
    assert mask_plan(causal.float(), (n, n)) is None      # not boolean
    assert mask_plan(causal, (n, n + 1)) is None          # not broadcastable
    assert mask_plan(causal[None, None], (n, n)) is None  # more dimensions than the attention weights
    assert mask_plan(causal[0], (n, n)) is None           # 1-D
    padding = torch.ones(1, n, dtype=torch.bool)
    padding[0, 3:] = False                                # a key padding mask: a band only for one query row
    assert mask_plan(padding, (4, n)) is None
    assert mask_plan(padding, (1, n)) == Band(False, (-1, -1), 3)  # decoding with padding at the end: 3 keys


def test_mask_plan_broadcast_slices():
    """A batched mask runs on the kernels only when every slice is the same band."""
    causal = sdpa_top_left(6, 6)
    batched = causal.expand(3, 1, 6, 6).clone()
    assert mask_plan(batched, (3, 4, 6, 6)) == Band(True, (-1, -1), 6)
    batched[2, 0, 5, 0] = False  # one slice differs (left padding of one sequence)
    assert mask_plan(batched, (3, 4, 6, 6)) is None
    assert mask_plan(causal.expand(3, 1, 6, 6).clone(), (2, 4, 6, 6)) is None  # batch 3 against 2


# ---------------------------------------------------------------- the plans against torch's SDPA, in float64


def qkv(b, hq, hk, nq, nk, d, dtype=FP64, requires_grad=False):
    q = torch.randn(b, hq, nq, d, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(b, hk, nk, d, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(b, hk, nk, d, dtype=dtype, requires_grad=requires_grad)
    return q, k, v


def kernels_semantics(q, k, v, band, scale=None):
    """What the kernels compute for the plan, by the float64 reference of their semantics (tk_ops.reference)."""
    keys = band.keys
    return reference.attention(q, k[..., :keys, :], v[..., :keys, :], band.causal, scale, band.window)[0]


@pytest.mark.parametrize("nq, nk", [(9, 9), (4, 13), (13, 4), (1, 7), (7, 1)])
@pytest.mark.parametrize("gqa", [False, True])
def test_causal_plan_computes_sdpa(nq, nk, gqa):
    q, k, v = qkv(2, 4, 2 if gqa else 4, nq, nk, 16)
    with sdpa_kernel(SDPBackend.MATH):  # SDPA's semantics as its documentation writes them
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=gqa)
    ours = kernels_semantics(q, k, v, causal_plan(nq, nk), scale=0.3)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, nq, nk, mask", [
    ("top-left causal", 5, 11, sdpa_top_left(5, 11)),
    ("bottom-right causal, empty top rows", 11, 5, torch.ones(11, 5, dtype=torch.bool).tril(diagonal=5 - 11)),
    ("window 3 back", 10, 10, sdpa_top_left(10, 10) & ~torch.ones(10, 10, dtype=torch.bool).tril(diagonal=-4)),
    ("two-sided window", 9, 12, offset_band(9, 12, -2, 4)),
    ("offset band past the diagonal", 6, 12, offset_band(6, 12, 3, 5)),
], ids=lambda x: x if isinstance(x, str) else "")
def test_mask_plan_computes_sdpa(name, nq, nk, mask):
    """Rows a mask leaves empty: SDPA's math backend gives 0, the kernels give 0."""
    q, k, v = qkv(2, 3, 3, nq, nk, 16)
    band = mask_plan(mask[None, None], (2, 3, nq, nk))
    assert band is not None
    with sdpa_kernel(SDPBackend.MATH):
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(kernels_semantics(q, k, v, band), theirs, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the glue around the op, with a CPU stand-in


@pytest.fixture
def stand_in(monkeypatch):
    """The attention op replaced by its float64 reference (differentiable), recording what it receives."""
    calls = []

    def call(family, op, name, q, k, v, causal, scale, left, right, softcap):
        assert (family, op, name) == ("attention", "attention_fwd", "tk_ops.scaled_dot_product_attention")
        assert q.dim() == 4 and isinstance(causal, bool) and isinstance(left, int) and isinstance(right, int)
        calls.append(dict(q=q, k=k, v=v, causal=causal, scale=scale, window=(left, right), softcap=softcap))
        o, lse = reference.attention(q, k, v, causal, scale, (left, right), softcap)
        return o.to(q.dtype), lse.float()

    monkeypatch.setattr(_ext, "call", call)
    return calls


@pytest.mark.parametrize("shape_q, shape_k", [((3, 9, 16), (3, 5, 16)), ((2, 4, 9, 16), (2, 2, 5, 16)),
                                              ((2, 3, 4, 9, 16), (2, 3, 2, 5, 16)), ((0, 4, 9, 16), (0, 2, 5, 16))],
                         ids=["3d", "4d", "5d", "empty-batch"])
@pytest.mark.parametrize("nk_scale", [1, 3], ids=["nq>nk", "nq<nk"])
def test_kernel_path_any_rank(stand_in, shape_q, shape_k, nk_scale):
    """Leading dimensions folded into one batch and split again, keys sliced for Nq < Nk, gradients through all of
    it: equal to SDPA (float64) forward and backward."""
    shape_k = shape_k[:-2] + (shape_k[-2] * nk_scale, shape_k[-1])
    q = torch.randn(shape_q, dtype=FP64, requires_grad=True)
    k = torch.randn(shape_k, dtype=FP64, requires_grad=True)
    v = torch.randn(shape_k, dtype=FP64, requires_grad=True)
    gqa = q.shape[-3] != k.shape[-3]
    band = causal_plan(q.shape[-2], k.shape[-2])
    ours = sdpa._kernel_path(q, k, v, band, 0.25, FP64)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.25, enable_gqa=gqa)
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    assert len(stand_in) == 1 and stand_in[0]["k"].shape[-2] == band.keys and stand_in[0]["scale"] == 0.25
    if q.numel():
        dout = torch.randn_like(theirs)
        got = torch.autograd.grad(ours, (q, k, v), dout)
        want = torch.autograd.grad(theirs, (q, k, v), dout)
        for name, g, w in zip("qkv", got, want):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=f"d{name}")
        if nk_scale > 1:  # keys no query sees: gradient exactly zero
            assert (got[1][..., band.keys:, :] == 0).all() and (got[2][..., band.keys:, :] == 0).all()


def test_kernel_path_casts_to_the_compute_dtype(stand_in):
    """Autocast's part: inputs cast to the dtype the plan computes in, output in that dtype, gradients back to the
    leaves' dtype."""
    q, k, v = qkv(1, 2, 2, 5, 5, 16, dtype=FP32, requires_grad=True)
    out = sdpa._kernel_path(q, k, v, Band(False, (-1, -1), 5), None, FP64)
    assert out.dtype == FP64 and stand_in[0]["q"].dtype == FP64
    out.sum().backward()
    assert q.grad.dtype == FP32 and k.grad.dtype == FP32


# ---------------------------------------------------------------- the mask memo


def test_mask_memo(monkeypatch):
    reads = []
    real = sdpa.mask_plan
    monkeypatch.setattr(sdpa, "mask_plan", lambda m, s: reads.append(1) or real(m, s))
    monkeypatch.setattr(sdpa, "_mask_memo", None)
    mask = sdpa_top_left(6, 6)
    assert sdpa._plan_for_mask(mask, (1, 2, 6, 6)) == Band(True, (-1, -1), 6)
    assert sdpa._plan_for_mask(mask, (1, 2, 6, 6)) == Band(True, (-1, -1), 6)
    assert len(reads) == 1, "the same mask, unchanged, is read once"
    assert sdpa._plan_for_mask(mask, (3, 2, 6, 6)) == Band(True, (-1, -1), 6)  # another attention shape: read again
    assert len(reads) == 2
    mask.fill_(True)                                      # modified in place: its version moves
    assert sdpa._plan_for_mask(mask, (3, 2, 6, 6)) == Band(False, (-1, -1), 6)
    assert len(reads) == 3
    other = sdpa_top_left(6, 6)                           # equal values, another tensor
    sdpa._plan_for_mask(other, (1, 2, 6, 6))
    assert len(reads) == 4
    with torch.inference_mode():
        frozen = sdpa_top_left(6, 6)
    sdpa._plan_for_mask(frozen, (1, 2, 6, 6))
    sdpa._plan_for_mask(frozen, (1, 2, 6, 6))
    assert len(reads) == 6, "an inference tensor has no version counter: read at every call"


# ---------------------------------------------------------------- the fallback itself, on CPU tensors


def cpu_cases():
    """(id, args, kwargs) of SDPA calls on CPU tensors, each a different path through torch's SDPA."""
    def t(*shape, dtype=BF16):
        return torch.randn(*shape).to(dtype)
    causal = sdpa_top_left(6, 9)
    return [
        ("plain-bf16", (t(2, 4, 6, 64), t(2, 4, 9, 64), t(2, 4, 9, 64)), {}),
        ("causal-nq<nk-scale", (t(2, 4, 6, 64), t(2, 4, 9, 64), t(2, 4, 9, 64)), dict(is_causal=True, scale=0.2)),
        ("causal-nq>nk-fp32", (t(2, 4, 9, 64, dtype=FP32), t(2, 4, 6, 64, dtype=FP32), t(2, 4, 6, 64, dtype=FP32)),
         dict(is_causal=True)),
        ("bool-mask", (t(2, 4, 6, 64), t(2, 4, 9, 64), t(2, 4, 9, 64)), dict(attn_mask=causal)),
        ("float-mask", (t(2, 4, 6, 64), t(2, 4, 9, 64), t(2, 4, 9, 64)), dict(attn_mask=t(6, 9))),
        ("gqa-3d", (t(4, 6, 64), t(2, 9, 64), t(2, 9, 64)), dict(enable_gqa=True)),
        ("5d-ev", (t(2, 2, 4, 6, 64), t(2, 2, 4, 9, 64), t(2, 2, 4, 9, 32)), {}),
        ("dropout", (t(2, 4, 6, 64), t(2, 4, 9, 64), t(2, 4, 9, 64)), dict(dropout_p=0.3)),
    ]


@pytest.mark.parametrize("case", cpu_cases(), ids=lambda c: c[0])
def test_cpu_tensors_give_torchs_result(case):
    """Every argument reaches torch's SDPA as given (positions and keywords): equal bit for bit, forward and
    backward (dropout from the same seed)."""
    _, args, kwargs = case
    ours_in = [a.clone().requires_grad_() for a in args]
    theirs_in = [a.clone().requires_grad_() for a in args]
    torch.manual_seed(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        ours = tk_ops.scaled_dot_product_attention(*ours_in, **kwargs)
    torch.manual_seed(7)
    theirs = F.scaled_dot_product_attention(*theirs_in, **kwargs)
    assert ours.dtype == theirs.dtype and torch.equal(ours, theirs)
    dout = torch.randn_like(theirs)
    for g, w in zip(torch.autograd.grad(ours, ours_in, dout), torch.autograd.grad(theirs, theirs_in, dout)):
        assert torch.equal(g, w)


def warned(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [w for w in seen if issubclass(w.category, FallbackWarning)]


def reason_calls(strict=False):
    """{reason: call} on CPU tensors, one per reason the CPU can reach (device comes last in the order, so every
    argument's own reason shows here)."""
    def t(*shape, dtype=BF16):
        return torch.randn(*shape).to(dtype)

    def f(*args, **kwargs):
        return tk_ops.scaled_dot_product_attention(*args, strict=strict, **kwargs)

    q, k = t(1, 4, 6, 64), t(1, 4, 8, 64)
    # SDPA's nested layout: (B, H, jagged N, E), from sequences of (N_i, H, E)
    nested = [torch.nested.nested_tensor([t(6, 4, 64), t(5, 4, 64)], layout=torch.jagged).transpose(1, 2)
              for _ in range(3)]
    return {
        "device": lambda: f(q, k, k),
        "dropout_p": lambda: f(q, k, k, dropout_p=0.5),
        "attn_mask": lambda: f(q, k, k, attn_mask=t(6, 8)),
        "dtype": lambda: f(q.float(), k.float(), k.float()),
        "shape": lambda: f(q.expand(2, 4, 6, 64), k, k),       # batch dimensions that broadcast
        "enable_gqa": lambda: f(q, k[:, :1], k[:, :1]),
        "head_dim": lambda: f(q, k, t(1, 4, 8, 32)),
        "nested": lambda: f(*nested),
    }


@pytest.mark.parametrize("name", list(reason_calls()))
def test_warns_once_per_reason(name):
    """The first fallback for a reason warns, naming it (a FallbackWarning pointing at the caller); the next ones for
    it are silent; another reason still warns."""
    call = reason_calls()[name]
    try:
        first = warned(call)
    except (RuntimeError, NotImplementedError) as e:  # a torch whose SDPA refuses nested CPU tensors: no warning spent
        assert name == "nested", e
        assert name not in sdpa._warned
        return
    assert len(first) == 1 and f"reason {name!r}" in str(first[0].message), [str(w.message) for w in first]
    assert first[0].filename == __file__, "the warning points at the caller's line"
    assert warned(call) == []
    other = "dropout_p" if name != "dropout_p" else "device"
    again = warned(reason_calls()[other])
    assert len(again) == 1 and f"reason {other!r}" in str(again[0].message)


@pytest.mark.parametrize("name", list(reason_calls()))
def test_strict_raises_instead(name, monkeypatch):
    """strict=True raises the reason's tk_ops error and never runs torch's SDPA."""
    monkeypatch.setattr(sdpa, "_torch_sdpa", lambda *a, **k: pytest.fail("strict=True ran torch's SDPA"))
    with pytest.raises(sdpa.REASONS[name]) as raised:
        reason_calls(strict=True)[name]()
    assert "strict=True" in str(raised.value) and "tk_ops.scaled_dot_product_attention" in str(raised.value)
    assert sdpa._warned == set()


def test_sdpas_own_errors_pass_through():
    """Calls SDPA refuses get SDPA's own error, and spend no warning."""
    q = torch.randn(1, 2, 4, 64).bfloat16()
    mask = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="attn_mask"):
        tk_ops.scaled_dot_product_attention(q, q, q, attn_mask=mask, is_causal=True)
    with pytest.raises(RuntimeError, match="same dtype"):
        tk_ops.scaled_dot_product_attention(q, q.half(), q)
    with pytest.raises(RuntimeError):
        tk_ops.scaled_dot_product_attention(torch.randn(1, 6, 4, 64), torch.randn(1, 4, 4, 64),
                                            torch.randn(1, 4, 4, 64), enable_gqa=True)
    assert sdpa._warned == set()


def test_replacing_torchs_function_does_not_recurse(monkeypatch):
    """The documented drop-in: F.scaled_dot_product_attention = tk_ops.scaled_dot_product_attention. The fallback
    calls the builtin bound at import, not the patched name."""
    q = torch.randn(1, 2, 4, 64)
    want = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    monkeypatch.setattr(F, "scaled_dot_product_attention", tk_ops.scaled_dot_product_attention)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        assert torch.equal(F.scaled_dot_product_attention(q, q, q, is_causal=True), want)
