"""Attention API checks that need no GPU: the ops' argument rules (kernels/attention/binding.cpp, run by their CPU
and Meta kernels as by the CUDA ones), the Meta kernels' output shapes and memory orders, the autograd formula
(run on CPU stand-ins for the two kernels), nn.Attention's argument checks, the benchmark's backward cases and
the float64 references' conventions (GQA head mapping, bottom-right causal alignment, empty rows, gradients)."""
import math
from contextlib import contextmanager

import pytest
import torch

import tk_ops
from tk_ops import reference
from tk_ops.bench import attention as attention_bench
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError

from ..util import empty as t, skip_unless_built


@pytest.fixture
def built():
    """The ops, their argument rules, Meta kernels and autograd formula are C++ (kernels/attention/), registered when
    the extension loads: the tests of those load it (no GPU needed), and have nothing to test where it was not
    built."""
    skip_unless_built("the attention ops")


def test_rejects_float32(built):
    with pytest.raises(DTypeError, match="bfloat16 or float16"):
        tk_ops.attention(t(1, 2, 8, 64, dtype=torch.float32), t(1, 2, 8, 64), t(1, 2, 8, 64))


def test_rejects_mixed_dtypes(built):
    with pytest.raises(DTypeError, match="share one dtype"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64, dtype=torch.float16), t(1, 2, 8, 64))


def test_rejects_3d(built):
    with pytest.raises(InputError, match="4-D"):
        tk_ops.attention(t(2, 8, 64), t(2, 8, 64), t(2, 8, 64))


@pytest.mark.parametrize("d", [32, 80, 192, 512])
def test_rejects_head_dim(d, built):
    with pytest.raises(InputError, match="head_dim must be 64, 96, 128 or 256"):
        tk_ops.attention(t(1, 2, 8, d), t(1, 2, 8, d), t(1, 2, 8, d))


def test_rejects_kv_shape_mismatch(built):
    with pytest.raises(InputError, match="same shape"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 9, 64))
    with pytest.raises(InputError, match="batch"):
        tk_ops.attention(t(1, 2, 8, 64), t(2, 2, 8, 64), t(2, 2, 8, 64))


def test_rejects_head_group_mismatch(built):
    with pytest.raises(InputError, match="multiple of the key/value heads"):
        tk_ops.attention(t(1, 6, 8, 64), t(1, 4, 8, 64), t(1, 4, 8, 64))


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "0.1", True])
def test_rejects_bad_scale(scale, built):
    with pytest.raises(InputError, match="scale"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), scale=scale)


def test_rejects_cpu_tensors(built):
    with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors, but q is on cpu"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64))


def test_python_types_the_op_cannot_see():
    """causal=1 and scale=True would pass torch's argument parsing as True and 1.0: refused before the op."""
    with pytest.raises(InputError, match="causal must be a bool, got int"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), causal=1)
    with pytest.raises(InputError, match="scale must be a finite number or None, got True"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), scale=True)


def test_head_dims_come_from_the_build(built):
    from tk_ops.attention import head_dims
    assert head_dims() == [64, 96, 128, 256]


def test_backward_rules(built):
    q = t(2, 4, 50, 64, device="meta")
    kv = t(2, 2, 30, 64, device="meta")
    lse = t(2, 4, 50, device="meta", dtype=torch.float32)
    bwd = torch.ops.tk_ops.attention_bwd
    with pytest.raises(ValueError, match=r"o must have q's shape \(2, 4, 50, 64\), got \(2, 4, 49, 64\)"):
        bwd(q, kv, kv, t(2, 4, 49, 64, device="meta"), q, lse, False, None)
    with pytest.raises(TypeError, match="dout must have q's dtype torch.bfloat16, got torch.float16"):
        bwd(q, kv, kv, q, t(2, 4, 50, 64, device="meta", dtype=torch.float16), lse, False, None)
    with pytest.raises(TypeError, match="lse must be float32"):
        bwd(q, kv, kv, q, q, lse.bfloat16(), False, None)
    with pytest.raises(ValueError, match=r"lse must be \(B, Hq, Nq\) = \(2, 4, 50\)"):
        bwd(q, kv, kv, q, q, t(2, 4, 51, device="meta", dtype=torch.float32), False, None)


def test_meta_kernel_gives_shapes(built):
    q = t(2, 8, 100, 128, device="meta", dtype=torch.float16)
    kv = t(2, 2, 37, 128, device="meta", dtype=torch.float16)
    out, lse = torch.ops.tk_ops.attention_fwd(q, kv, kv, True, 0.125)
    assert out.shape == (2, 8, 100, 128) and out.dtype == torch.float16
    assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32


