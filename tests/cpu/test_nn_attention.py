"""tk_ops.nn.Attention's plumbing on the CPU: the kernels (GEMM and attention) are replaced by float PyTorch
versions, and the module must then equal the textbook multi-head attention it documents (head order in the
fused qkv weight, GQA mapping, causal mask, sliding window, softcap, output projection), forward and backward, and
hand the attention in-place (B, N, H, D)-transposed views that the kernel reads without copies. Packed documents
(cu_seqlens) must equal the module run on each document alone. The argument rules of the options and of the packed
call, and the shapes through the ops' Meta kernels (forward and backward), need no GPU. Building the module asks the
extension which head dimensions its kernels take (a build without them defers that check to the first call), so
these tests need it built."""
import math

import pytest
import torch

import tk_ops
import tk_ops.nn as tk_nn
from tk_ops import reference
from tk_ops.errors import DTypeError, InputError

from ..util import cpu_linear, read_in_place, skip_unless_built


@pytest.fixture(autouse=True)
def extension():
    skip_unless_built("nn.Attention checks its head dimension against the built kernels")


@pytest.fixture
def cpu_math(monkeypatch):
    """Swap the module's kernels for CPU math; record what the attention ops receive (dense calls as
    ("dense", q, k, v, options), packed ones as ("packed", q, k, v, (cu_q, cu_k, max_q, max_k), options))."""
    seen = []

    def attention(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0):
        seen.append(("dense", q, k, v, dict(causal=causal, scale=scale, window=window, softcap=softcap)))
        return reference.attention(q, k, v, causal, scale, window, softcap)[0].to(q.dtype)

    def attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False, scale=None, window=(-1, -1), softcap=0.0):
        options = dict(causal=causal, scale=scale, window=window, softcap=softcap)
        seen.append(("packed", q, k, v, (cu_q, cu_k, max_q, max_k), options))
        return reference.attention_varlen(q, k, v, cu_q, cu_k, causal, scale, window, softcap)[0].to(q.dtype)
    monkeypatch.setattr(tk_ops.nn.gemm, "_linear", cpu_linear)
    monkeypatch.setattr(tk_ops.nn.attention, "attention", attention)
    monkeypatch.setattr(tk_ops.nn.attention, "attention_varlen", attention_varlen)
    return seen


