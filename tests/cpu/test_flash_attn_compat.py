"""tk_ops.flash_attn without a GPU or the extension: the four functions' signatures against flash-attn 2.8's, written
out here; the options the kernels lack refused by name before anything runs; and the mapping onto the attention ops
(layouts, views read in place, window sides, causal, softcap, GQA, packed tensors, documents, the LSE's shapes,
gradients) with the ops replaced by the float64 reference of their own semantics, against a float64 reference of
flash-attn's documented semantics written here (also the GPU tests' reference)."""
import inspect

import numpy as np
import pytest
import torch

import tk_ops
from tk_ops import _ext, flash_attn, reference
from tk_ops.errors import InputError, TkOpsError
from tk_ops.flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                               flash_attn_varlen_func)

from ..util import read_in_place

# flash-attn 2.8's signatures (flash_attn/flash_attn_interface.py), parameter by parameter.
_OPTIONS = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
            ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)]
_REQUIRED = inspect.Parameter.empty
FA2_SIGNATURES = {
    "flash_attn_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED)] + _OPTIONS,
    "flash_attn_qkvpacked_func": [("qkv", _REQUIRED)] + _OPTIONS,
    "flash_attn_kvpacked_func": [("q", _REQUIRED), ("kv", _REQUIRED)] + _OPTIONS,
    "flash_attn_varlen_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED), ("cu_seqlens_q", _REQUIRED),
                               ("cu_seqlens_k", _REQUIRED), ("max_seqlen_q", _REQUIRED), ("max_seqlen_k", _REQUIRED)]
                              + _OPTIONS + [("block_table", None)],
}


def fa_reference(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None):
    """(out (B, Nq, Hq, D), softmax_lse (B, Hq, Nq)) in float64 of flash-attn 2's documented semantics, for (B, N,
    H, D) tensors: scores q.k * scale (default 1 / sqrt(D)), capped by softcap * tanh(s / softcap) when softcap > 0;
    query i sees keys i + Nk - Nq - left <= j <= i + Nk - Nq + right, a negative side unlimited, causal meaning
    right = 0; query head h uses key/value head h // (Hq // Hk). A row that sees no key outputs 0 and its
    log-sum-exp is -inf. Differentiable."""
    _, nq, hq, d = q.shape
    nk, hk = k.shape[1], k.shape[2]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    qh = q.double().transpose(1, 2)
    kh = k.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    vh = v.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    s = qh @ kh.transpose(-1, -2) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(nq, device=q.device)[:, None]
    j = torch.arange(nk, device=q.device)[None, :]
    seen = torch.ones(nq, nk, dtype=torch.bool, device=q.device)
    if left >= 0:
        seen &= j >= i + nk - nq - left
    if right >= 0:
        seen &= j <= i + nk - nq + right
    has_key = seen.any(dim=-1, keepdim=True)
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s.masked_fill(~has_key, 0.0), dim=-1) * has_key  # empty rows: 0, and finite gradients
    return (p @ vh).transpose(1, 2), lse