def test_reference_matches_sdpa_with_gqa():
    q, k, v = torch.randn(2, 4, 9, 64), torch.randn(2, 2, 13, 64), torch.randn(2, 2, 13, 64)
    out, lse = reference.attention(q, k, v)
    k4, v4 = (x.double().repeat_interleave(2, dim=1) for x in (k, v))
    expect = torch.nn.functional.scaled_dot_product_attention(q.double(), k4, v4)
    torch.testing.assert_close(out, expect)
    torch.testing.assert_close(lse, torch.logsumexp(q.double() @ k4.transpose(-1, -2) / 8.0, dim=-1))


def test_reference_causal_is_bottom_right():
    q, k, v = torch.randn(1, 1, 5, 64), torch.randn(1, 1, 3, 64), torch.randn(1, 1, 3, 64)
    out, lse = reference.attention(q, k, v, causal=True, scale=0.5)
    # Nq - Nk = 2: rows 0 and 1 see no key, row 2 sees key 0 only, row 4 sees all three.
    assert torch.isneginf(lse[0, 0, :2]).all() and (out[0, 0, :2] == 0).all()
    torch.testing.assert_close(out[0, 0, 2], v[0, 0, 0].double())
    assert math.isclose(lse[0, 0, 2].item(), 0.5 * (q[0, 0, 2].double() @ k[0, 0, 0].double()).item())
    square = torch.randn(1, 1, 6, 64)
    o_sq, _ = reference.attention(square, square, square, causal=True)
    expect = torch.nn.functional.scaled_dot_product_attention(square.double(), square.double(), square.double(),
                                                              is_causal=True)
    torch.testing.assert_close(o_sq, expect)


# ---------------------------------------------------------------- backward: fake, autograd, references

def test_backward_meta_kernel_gives_shapes(built):
    q = t(2, 8, 100, 128, device="meta", dtype=torch.float16)
    kv = t(2, 2, 37, 128, device="meta", dtype=torch.float16)
    o = t(2, 8, 100, 128, device="meta", dtype=torch.float16)
    lse = t(2, 8, 100, device="meta", dtype=torch.float32)
    dq, dk, dv = torch.ops.tk_ops.attention_bwd(q, kv, kv, o, o, lse, True, 0.125)
    assert dq.shape == (2, 8, 100, 128) and dk.shape == dv.shape == (2, 2, 37, 128)
    assert all(g.dtype == torch.float16 and g.is_contiguous() for g in (dq, dk, dv))


def test_backward_meta_kernel_from_strided_views(built):
    """Transposed (B, N, H, D) inputs: each gradient takes its input's memory order ((B, N, H, D) for dQ; a
    single kv head has one order only, so dK and dV are plain contiguous)."""
    q = t(2, 50, 4, 64, device="meta").transpose(1, 2)
    kv = t(2, 30, 1, 64, device="meta").transpose(1, 2)
    dq, dk, dv = torch.ops.tk_ops.attention_bwd(q, kv, kv, q, q, t(2, 4, 50, device="meta", dtype=torch.float32),
                                                False, 0.125)
    assert dq.shape == (2, 4, 50, 64) and dq.transpose(1, 2).is_contiguous() and not dq.is_contiguous()
    assert dk.shape == (2, 1, 30, 64) and dk.is_contiguous() and dv.is_contiguous()


def test_forward_output_follows_the_query_memory_order(built):
    """A fused QKV projection's (B, N, 3H, D) slices give O laid out (B, N, H, D), so that
    o.transpose(1, 2).reshape(B, N, H * D) is a view (as with SDPA); contiguous q gives contiguous O."""
    qkv = t(2, 50, 12, 64, device="meta")
    q, k, v = (x.transpose(1, 2) for x in qkv.split([4, 4, 4], dim=2))
    o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, True, 0.125)
    assert o.shape == (2, 4, 50, 64) and o.transpose(1, 2).is_contiguous() and lse.is_contiguous()
    assert o.transpose(1, 2).reshape(2, 50, 256)._base is not None  # a view, no copy
    o, _ = torch.ops.tk_ops.attention_fwd(q.contiguous(), k, v, True, 0.125)
    assert o.is_contiguous()


