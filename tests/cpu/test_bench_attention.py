"""The attention benchmark's masked cases and their FlashAttention peers, without a GPU: FA4 (flash_attn.cute) and
flash-attn 2 (flash_attn) join FlexAttention when they import and are left out with a note when not; each gets its
own (B, N, H, D) or (total, H, D) copies in its set-up (untimed), the window, softcap and documents of the case in its
own convention, the dO every implementation draws, and returns outputs and gradients in the layout the others are
compared in. The FlashAttention functions are faked on the CPU with their documented masking rules and held to the
float64 reference."""
import importlib.machinery
import sys
import types

import pytest
import torch

import tk_ops.reference as ref
from tk_ops.bench import attention, core

FLAVOURS = ("FA4", "flash-attn")


def _visible(n, causal, window, none):
    """FlashAttention's rule: query i sees keys i - left .. i + right, a bound `none` (None or -1) unbounded; causal
    bounds the right at 0."""
    left, right = window
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    seen = torch.ones(n, n, dtype=torch.bool)
    if causal:
        seen &= j <= i
    if left is not none and left >= 0:
        seen &= j >= i - left
    if right is not none and right >= 0:
        seen &= j <= i + right
    return seen


def _attend(q, k, v, causal, window, softcap, none):
    """(N, H, D) -> (N, H, D) for one sequence, differentiable."""
    qh, kh, vh = (t.transpose(0, 1) for t in (q, k, v))
    s = (qh @ kh.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~_visible(q.shape[0], causal, window, none), float("-inf"))
    return (torch.softmax(s, -1) @ vh).transpose(0, 1)


def fake_flash(flavour, calls):
    none = None if flavour == "FA4" else -1

    def finish(out):
        return (out, None) if flavour == "FA4" else out  # FA4 returns (out, lse)

    def func(q, k, v, causal=False, window_size=(none, none), softcap=0.0):
        calls.append((flavour, "dense", q, window_size, softcap, causal))
        return finish(torch.stack([_attend(q[i], k[i], v[i], causal, window_size, softcap, none)
                                   for i in range(q.shape[0])]))

    def varlen(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, causal=False):
        calls.append((flavour, "varlen", q, cu_seqlens_q, max_seqlen_q, causal))
        cu = cu_seqlens_q.tolist()
        assert max_seqlen_q == max(b - a for a, b in zip(cu, cu[1:]))
        return finish(torch.cat([_attend(q[a:b], k[a:b], v[a:b], causal, (none, none), 0.0, none)
                                 for a, b in zip(cu, cu[1:])]))
    return func, varlen


@pytest.fixture
def flash(monkeypatch):
    """Both FlashAttention flavours importable; returns the list of their calls."""
    calls = []
    for flavour, name in zip(FLAVOURS, ("flash_attn.cute", "flash_attn")):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.flash_attn_func, module.flash_attn_varlen_func = fake_flash(flavour, calls)
        monkeypatch.setitem(sys.modules, name, module)
    return calls


@pytest.fixture
def no_flash(monkeypatch):
    for name in ("flash_attn", "flash_attn.cute"):
        monkeypatch.setitem(sys.modules, name, None)


def test_flash_peers_left_out_with_a_note(no_flash):
    case = attention.mask_case("window 1024", 1, 64, 16, 1024, 0.0, False)
    assert [i.name for i in case.impls] == ["tk_ops", "flex"]
    assert len(case.notes) == 2
    assert case.notes[0].startswith("FA4 (from flash_attn.cute import flash_attn_func) left out")
    assert case.notes[1].startswith("flash-attn (from flash_attn import flash_attn_func) left out")
    packed = attention.packed_case(16, lengths=[5, 9])
    assert [i.name for i in packed.impls] == ["tk_ops", "flex"] and packed.notes == case.notes


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_flash_peers_join_every_masked_case(backward, flash):
    cases = attention.cases(masks=True, backward=backward)
    for c in cases:
        names = [i.name for i in c.impls]
        assert names[:2] == ["tk_ops", "flex"] and names[-2:] == list(FLAVOURS) and c.notes == []
        assert all(i.setup is not None for i in c.impls[-2:])  # the layout copies are made untimed
        assert c.tol == (attention.BACKWARD_TOL if backward else attention.FORWARD_TOL)
        assert c.outputs == (("dQ", "dK", "dV") if backward else ("O",))
    dense = [c for c in cases if c.name == "causal (dense)"]
    assert [i.name for i in dense[0].impls] == ["tk_ops", "flex", "sdpa cudnn", *FLAVOURS]