def fa_varlen_reference(q, k, v, cu_seqlens_q, cu_seqlens_k, **options):
    """(out (total_q, Hq, D), softmax_lse (Hq, total_q)) in float64: fa_reference on each document alone; query rows
    past the last offset output 0 with log-sum-exp -inf."""
    total_q, hq, d = q.shape
    outs = torch.zeros(total_q, hq, d, dtype=torch.float64, device=q.device)
    lses = torch.full((hq, total_q), float("-inf"), dtype=torch.float64, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    pieces, rows = [], []
    for i in range(len(cq) - 1):
        if cq[i + 1] > cq[i]:
            o, lse = fa_reference(q[None, cq[i]:cq[i + 1]], k[None, ck[i]:ck[i + 1]], v[None, ck[i]:ck[i + 1]],
                                  **options)
            pieces.append(o[0])
            rows.append((cq[i], cq[i + 1]))
            lses[:, cq[i]:cq[i + 1]] = lse[0].detach()
    # out assembled without in-place writes into a leaf-dependent buffer, so that it stays differentiable
    parts, at = [], 0
    for (r0, r1), piece in zip(rows, pieces):
        parts += [outs[at:r0], piece]
        at = r1
    parts.append(outs[at:])
    return torch.cat(parts), lses


# ---------------------------------------------------------------- signatures and refusals


@pytest.mark.parametrize("name", list(FA2_SIGNATURES))
def test_signature_is_flash_attn_28(name):
    params = list(inspect.signature(getattr(flash_attn, name)).parameters.values())
    assert [(p.name, p.default) for p in params] == FA2_SIGNATURES[name]
    assert all(p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
    doc = getattr(flash_attn, name).__doc__
    assert doc and "Example" in doc and "Returns" in doc


def test_module_surface():
    assert sorted(flash_attn.__all__) == sorted(FA2_SIGNATURES)
    assert tk_ops.flash_attn is flash_attn
    assert "deterministic" in flash_attn.__doc__ and "S_dmask" in flash_attn.__doc__


def t(*shape, dtype=torch.bfloat16, requires_grad=False):
    return torch.randn(*shape).to(dtype).requires_grad_(requires_grad)


def calls(requires_grad=False):
    """{name: (args, kwargs)} of one valid call of each function on CPU tensors."""
    q, k, v = (t(2, 8, 4, 64, requires_grad=requires_grad) for _ in range(3))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    return {
        "flash_attn_func": ((q, k, v), {}),
        "flash_attn_qkvpacked_func": ((t(2, 8, 3, 4, 64, requires_grad=requires_grad),), {}),
        "flash_attn_kvpacked_func": ((q, t(2, 8, 2, 4, 64, requires_grad=requires_grad)), {}),
        "flash_attn_varlen_func": ((q[0], k[0], v[0], cu, cu, 5, 5), {}),
    }


REFUSED = [("dropout_p", 0.1), ("alibi_slopes", torch.ones(4))]


@pytest.mark.parametrize("name, option, value",
                         [(n, o, v) for n in FA2_SIGNATURES for o, v in REFUSED]
                         + [("flash_attn_varlen_func", "block_table", torch.zeros(1, 1, dtype=torch.int32))])
def test_unsupported_options_raise_by_name(name, option, value):
    """Refused before the op runs (here no extension or GPU is needed to see InputError rather than the op's
    device error or the missing extension's)."""
    args, kwargs = calls()[name]
    with pytest.raises(InputError, match=option):
        getattr(flash_attn, name)(*args, **{option: value}, **kwargs)


@pytest.mark.parametrize("name", list(FA2_SIGNATURES))
def test_deterministic_refused_only_when_a_backward_may_run(name, monkeypatch):
    args, kwargs = calls(requires_grad=True)[name]
    with pytest.raises(InputError, match="deterministic=True.*backward.*reduce-adds"):
        getattr(flash_attn, name)(*args, deterministic=True, **kwargs)
    ran = []
    monkeypatch.setattr(_ext, "call", lambda *a: ran.append(a[1]) or (a[3], None))
    with torch.no_grad():
        getattr(flash_attn, name)(*args, deterministic=True, **kwargs)
    getattr(flash_attn, name)(*calls(requires_grad=False)[name][0], deterministic=True, **kwargs)
    assert len(ran) == 2


def test_wrong_ranks_name_flash_attn_layouts():
    with pytest.raises(InputError, match=r"\(batch, seqlen_q, nheads, headdim\)"):
        flash_attn_func(t(8, 4, 64), t(8, 4, 64), t(8, 4, 64))
    with pytest.raises(InputError, match=r"\(batch, seqlen, 3, nheads, headdim\)"):
        flash_attn_qkvpacked_func(t(2, 8, 2, 4, 64))
    with pytest.raises(InputError, match=r"\(batch, seqlen_k, 2, nheads_k, headdim\)"):
        flash_attn_kvpacked_func(t(2, 8, 4, 64), t(2, 8, 3, 4, 64))


def test_cpu_tensors_reach_the_op_and_fail_there():
    """No fallback in these functions (flash-attn has none): a CPU tensor reaches the op, which refuses it (or the
    missing extension does)."""
    with pytest.raises(TkOpsError):
        flash_attn_func(t(1, 8, 2, 64), t(1, 8, 2, 64), t(1, 8, 2, 64))


# ---------------------------------------------------------------- the mapping, with a CPU stand-in for the ops


@pytest.fixture
def stand_in(monkeypatch):
    """The attention ops replaced by tk_ops.reference (their semantics, float64, differentiable), recording what
    they receive."""
    seen = []

    def call(family, op, name, *args):
        assert family == "attention" and name.startswith("tk_ops.flash_attn.")
        if op == "attention_fwd":
            q, k, v, causal, scale, left, right, softcap = args
            o, lse = reference.attention(q, k, v, causal, scale, (left, right), softcap)
        else:
            assert op == "attention_varlen_fwd"
            q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, left, right, softcap = args
            assert type(max_q) is int and type(max_k) is int
            o, lse = reference.attention_varlen(q, k, v, cu_q, cu_k, causal, scale, (left, right), softcap)
        assert isinstance(causal, bool) and left >= -1 and right >= -1 and softcap >= 0
        seen.append(dict(op=op, q=q, k=k, v=v, causal=causal, window=(left, right), softcap=softcap, scale=scale))
        return o.to(q.dtype), lse.float()

    monkeypatch.setattr(_ext, "call", call)
    return seen


# (causal, window_size, softcap, softmax_scale): bottom-right causal, windows with negative sides of any size,
# a right side that causal overrides, softcap on and off (negative: off, as in flash-attn).
OPTIONS = [
    (False, (-1, -1), 0.0, None), (True, (-1, -1), 0.0, None), (True, (3, -1), 0.0, 0.2), (False, (2, 1), 0.0, None),
    (False, (-7, 2), 0.0, None), (True, (4, 5), 0.0, None), (False, (-1, -1), 1.5, None), (True, (-1, -1), -3.0, 0.3),
]
LENGTHS = [(9, 9), (5, 12), (12, 5)]


def assert_same(got, want, what, tol=1e-10):
    assert got.shape == want.shape, f"{what}: {tuple(got.shape)} != {tuple(want.shape)}"
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol, msg=what)


def compare_grads(got_out, want_out, got_in, want_in, what):
    dout = torch.randn_like(want_out)
    for name, g, w in zip(("dq", "dk", "dv", "d4"), torch.autograd.grad(got_out, got_in, dout.to(got_out.dtype)),
                          torch.autograd.grad(want_out, want_in, dout)):
        assert_same(g, w, f"{what} {name}")


@pytest.mark.parametrize("lens", LENGTHS, ids=lambda x: f"{x[0]}x{x[1]}")
@pytest.mark.parametrize("causal, window, softcap, scale", OPTIONS)
def test_flash_attn_func_semantics(stand_in, causal, window, softcap, scale, lens):
    nq, nk = lens
    q, k, v = (torch.randn(2, n, h, 16, dtype=torch.float64, requires_grad=True)
               for n, h in ((nq, 4), (nk, 2), (nk, 2)))
    out, lse, s_dmask = flash_attn_func(q, k, v, 0.0, scale, causal, window, softcap, return_attn_probs=True)
    want, want_lse = fa_reference(q, k, v, causal, window, softcap, scale)
    what = f"causal={causal} window={window} softcap={softcap} {nq}x{nk}"
    assert s_dmask is None
    assert_same(out, want, what)
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, nq)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse)), f"{what}: rows that see no key"
    finite = ~torch.isneginf(want_lse)
    assert_same(lse[finite], want_lse[finite], f"{what} lse", tol=1e-5)
    compare_grads(out, want, (q, k, v), (q, k, v), what)
    # (B, N, H, D) handed over as (B, H, N, D) views of the same memory, which the kernels read in place
    got = stand_in[0]
    for name, mine, theirs in (("q", got["q"], q), ("k", got["k"], k), ("v", got["v"], v)):
        assert mine.shape == theirs.transpose(1, 2).shape and mine.data_ptr() == theirs.data_ptr(), name
        assert read_in_place(mine), name
    assert flash_attn_func(q, k, v, 0.0, scale, causal, window, softcap).shape == q.shape[:3] + (16,)