def test_autograd_on_meta_tensors(built):
    """The autograd formula runs on meta tensors (the path torch.compile's tracing takes)."""
    q = t(2, 8, 100, 64, device="meta").requires_grad_()
    k = t(2, 2, 37, 64, device="meta").requires_grad_()
    v = t(2, 2, 37, 64, device="meta").requires_grad_()
    out, lse = torch.ops.tk_ops.attention_fwd(q, k, v, True, 0.125)
    assert out.requires_grad and lse.requires_grad
    dq, dk, dv = torch.autograd.grad(out.sum() + lse.sum(), (q, k, v))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape and dq.dtype == torch.bfloat16
    (dk_only,) = torch.autograd.grad(torch.ops.tk_ops.attention_fwd(q, k, v, False, 0.125)[0].sum(), (k,))
    assert dk_only.shape == k.shape


def _standin_forward(q, k, v, causal, scale, window_left=-1, window_right=-1, softcap=0.0):
    o, lse = reference.attention(q, k, v, causal=causal, scale=scale, window=(window_left, window_right),
                                 softcap=softcap)
    return o.to(q.dtype), lse.float()


def _visible(nq, nk, causal, left, right):
    """The band, written out independently of tk_ops.reference: query i sees key j when
    i + nk - nq - left <= j <= i + nk - nq + right (-1: unlimited), causal meaning right = 0."""
    diag = torch.arange(nq)[:, None] + (nk - nq)
    cols = torch.arange(nk)[None, :]
    right = 0 if causal else right
    seen = torch.ones(nq, nk, dtype=torch.bool)
    if right >= 0:
        seen = seen & (cols <= diag + right)
    if left >= 0:
        seen = seen & (cols >= diag - left)
    return seen