def test_dense_cases_keep_their_checks():
    for backward in (False, True):
        for c in attention.cases(quick=True, backward=backward):
            assert c.tol == (attention.BACKWARD_TOL if backward else attention.FORWARD_TOL)
            assert c.outputs == (("dQ", "dK", "dV") if backward else ("O",))


def inputs(b=2, n=24, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, attention.HEADS, n, d, dtype=torch.float64, generator=gen) for _ in range(3))


@pytest.mark.parametrize("left, softcap", [(-1, 0.0), (5, 0.0), (-1, 30.0), (7, 2.0)],
                         ids=["causal", "window", "softcap", "window+softcap"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_flash_dense_matches_the_reference(flavour, left, softcap, flash):
    q, k, v = inputs()
    case = attention.mask_case("x", 2, 24, 16, left, softcap, False, device="cpu")
    impl = next(i for i in case.impls if i.name == flavour)
    args = impl.setup(q, k, v)
    assert all(a.shape == (2, 24, attention.HEADS, 16) and a.is_contiguous() for a in args)
    out = impl.fn(*args)
    ((_, _, given, window, cap, causal),) = [c for c in flash if c[0] == flavour]
    assert given is args[0] and causal and cap == softcap
    assert window == ((left, 0) if left >= 0 else (None, None) if flavour == "FA4" else (-1, -1))
    expect, _ = ref.attention(q, k, v, causal=True, window=(left, -1), softcap=softcap)
    assert out.shape == expect.shape
    torch.testing.assert_close(out, expect, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("left, softcap", [(-1, 0.0), (5, 2.0)], ids=["causal", "window+softcap"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_flash_dense_backward_matches_the_reference(flavour, left, softcap, flash):
    q, k, v = inputs()
    case = attention.mask_case("x", 2, 24, 16, left, softcap, True, device="cpu")
    impl = next(i for i in case.impls if i.name == flavour)
    out, wrt, dout = impl.setup(q, k, v)
    assert all(t.is_contiguous() and t.requires_grad and t.shape == (2, 24, attention.HEADS, 16) for t in wrt)
    d_o = dout.transpose(1, 2)
    assert torch.equal(d_o, core.grad_like(q))  # the dO of every implementation, in their (B, H, N, D) layout
    grads = impl.fn(out, wrt, dout)
    expect = ref.attention_backward(q, k, v, d_o, causal=True, window=(left, -1), softcap=softcap)
    for g, e in zip(grads, expect, strict=True):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_flash_varlen_matches_the_reference(flavour, backward, flash):
    lengths = [5, 9, 2, 8]
    total = sum(lengths)
    case = attention.packed_case(16, backward=backward, lengths=lengths, device="cpu")
    case.make_inputs()  # makes the offsets
    impl = next(i for i in case.impls if i.name == flavour)
    q, k, v = inputs(b=1, n=total)
    cu = torch.tensor([0, 5, 14, 16, 24], dtype=torch.int32)

    def rows(t):
        return t[0].transpose(0, 1)
    if not backward:
        args = impl.setup(q, k, v)
        assert all(a.shape == (total, attention.HEADS, 16) and a.is_contiguous() for a in args)
        out = impl.fn(*args)
        expect, _ = ref.attention_varlen(rows(q), rows(k), rows(v), cu, cu, causal=True)
        assert out.shape == q.shape
        torch.testing.assert_close(rows(out), expect, rtol=1e-10, atol=1e-10)
    else:
        out, wrt, dout = impl.setup(q, k, v)
        assert torch.equal(dout, rows(core.grad_like(q)))
        grads = impl.fn(out, wrt, dout)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        o, _ = ref.attention_varlen(*(rows(t) for t in leaves), cu, cu, causal=True)
        expect = torch.autograd.grad(o, leaves, dout)
        for g, e in zip(grads, expect, strict=True):
            assert g.shape == q.shape
            torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9)
    ((_, _, _, given_cu, longest, causal),) = [c for c in flash if c[0] == flavour]
    assert torch.equal(given_cu, cu) and longest == 9 and causal