def textbook(x, qkv_w, qkv_b, proj_w, proj_b, h, hkv, causal, window=(-1, -1), softcap=0.0):
    """Multi-head attention in float64 written out as the class docstring states it: scores, softcap, the band
    i - left <= j <= i + right (causal: right = 0), softmax; GQA by repeating the key/value heads. Without window
    and softcap it is SDPA's math (checked against SDPA below)."""
    b, n, e = x.shape
    d = e // h
    y = torch.nn.functional.linear(x, qkv_w, qkv_b)
    q, k, v = y.split([h * d, hkv * d, hkv * d], dim=-1)
    q = q.view(b, n, h, d).transpose(1, 2)
    k = k.view(b, n, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    v = v.view(b, n, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    left, right = window[0], 0 if causal else window[1]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    hidden = torch.zeros(n, n, dtype=torch.bool)
    if left >= 0:
        hidden |= j < i - left
    if right >= 0:
        hidden |= j > i + right
    o = torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1) @ v
    return torch.nn.functional.linear(o.transpose(1, 2).reshape(b, n, h * d), proj_w, proj_b)


def test_textbook_without_options_is_sdpa():
    torch.manual_seed(0)
    x = torch.randn(2, 9, 128, dtype=torch.float64)
    w_qkv, w_proj = torch.randn(256, 128, dtype=torch.float64) / 12, torch.randn(128, 128, dtype=torch.float64) / 12
    for causal in (False, True):
        q, k, v = (t.unflatten(-1, (-1, 64)).transpose(1, 2) for t in (x @ w_qkv.T).split([128, 64, 64], dim=-1))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        want = o.transpose(1, 2).reshape(2, 9, 128) @ w_proj.T
        got = textbook(x, w_qkv, None, w_proj, None, 2, 1, causal)
        torch.testing.assert_close(got, want)


def randomized(m):
    with torch.no_grad():  # weights large enough that the heads differ visibly
        for p in m.parameters():
            p.normal_(0, 0.1)
    return m


def params_of(m):
    return [m.qkv.weight, m.qkv.bias, m.proj.weight, m.proj.bias]


def check_against_textbook(m, x, y, options):
    """y = m(x) and its gradients against the float64 textbook; returns nothing, asserts."""
    params = params_of(m)
    x64 = x.detach().double().requires_grad_()
    p64 = [None if p is None else p.detach().double().requires_grad_() for p in params]
    expect = textbook(x64, *p64, m.num_heads, m.num_kv_heads, m.causal, **options)
    err = (y.double() - expect).norm() / expect.norm()
    assert err < 2e-2, f"relative error {err:.2e}"

    # backward: every parameter and the input get the textbook gradient
    dy = torch.randn_like(expect)
    y.backward(dy.to(y.dtype))
    expect.backward(dy)
    for name, got, ref in [("x", x, x64)] + [(f"param{i}", p, r) for i, (p, r) in enumerate(zip(params, p64))]:
        if got is None:
            continue
        rel = (got.grad.double() - ref.grad).norm() / ref.grad.norm()
        assert rel < 3e-2, f"d{name}: relative error {rel:.2e}"


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (2, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_textbook_attention(cpu_math, heads, causal, bias):
    h, hkv = heads
    torch.manual_seed(0)
    m = randomized(tk_nn.Attention(64 * h, h, num_kv_heads=hkv, causal=causal, bias=bias))
    x = torch.randn(2, 11, 64 * h, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    check_against_textbook(m, x, y, {})

    # the attention got in-place (B, N, H, D) views of the qkv projection, not copies
    (kind, q, k, v, options), = cpu_math
    assert kind == "dense" and options == dict(causal=causal, scale=None, window=(-1, -1), softcap=0.0)
    assert q.shape == (2, h, 11, 64) and k.shape == v.shape == (2, hkv, 11, 64)
    assert not q.is_contiguous() and all(read_in_place(t) for t in (q, k, v))
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()


OPTIONS = {
    "left3": dict(window=(3, -1)),
    "band2_4": dict(window=(2, 4)),
    "diag": dict(window=(0, 0)),
    "cap": dict(softcap=0.5),  # small enough that the scores are visibly capped
    "band_cap": dict(window=(5, 1), softcap=2.0),
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
@pytest.mark.parametrize("causal", [False, True])
def test_window_and_softcap_match_textbook(cpu_math, options, causal):
    torch.manual_seed(1)
    m = randomized(tk_nn.Attention(256, 4, num_kv_heads=2, causal=causal, bias=True, **options))
    x = torch.randn(2, 13, 256, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    check_against_textbook(m, x, y, options)
    (kind, *_, passed), = cpu_math
    assert kind == "dense"
    assert passed == dict(causal=causal, scale=None, window=options.get("window", (-1, -1)),
                          softcap=options.get("softcap", 0.0))


def test_options_change_the_output(cpu_math):
    """The options reach the computation (a module that dropped them would still match a textbook without them)."""
    torch.manual_seed(2)
    x = torch.randn(1, 20, 128, dtype=torch.bfloat16)
    plain = randomized(tk_nn.Attention(128, 2))
    for options in ({"window": (2, 2)}, {"softcap": 0.3}):
        other = tk_nn.Attention(128, 2, **options)
        other.load_state_dict(plain.state_dict())
        assert (other(x).float() - plain(x).float()).abs().max() > 1e-2, options


# ---------------------------------------------------------------- packed documents

def offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(causal=True, window=(4, -1), softcap=1.0),
                                     dict(window=(3, 2))], ids=["full", "causal", "causal_w4_cap", "w3_2"])
@pytest.mark.parametrize("rank", [2, 3])
def test_packed_equals_each_document_alone(cpu_math, options, rank):
    """The packed forward is the dense module on each document, concatenated, forward and backward (x's gradient
    row by row, the parameters' summed over the documents)."""
    lengths = [5, 0, 12, 1, 9]
    total = sum(lengths)
    cu = offsets(lengths)
    torch.manual_seed(3)
    m = randomized(tk_nn.Attention(256, 4, num_kv_heads=2, bias=True, **options))
    x = torch.randn(total, 256, dtype=torch.bfloat16)
    dy = torch.randn(total, 256, dtype=torch.bfloat16)

    xp = (x if rank == 2 else x[None]).clone().requires_grad_()
    yp = m(xp, cu, max(lengths))
    assert yp.shape == xp.shape and yp.dtype == torch.bfloat16
    yp.backward(dy if rank == 2 else dy[None])
    packed_grads = [None if p is None else p.grad.clone() for p in params_of(m)]
    m.zero_grad(set_to_none=True)

    # the op got the offsets for queries and keys, max_seqlen, the options, and in-place views of the projection
    (kind, q, k, v, (cu_q, cu_k, max_q, max_k), passed), = [c for c in cpu_math if c[0] == "packed"]
    assert cu_q is cu and cu_k is cu and max_q == max_k == max(lengths)
    assert passed == dict(causal=options.get("causal", False), scale=None, window=options.get("window", (-1, -1)),
                          softcap=options.get("softcap", 0.0))
    assert q.shape == (total, 4, 64) and k.shape == v.shape == (total, 2, 64)
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
    assert all(read_in_place(t.unsqueeze(0).transpose(1, 2)) for t in (q, k, v))

    xd = x.clone().requires_grad_()
    pieces = []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if b > a:
            pieces.append(m(xd[None, a:b])[0])
    yd = torch.cat(pieces)
    yd.backward(dy)
    torch.testing.assert_close(yp.reshape(total, 256), yd, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(xp.grad.reshape(total, 256), xd.grad, rtol=1e-2, atol=1e-2)
    for i, (got, p) in enumerate(zip(packed_grads, params_of(m))):
        err = (got.double() - p.grad.double()).norm() / p.grad.double().norm()
        assert err < 1e-2, f"param{i}: relative error {err:.2e}"


def test_packed_rows_past_the_last_offset_get_the_bias(cpu_math):
    m = randomized(tk_nn.Attention(128, 2, bias=True))
    x = torch.randn(10, 128, dtype=torch.bfloat16)
    y = m(x, offsets([4, 3]))
    assert torch.equal(y[7:], m.proj.bias.detach().expand(3, 128))
    assert cpu_math[-1][4][2:] == (10, 10)  # max_seqlen None: the token count, a bound no document exceeds


# ---------------------------------------------------------------- arguments

@pytest.mark.parametrize("window", [(-2, 0), (0, -5), (3,), (1, 2, 3), (1.0, 2), (True, 0), "ab", None, 5])
def test_rejects_bad_window(window):
    with pytest.raises(InputError, match=r"tk_ops.nn.Attention: window must be a pair of ints \(left, right\)"):
        tk_nn.Attention(256, 4, window=window, device="meta")


@pytest.mark.parametrize("softcap", [-1.0, -1, float("nan"), float("inf"), True, "1", None])
def test_rejects_bad_softcap(softcap):
    with pytest.raises(InputError, match=r"tk_ops.nn.Attention: softcap must be 0 \(none\) or a positive finite"):
        tk_nn.Attention(256, 4, softcap=softcap, device="meta")


def test_options_are_keyword_only():
    """window and softcap come after device and dtype; positional calls that predate them keep their meaning."""
    with pytest.raises(TypeError):
        tk_nn.Attention(256, 4, 4, True, False, "meta", torch.bfloat16, (8, 0))


def test_extra_repr_and_stored_options():
    plain = tk_nn.Attention(256, 4, num_kv_heads=2, bias=True, device="meta")
    assert plain.window == (-1, -1) and plain.softcap == 0.0
    assert "num_kv_heads=2" in repr(plain) and "head_dim=64" in repr(plain)
    assert "window=(-1, -1), softcap=0.0" in repr(plain)
    m = tk_nn.Attention(256, 4, causal=True, window=[128, 0], softcap=30, device="meta")
    assert m.window == (128, 0) and type(m.window) is tuple and m.softcap == 30.0 and type(m.softcap) is float
    assert "causal=True, window=(128, 0), softcap=30.0" in repr(m)


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.fixture
def meta_module():
    return tk_nn.Attention(256, 4, num_kv_heads=2, causal=True, window=(32, -1), softcap=20.0, device="meta")


def test_packed_rejects_bad_arguments(meta_module):
    """The offsets and max_seqlen are checked by tk_ops.attention_varlen, which names them as its own arguments; the
    input's shape by the module."""
    m, cu, x = meta_module, meta(4, dtype=torch.int32), meta(30, 256)
    with pytest.raises(DTypeError, match="tk_ops.attention_varlen: cu_seqlens_q must be int32"):
        m(x, meta(4, dtype=torch.int64))
    with pytest.raises(DTypeError, match="cu_seqlens_q must be a torch.Tensor, got list"):
        m(x, [0, 10, 30])
    with pytest.raises(InputError, match=r"cu_seqlens_q must be 1-D with \(documents \+ 1\) offsets"):
        m(x, meta(2, 2, dtype=torch.int32))
    with pytest.raises(InputError, match=r"cu_seqlens_q must be 1-D"):
        m(x, meta(0, dtype=torch.int32))
    with pytest.raises(InputError, match=r"\(total_tokens, 256\) or \(1, total_tokens, 256\)"):
        m(meta(2, 15, 256), cu)
    with pytest.raises(InputError, match=r"\(total_tokens, 256\)"):
        m(meta(30, 128), cu)
    with pytest.raises(InputError, match=r"\(total_tokens, 256\)"):
        m(meta(1, 1, 30, 256), cu)
    with pytest.raises(InputError, match="max_seqlen_q and max_seqlen_k must be >= 0"):
        m(x, cu, -1)
    for bad in (3.0, True, "30"):
        with pytest.raises(InputError, match="max_seqlen_q and max_seqlen_k must be Python ints"):
            m(x, cu, bad)
    with pytest.raises(InputError, match="max_seqlen is only taken with cu_seqlens"):
        m(meta(2, 15, 256), max_seqlen=15)
    # offsets in host memory are taken (the op checks their values and copies them)
    assert m(x, torch.tensor([0, 10, 30], dtype=torch.int32)).shape == x.shape
    with pytest.raises(InputError, match=r"\(batch, seq_len, 256\), .*cu_seqlens"):
        m(x)  # a packed input without offsets


@pytest.mark.parametrize("shape", [(30, 256), (1, 30, 256), (0, 256)])
def test_packed_shapes_on_meta(meta_module, shape):
    """The ops' Meta kernels carry the packed path, forward and backward: shapes, dtypes and gradients' shapes."""
    x = meta(*shape).requires_grad_()
    y = meta_module(x, meta(4, dtype=torch.int32), 17)
    assert y.shape == shape and y.dtype == torch.bfloat16 and y.device.type == "meta"
    y.backward(torch.empty_like(y))
    assert x.grad.shape == shape
    for p in meta_module.parameters():
        assert p.grad.shape == p.shape


def test_dense_shapes_on_meta(meta_module):
    y = meta_module(meta(3, 20, 256))
    assert y.shape == (3, 20, 256) and y.dtype == torch.bfloat16


def test_state_dict_keys_match_a_torch_module():
    """qkv and proj are nn.Linear-compatible, so a PyTorch module with the same two Linears loads the weights."""
    m = tk_nn.Attention(256, 4, num_kv_heads=2, bias=True)
    torch_like = torch.nn.ModuleDict({"qkv": torch.nn.Linear(256, 512), "proj": torch.nn.Linear(256, 256)})
    torch_like.load_state_dict(m.state_dict())