def _standin_backward(q, k, v, o, dout, lse, causal, scale, window_left=-1, window_right=-1, softcap=0.0):
    """What the CUDA kernel computes, written independently of tk_ops.reference: P from the saved LSE,
    delta from the saved O (so the autograd formula's handling of an LSE gradient is checked against the
    true gradient), dK and dV summed over each GQA group; contiguous outputs in the input dtype."""
    b, hq, nq, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    kk = k.double().repeat_interleave(hq // hk, dim=1)
    vv = v.double().repeat_interleave(hq // hk, dim=1)
    s = q.double() @ kk.transpose(-1, -2) * scale
    cap_grad = 1.0
    if softcap:
        t = torch.tanh(s / softcap)
        s, cap_grad = softcap * t, 1 - t * t
    visible = _visible(nq, nk, causal, window_left, window_right)
    finite_lse = torch.where(torch.isfinite(lse), lse.double(), 0.0)[..., None]
    p = torch.where(visible, torch.exp(torch.where(visible, s, 0.0) - finite_lse), 0.0)
    dp = dout.double() @ vv.transpose(-1, -2)
    ds = p * (dp - (dout.double() * o.double()).sum(-1, keepdim=True)) * cap_grad
    dq = ds @ kk * scale
    dk = (ds.transpose(-1, -2) @ q.double() * scale).view(b, hk, hq // hk, nk, d).sum(2)
    dv = (p.transpose(-1, -2) @ dout.double()).view(b, hk, hq // hk, nk, d).sum(2)
    return tuple(g.to(q.dtype).contiguous() for g in (dq, dk, dv))


@contextmanager
def cpu_kernels(count=None):
    """CPU stand-ins for the two CUDA kernels, registered for the duration of the block; `count` (a list)
    records each backward call."""
    lib = torch.library.Library("tk_ops", "IMPL")

    def backward(*args):
        if count is not None:
            count.append(1)
        return _standin_backward(*args)
    try:
        torch.library.register_kernel("tk_ops::attention_fwd", "cpu", _standin_forward, lib=lib)
        torch.library.register_kernel("tk_ops::attention_bwd", "cpu", backward, lib=lib)
        yield
    finally:
        lib._destroy()


def naive_attention(q, k, v, causal, scale, window=(-1, -1), softcap=0.0):
    """(O, LSE, visible rows) by the textbook formula in float64, differentiable everywhere, for autograd:
    rows that see no key give O = 0 with a zero gradient."""
    hq, hk, nq, nk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    kk = k.repeat_interleave(hq // hk, dim=1)
    vv = v.repeat_interleave(hq // hk, dim=1)
    s = q @ kk.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    visible = _visible(nq, nk, causal, *window)
    m = s.detach().masked_fill(~visible, float("-inf")).amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)  # shifting by a constant changes no value or gradient
    e = torch.where(visible, torch.exp(torch.where(visible, s, m) - m), 0.0)
    denom = e.sum(-1, keepdim=True)
    o = (e / denom.clamp_min(1e-300)) @ vv
    lse = (m + torch.log(denom.clamp_min(1e-300)))[..., 0]
    return o, lse, visible.any(-1)


def leaves(*shapes, requires_grad=(True, True, True), dtype=torch.float64):
    return [torch.randn(*s, dtype=dtype).requires_grad_(r) for s, r in zip(shapes, requires_grad)]


# (Hq, Hk, Nq, Nk): MHA, GQA, MQA, cross lengths both ways (causal rows with Nq > Nk see no key), one query.
GRAD_CASES = [(2, 2, 9, 9), (4, 2, 13, 13), (3, 1, 11, 7), (4, 2, 5, 12), (4, 1, 12, 5), (2, 2, 1, 6)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "hq{}_hk{}_{}x{}".format(*c))
def test_reference_backward_matches_autograd(case, causal):
    hq, hk, nq, nk = case
    q, k, v = leaves((2, hq, nq, 64), (2, hk, nk, 64), (2, hk, nk, 64))
    dout, dlse = torch.randn(2, hq, nq, 64, dtype=torch.float64), torch.randn(2, hq, nq, dtype=torch.float64)
    o, lse, seen = naive_attention(q, k, v, causal, 0.3)
    loss = (o * dout).sum() + (torch.where(seen, lse, 0.0) * dlse).sum()
    expect = torch.autograd.grad(loss, (q, k, v))
    # the reference's forward agrees with the naive one
    ref_o, ref_lse = reference.attention(q, k, v, causal=causal, scale=0.3)
    torch.testing.assert_close(ref_o, o)
    torch.testing.assert_close(ref_lse[..., seen], lse[..., seen])
    got = reference.attention_backward(q, k, v, dout, causal, 0.3, dlse=torch.where(seen, dlse, 0.0))
    for name, g, e in zip("qkv", got, expect):
        assert g.dtype == torch.float64 and g.shape == e.shape, name
        torch.testing.assert_close(g, e, msg=f"d{name}")
    # O alone (no dlse), default scale
    o, _, _ = naive_attention(q, k, v, causal, 64 ** -0.5)
    expect = torch.autograd.grad((o * dout).sum(), (q, k, v))
    for name, g, e in zip("qkv", reference.attention_backward(q, k, v, dout, causal), expect):
        torch.testing.assert_close(g, e, msg=f"d{name}")
    if causal and nq > nk:
        assert (got[0][:, :, : nq - nk] == 0).all(), "rows that see no key get dq = 0"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "hq{}_hk{}_{}x{}".format(*c))
def test_autograd_formula_on_cpu_standins(case, causal, built):
    """Gradients through torch.ops.tk_ops.attention_fwd (with CPU stand-ins for the kernels) equal the
    float64 reference: through O, through LSE (the second backward call), and through both."""
    hq, hk, nq, nk = case
    q, k, v = leaves((2, hq, nq, 64), (2, hk, nk, 64), (2, hk, nk, 64))
    dout, dlse = torch.randn(2, hq, nq, 64, dtype=torch.float64), torch.randn(2, hq, nq, dtype=torch.float64)
    calls = []
    with cpu_kernels(calls):
        o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, causal, 0.2)
        seen = torch.isfinite(lse)
        dlse = torch.where(seen, dlse, 0.0)
        for with_o, with_lse, n_calls in ((True, False, 1), (False, True, 1), (True, True, 2)):
            calls.clear()
            loss = 0.0
            if with_o:
                loss = loss + (o * dout).sum()
            if with_lse:
                loss = loss + (torch.where(seen, lse, 0.0) * dlse).sum()
            got = torch.autograd.grad(loss, (q, k, v), retain_graph=True)
            expect = reference.attention_backward(q, k, v, dout if with_o else torch.zeros_like(dout), causal, 0.2,
                                                  dlse=dlse if with_lse else None)
            assert len(calls) == n_calls, (with_o, with_lse)
            for name, g, e in zip("qkv", got, expect):
                # LSE is float32 in the op, so P carries ~1e-7 relative error
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=f"d{name} o={with_o} lse={with_lse}")


def test_autograd_only_where_required(built):
    q, k, v = leaves((1, 4, 6, 64), (1, 2, 6, 64), (1, 2, 6, 64), requires_grad=(False, True, False))
    with cpu_kernels():
        o, _ = torch.ops.tk_ops.attention_fwd(q, k, v, True, 0.125)
        o.sum().backward()
    assert q.grad is None and v.grad is None and k.grad is not None and k.grad.shape == k.shape
    torch.testing.assert_close(k.grad, reference.attention_backward(q, k, v, torch.ones_like(o), True, 0.125)[1],
                               rtol=1e-5, atol=1e-5)


def test_opcheck_forward_and_backward_ops(built):
    """Schema, fake-vs-real metadata, autograd registration and AOT-dispatch (torch.compile's path) of both ops,
    with the CPU stand-ins in place of the kernels (in bfloat16: the Meta kernels hold the ops' dtype rule too)."""
    q, k, v = leaves((2, 4, 7, 64), (2, 2, 5, 64), (2, 2, 5, 64), dtype=torch.bfloat16)
    with cpu_kernels():
        torch.library.opcheck(torch.ops.tk_ops.attention_fwd, (q, k, v, True, 0.125))
        torch.library.opcheck(torch.ops.tk_ops.attention_fwd, (q, k, v, False, 0.5))
        o, lse = (x.detach() for x in torch.ops.tk_ops.attention_fwd(q, k, v, False, 0.125))
        args = (q.detach(), k.detach(), v.detach(), o, torch.randn_like(o), lse, False, 0.125)
        torch.library.opcheck(torch.ops.tk_ops.attention_bwd, args)


def test_compiled_backward_traces_with_one_call(built):
    """torch.compile(fullgraph=True) traces forward and backward; an LSE that is not used costs no second
    backward call."""
    q, k, v = leaves((1, 4, 10, 64), (1, 1, 8, 64), (1, 1, 8, 64), dtype=torch.bfloat16)
    dout = torch.randn(1, 4, 10, 64, dtype=torch.bfloat16)

    def loss(q, k, v):
        return (torch.ops.tk_ops.attention_fwd(q * 2, k, v, True, 0.125)[0] * dout).sum()
    calls = []
    with cpu_kernels(calls):
        eager = torch.autograd.grad(loss(q, k, v), (q, k, v))
        calls.clear()
        compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
        got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    assert len(calls) == 1
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e)


# ---------------------------------------------------------------- nn.Attention arguments

@pytest.mark.parametrize("args, match", [
    ((512, 3), "multiple of num_heads"),
    ((512, 16), "head dimension .* = 32 must be 64, 96, 128 or 256"),
    ((960, 3), "head dimension .* = 320 must be 64, 96, 128 or 256"),
    ((512, 8, 3), "num_heads=8 must be a multiple of num_kv_heads=3"),
    ((512, 0), "num_heads must be a positive int"),
    ((512, 8, 0), "num_kv_heads must be a positive int"),
    ((512.0, 8), "embed_dim must be a positive int"),
])
def test_nn_attention_rejects_bad_arguments(args, match, built):
    with pytest.raises(InputError, match=match):
        tk_ops.nn.Attention(*args, device="meta")


def test_nn_attention_shapes(built):
    m = tk_ops.nn.Attention(1024, 8, num_kv_heads=2, causal=True, device="meta")
    assert m.head_dim == 128 and m.causal and m.qkv.weight.dtype == torch.bfloat16
    assert m.qkv.weight.shape == ((8 + 2 * 2) * 128, 1024) and m.qkv.bias is None
    assert m.proj.weight.shape == (1024, 1024)
    assert isinstance(m.qkv, tk_ops.nn.Linear) and isinstance(m.proj, tk_ops.nn.Linear)
    assert tk_ops.nn.Attention(256, 4, bias=True, device="meta").qkv.bias.shape == (3 * 256,)
    with pytest.raises(InputError, match=r"\(batch, seq_len, 1024\)"):
        m(t(2, 5, 512, device="meta"))


# ---------------------------------------------------------------- benchmark cases

def test_bench_backward_cases():
    forward = attention_bench.cases()
    backward = attention_bench.cases(backward=True)
    assert [c.shape for c in backward] == [c.shape for c in forward]
    assert {c.shape[2] for c in backward} == {1024, 2048, 4096, 8192, 16384}
    assert all(c.shape[0] * c.shape[2] == 16384 and c.shape[1] == 16 for c in backward)
    for f, b in zip(forward, backward):
        assert b.group == f.group + " backward" and b.flops == pytest.approx(2.5 * f.flops)
        assert [i.name for i in b.impls] == ["tk_ops", "sdpa cudnn", "sdpa flash"]
        assert all(i.setup is not None for i in b.impls) and b.impls[0].ours


# ---------------------------------------------------------------- windows and softcap

@pytest.mark.parametrize("window", [(-2, 0), (0, -5), (3, -100)])
def test_rejects_bad_window_values(window, built):
    with pytest.raises(InputError, match=r"window must be \(left, right\) with each side -1"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), window=window)