@pytest.mark.parametrize("causal, window, softcap, scale", OPTIONS[:4] + OPTIONS[6:7])
def test_packed_functions(stand_in, causal, window, softcap, scale):
    """qkv (B, N, 3, H, D) and kv (B, Nk, 2, Hk, D) are flash_attn_func on their slices; their gradients come back
    in the packed shape."""
    qkv = torch.randn(2, 9, 3, 4, 16, dtype=torch.float64, requires_grad=True)
    out = flash_attn_qkvpacked_func(qkv, 0.0, scale, causal, window, softcap)
    q, k, v = qkv.unbind(2)
    want, _ = fa_reference(q, k, v, causal, window, softcap, scale)
    assert_same(out, want, "qkvpacked")
    base = qkv.untyped_storage().data_ptr()
    assert all(stand_in[0][x].untyped_storage().data_ptr() == base for x in "qkv"), "views of qkv, not copies"
    (grad,) = torch.autograd.grad(out, qkv, torch.ones_like(out))
    q2, k2, v2 = (x.detach().requires_grad_() for x in (q, k, v))
    want2, _ = fa_reference(q2, k2, v2, causal, window, softcap, scale)
    assert_same(grad, torch.stack(torch.autograd.grad(want2, (q2, k2, v2), torch.ones_like(want2)), dim=2),
                "qkvpacked dqkv")

    q = torch.randn(2, 6, 4, 16, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 11, 2, 2, 16, dtype=torch.float64, requires_grad=True)
    out, lse, none = flash_attn_kvpacked_func(q, kv, 0.0, scale, causal, window, softcap, return_attn_probs=True)
    want, want_lse = fa_reference(q, kv[:, :, 0], kv[:, :, 1], causal, window, softcap, scale)
    assert none is None and lse.shape == (2, 4, 6)
    assert_same(lse, want_lse, "kvpacked lse", tol=1e-5)
    assert_same(out, want, "kvpacked")
    dout = torch.randn_like(want)
    got = torch.autograd.grad(out, (q, kv), dout)
    ref = torch.autograd.grad(want, (q, kv), dout)
    assert got[1].shape == kv.shape
    assert_same(got[0], ref[0], "kvpacked dq")
    assert_same(got[1], ref[1], "kvpacked dkv")