@pytest.mark.parametrize("softcap", [-1.0, float("nan"), float("inf")])
def test_rejects_bad_softcap_values(softcap, built):
    with pytest.raises(InputError, match="softcap must be 0"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), softcap=softcap)


def test_option_rules_run_in_the_meta_and_backward_kernels(built):
    q = t(2, 4, 50, 64, device="meta")
    lse = t(2, 4, 50, device="meta", dtype=torch.float32)
    with pytest.raises(ValueError, match="window must be"):
        torch.ops.tk_ops.attention_fwd(q, q, q, False, None, -3, 0, 0.0)
    with pytest.raises(ValueError, match="softcap must be"):
        torch.ops.tk_ops.attention_bwd(q, q, q, q, q, lse, False, None, -1, -1, -2.0)
    out, lse = torch.ops.tk_ops.attention_fwd(q, q, q, True, None, 128, -1, 30.0)
    assert out.shape == q.shape and lse.shape == (2, 4, 50)


@pytest.mark.parametrize("window, softcap", [("left", 0.0), ((1, 2, 3), 0.0), ((1.5, 2), 0.0), ((True, 0), 0.0),
                                             ((-1, -1), True), ((-1, -1), "30")])
def test_option_types_the_op_cannot_see(window, softcap):
    with pytest.raises(InputError, match="window must be a pair of ints|softcap must be a number"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), window=window, softcap=softcap)


def test_reference_window_convention():
    """FlashAttention's convention, bottom-right aligned: row i of (nq, nk) sees keys
    i + nk - nq - left .. i + nk - nq + right; causal sets right = 0; -1 is unlimited."""
    seen = reference.attention_visible(4, 6, window=(1, 0))
    # diag = 2: row 0 sees keys 1..2, row 3 sees keys 4..5
    assert seen[0].nonzero().flatten().tolist() == [1, 2]
    assert seen[3].nonzero().flatten().tolist() == [4, 5]
    assert torch.equal(reference.attention_visible(5, 5, causal=True, window=(-1, 7)),
                       reference.attention_visible(5, 5, causal=True))
    assert torch.equal(reference.attention_visible(5, 5, causal=True), torch.ones(5, 5, dtype=torch.bool).tril())
    assert reference.attention_visible(3, 3, window=(-1, -1)).all()
    # a window wider than the sequence changes nothing
    assert torch.equal(reference.attention_visible(6, 6, window=(100, 100)), torch.ones(6, 6, dtype=torch.bool))


def test_reference_softcap():
    q, k, v = torch.randn(1, 2, 9, 64) * 4, torch.randn(1, 2, 9, 64) * 4, torch.randn(1, 2, 9, 64)
    out, lse = reference.attention(q, k, v, scale=0.5, softcap=3.0)
    s = 3.0 * torch.tanh(0.5 * q.double() @ k.double().transpose(-1, -2) / 3.0)
    torch.testing.assert_close(lse, torch.logsumexp(s, -1))
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v.double())


# (causal, window, softcap): windows on each side, the diagonal alone, with and without a cap.
MASK_CASES = [(True, (2, -1), 0.0), (False, (3, 1), 0.0), (False, (0, 0), 2.0), (False, (-1, 2), 0.0),
              (True, (-1, -1), 1.5), (False, (4, 2), 5.0)]


@pytest.mark.parametrize("causal, window, softcap", MASK_CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "hq{}_hk{}_{}x{}".format(*c))
def test_reference_backward_matches_autograd_with_masks(case, causal, window, softcap):
    hq, hk, nq, nk = case
    q, k, v = leaves((2, hq, nq, 64), (2, hk, nk, 64), (2, hk, nk, 64))
    dout, dlse = torch.randn(2, hq, nq, 64, dtype=torch.float64), torch.randn(2, hq, nq, dtype=torch.float64)
    o, lse, seen = naive_attention(q, k, v, causal, 0.3, window, softcap)
    loss = (o * dout).sum() + (torch.where(seen, lse, 0.0) * dlse).sum()
    expect = torch.autograd.grad(loss, (q, k, v))
    ref_o, ref_lse = reference.attention(q, k, v, causal=causal, scale=0.3, window=window, softcap=softcap)
    torch.testing.assert_close(ref_o, o)
    torch.testing.assert_close(ref_lse[..., seen], lse[..., seen])
    got = reference.attention_backward(q, k, v, dout, causal, 0.3, dlse=torch.where(seen, dlse, 0.0), window=window,
                                       softcap=softcap)
    for name, g, e in zip("qkv", got, expect):
        torch.testing.assert_close(g, e, msg=f"d{name}")