@pytest.mark.parametrize("causal, window, softcap, scale", OPTIONS)
def test_varlen_semantics(stand_in, causal, window, softcap, scale):
    """Documents of different lengths (an empty one, query and key lengths that differ), rows past the last offset;
    LSE (Hq, total_q); gradients; max_seqlen as a NumPy integer."""
    cu_q = torch.tensor([0, 5, 5, 12, 20], dtype=torch.int32)
    cu_k = torch.tensor([0, 8, 10, 14, 23], dtype=torch.int32)
    q = torch.randn(22, 4, 16, dtype=torch.float64, requires_grad=True)  # 2 rows past the last document
    k = torch.randn(23, 2, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(23, 2, 16, dtype=torch.float64, requires_grad=True)
    out, lse, none = flash_attn_varlen_func(q, k, v, cu_q, cu_k, np.int64(8), np.int32(9), 0.0, scale, causal,
                                            window, softcap, return_attn_probs=True)
    options = dict(causal=causal, window_size=window, softcap=softcap, softmax_scale=scale)
    want, want_lse = fa_varlen_reference(q, k, v, cu_q, cu_k, **options)
    assert none is None
    assert_same(out, want, "varlen")
    assert lse.shape == (4, 22) and lse.dtype == torch.float32
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = ~torch.isneginf(want_lse)
    assert_same(lse[finite], want_lse[finite], "varlen lse", tol=1e-5)
    assert (out[20:] == 0).all()
    compare_grads(out, want, (q, k, v), (q, k, v), "varlen")
    assert stand_in[0]["q"] is q, "packed tensors go to the op as they are"