@pytest.mark.parametrize("causal, window, softcap", MASK_CASES, ids=lambda c: str(c))
def test_autograd_formula_passes_the_options_on(causal, window, softcap, built):
    """The saved options reach both backward calls (through O and through LSE)."""
    q, k, v = leaves((2, 4, 11, 64), (2, 2, 9, 64), (2, 2, 9, 64))
    dout, dlse = torch.randn(2, 4, 11, 64, dtype=torch.float64), torch.randn(2, 4, 11, dtype=torch.float64)
    with cpu_kernels():
        o, lse = torch.ops.tk_ops.attention_fwd(q, k, v, causal, 0.2, window[0], window[1], softcap)
        seen = torch.isfinite(lse)
        dlse = torch.where(seen, dlse, 0.0)
        got = torch.autograd.grad((o * dout).sum() + (torch.where(seen, lse, 0.0) * dlse).sum(), (q, k, v))
    expect = reference.attention_backward(q, k, v, dout, causal, 0.2, dlse=dlse, window=window, softcap=softcap)
    for name, g, e in zip("qkv", got, expect):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=f"d{name}")


def test_bench_mask_cases():
    cases = attention_bench.cases(masks=True)
    labels = [c.name for c in cases]
    assert labels.count("causal (dense)") == 2 and labels.count("window 1024") == 2 and labels.count("softcap 30") == 2
    for c in cases:
        b, h, n, d = c.shape
        assert b * n == 16384 and h == 16 and [i.name for i in c.impls][:2] == ["tk_ops", "flex"]
    backward = attention_bench.cases(masks=True, backward=True)
    assert len([c for c in cases if c.name.startswith("packed")]) == 2
    for f, b in zip(cases, backward):
        assert b.name == f.name and b.flops == pytest.approx(2.5 * f.flops)
        assert all(i.setup is not None for i in b.impls)


def test_bench_document_lengths():
    lengths = attention_bench.document_lengths()
    assert sum(lengths) == 16384 and all(1 <= n <= 4096 for n in lengths) and min(lengths[:-1]) >= 128


@pytest.mark.parametrize("n, left", [(10, -1), (10, 0), (10, 3), (10, 9), (10, 20), (1, 5)])
def test_bench_counts_visible_pairs(n, left):
    assert attention_bench.visible_pairs(n, left) == int(reference.attention_visible(n, n, True, (left, -1)).sum())


# ---------------------------------------------------------------- packed documents (attention_varlen)

def _offsets(*values, dtype=torch.int32, device="cpu"):
    return torch.tensor(values, dtype=dtype, device=device)


def test_varlen_rules(built):
    q, kv = t(30, 4, 64), t(30, 2, 64)
    off = _offsets(0, 10, 30)
    with pytest.raises(InputError, match="3-D"):
        tk_ops.attention_varlen(t(1, 30, 4, 64), kv, kv, off, off, 20, 20)
    with pytest.raises(DTypeError, match="cu_seqlens_q must be int32"):
        tk_ops.attention_varlen(q, kv, kv, off.long(), off, 20, 20)
    with pytest.raises(InputError, match="cu_seqlens_k must be 1-D"):
        tk_ops.attention_varlen(q, kv, kv, off, off.view(1, 3), 20, 20)
    with pytest.raises(InputError, match="same documents"):
        tk_ops.attention_varlen(q, kv, kv, off, _offsets(0, 30), 20, 20)
    with pytest.raises(InputError, match="max_seqlen_q and max_seqlen_k must be >= 0"):
        tk_ops.attention_varlen(q, kv, kv, off, off, -1, 20)
    with pytest.raises(InputError, match="must be Python ints"):
        tk_ops.attention_varlen(q, kv, kv, off, off, 20.0, 20)
    with pytest.raises(InputError, match="head_dim must be"):
        tk_ops.attention_varlen(t(30, 4, 32), t(30, 2, 32), t(30, 2, 32), off, off, 20, 20)
    with pytest.raises(InputError, match="multiple of the key/value heads"):
        tk_ops.attention_varlen(t(30, 3, 64), kv, kv, off, off, 20, 20)
    with pytest.raises(InputError, match="window must be"):
        tk_ops.attention_varlen(q, kv, kv, off, off, 20, 20, window=(-3, 0))
    with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors"):
        tk_ops.attention_varlen(q, kv, kv, off, off, 20, 20)


def test_varlen_meta_kernel_gives_shapes(built):
    q, kv = t(37, 8, 128, device="meta"), t(50, 2, 128, device="meta")
    off = _offsets(0, 17, 37, device="meta")
    out, lse = torch.ops.tk_ops.attention_varlen_fwd(q, kv, kv, off, off, 20, 33, True, None, -1, -1, 0.0)
    assert out.shape == (37, 8, 128) and out.dtype == torch.bfloat16
    assert lse.shape == (8, 37) and lse.dtype == torch.float32


def test_reference_varlen_is_per_document():
    lengths = [3, 0, 5, 1]
    off = _offsets(0, 3, 3, 8, 9)
    q, k, v = torch.randn(11, 2, 64), torch.randn(9, 1, 64), torch.randn(9, 1, 64)  # two query rows past the end
    out, lse = reference.attention_varlen(q, k, v, off, off, causal=True)
    assert out.shape == (11, 2, 64) and lse.shape == (2, 11)
    start = 0
    for n in lengths:
        if n:
            bhnd = [t[start:start + n].transpose(0, 1)[None] for t in (q, k, v)]
            o_i, lse_i = reference.attention(*bhnd, causal=True)
            torch.testing.assert_close(out[start:start + n], o_i[0].transpose(0, 1))
            torch.testing.assert_close(lse[:, start:start + n], lse_i[0])
        start += n
    assert (out[9:] == 0).all() and torch.isneginf(lse[:, 9:]).all()


def test_varlen_autograd_on_meta_tensors(built):
    q = t(37, 8, 64, device="meta").requires_grad_()
    k = t(50, 2, 64, device="meta").requires_grad_()
    v = t(50, 2, 64, device="meta").requires_grad_()
    off_q, off_k = _offsets(0, 17, 37, device="meta"), _offsets(0, 20, 50, device="meta")
    out, lse = torch.ops.tk_ops.attention_varlen_fwd(q, k, v, off_q, off_k, 20, 30, True, None, 64, -1, 0.0)
    assert out.requires_grad and lse.shape == (8, 37)
    dq, dk, dv = torch.autograd.grad(out.sum() + lse.sum(), (q, k, v))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_varlen_backward_rules(built):
    q, kv = t(30, 4, 64, device="meta"), t(30, 2, 64, device="meta")
    off = _offsets(0, 10, 30, device="meta")
    bwd = torch.ops.tk_ops.attention_varlen_bwd
    with pytest.raises(ValueError, match=r"lse must be \(Hq, total_q\) = \(4, 30\)"):
        bwd(q, kv, kv, q, q, t(30, 4, device="meta", dtype=torch.float32), off, off, 10, 20)
    with pytest.raises(ValueError, match="dout must have q's shape"):
        bwd(q, kv, kv, q, t(29, 4, 64, device="meta"), t(4, 30, device="meta", dtype=torch.float32), off, off, 10, 20)
    dq, dk, dv = bwd(q, kv, kv, q, q, t(4, 30, device="meta", dtype=torch.float32), off, off, 10, 20)
    assert dq.shape == q.shape and dk.shape == kv.shape


@pytest.mark.parametrize("offsets, message", [((1, 10, 30), "cu_seqlens_q must start at 0, got 1"),
                                              ((0, 20, 10, 30), "must not decrease .* got 20 then 10 at index 2"),
                                              ((0, 10, 31), "cu_seqlens_q ends at 31, past the packed tensor's 30 "
                                                             "rows")])
def test_varlen_host_offsets_are_checked(offsets, message, built):
    q, kv = t(30, 4, 64), t(30, 2, 64)
    good = _offsets(*([0] * (len(offsets) - 1)), 30)
    with pytest.raises(InputError, match=message):
        tk_ops.attention_varlen(q, kv, kv, _offsets(*offsets), good, 20, 20)
    # offsets in host memory that pass reach the device rule (the tensors here are CPU ones)
    with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors"):
        tk_ops.attention_varlen(q, kv, kv, good, good, 20, 20)
