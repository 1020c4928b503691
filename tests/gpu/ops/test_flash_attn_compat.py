"""tk_ops.flash_attn on the GPU against a float64 reference of flash-attn 2's documented semantics (written in
tests/cpu/test_flash_attn_compat.py, independent of the kernels' own reference): flash_attn_func with bottom-right
causal masks across lengths (the empty top rows included), sliding windows, softcap, GQA, both 16-bit dtypes and an
explicit scale; the packed functions; packed documents; the softmax_lse values and layouts; gradients of q, k, v
(and through softmax_lse); the output's memory layout; deterministic=True refused only where a backward may run."""
from __future__ import annotations

import pytest
import torch

from tk_ops.errors import InputError
from tk_ops.flash_attn import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                               flash_attn_varlen_func)

from ...cpu.test_flash_attn_compat import fa_reference, fa_varlen_reference
from ..util import assert_close, fresh_pool_with_nan
from .test_sdpa_compat import BWD_MAX_TOL, BWD_TOL, FWD_TOL, ZERO_ATOL, max_err

BF16, FP16 = torch.bfloat16, torch.float16
# Per element of softmax_lse, rows that see a key: the scores are exact products of the 16-bit inputs, summed in fp32.
LSE_ATOL = 2e-3
# The softcap the tests run with, on q and k doubled: scores of standard deviation 4 at D = 64 under a cap of 5, so
# the cap bends most of the scores that matter (a kernel ignoring it misses O by far more than the bounds). The
# kernels' tanh is the hardware's approximation (relative error up to 2^-11): each capped score may be off by
# 5 * 2^-11 = 2.4e-3, which bounds the LSE's error too; the gradient rows at the top of a causal band, where few keys
# and the cap's derivative shrink the row norms, are held to 8x the tolerance instead of 4x.
CAP, CAP_INPUT_SCALE, CAPPED_LSE_ATOL, CAPPED_ROW_SLACK = 5.0, 2.0, 4e-3, 8.0


def rand(*shape, dtype=BF16, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def check_grads(got, want, dtype, what, row_slack=None):
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype == dtype and torch.isfinite(g).all(), f"{what} {name}: {g.dtype}, finite"
        if not w.any():
            assert g.double().abs().max().item() <= ZERO_ATOL, f"{what} {name}: 0 in the reference"
            continue
        assert_close(g, w, BWD_TOL[dtype], f"{what} {name}", None if row_slack is None else row_slack * BWD_TOL[dtype])
        assert max_err(g, w) <= BWD_MAX_TOL[dtype], f"{what} {name}: max error {max_err(g, w):.3e}"


def check_lse(lse, want_lse, what, atol=LSE_ATOL):
    assert lse.dtype == torch.float32 and lse.shape == want_lse.shape, f"{what}: {lse.dtype} {tuple(lse.shape)}"
    empty = torch.isneginf(want_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: rows that see no key must have -inf, and only they"
    assert not torch.isnan(lse).any(), f"{what}: NaN"
    if (~empty).any():
        err = (lse.double()[~empty] - want_lse[~empty]).abs().max().item()
        assert err <= atol, f"{what}: max error {err:.3e}"


# (causal, window_size, softcap): plain, bottom-right causal, a causal window, a two-sided window, a right-only
# window, a left side given as -5 (unlimited, as any negative side in flash-attn), a softcap with causal.
OPTIONS = [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0), (True, (100, -1), 0.0), (False, (64, 32), 0.0),
           (False, (-1, 20), 0.0), (True, (-5, 7), 0.0), (True, (-1, -1), CAP)]
OPTION_IDS = ["full", "causal", "causal-w100", "w64_32", "w-1_20", "causal-wneg", "causal-cap"]
LENGTHS = [(300, 300), (128, 555), (555, 128), (1, 400)]


@pytest.mark.parametrize("lens", LENGTHS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("causal, window, softcap", OPTIONS, ids=OPTION_IDS)
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("d", [64, 128])
def test_flash_attn_func(d, heads, causal, window, softcap, lens):
    (hq, hk), (nq, nk) = heads, lens
    s = CAP_INPUT_SCALE if softcap else 1.0
    q, k, v = rand(2, nq, hq, d, scale=s), rand(2, nk, hk, d, scale=s), rand(2, nk, hk, d)
    what = f"d={d} heads={heads} causal={causal} window={window} softcap={softcap} {nq}x{nk}"
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    fresh_pool_with_nan(4 * q.numel())
    out, lse, s_dmask = flash_attn_func(*leaves, causal=causal, window_size=window, softcap=softcap,
                                        return_attn_probs=True)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = fa_reference(*ref_leaves, causal=causal, window_size=window, softcap=softcap)
    assert s_dmask is None
    assert out.shape == (2, nq, hq, d) and out.dtype == BF16 and out.is_contiguous(), "(B, N, H, D), no copy back"
    assert_close(out.detach(), ref.detach(), FWD_TOL[BF16], f"{what}: out")
    check_lse(lse, ref_lse.detach(), f"{what}: softmax_lse", CAPPED_LSE_ATOL if softcap else LSE_ATOL)
    empty = torch.isneginf(ref_lse.detach())  # (B, H, Nq)
    if empty.any():
        assert (out.transpose(1, 2)[empty] == 0).all(), f"{what}: rows that see no key output 0"
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, dout)
    want = torch.autograd.grad(ref, ref_leaves, dout.double())
    check_grads(got, want, BF16, what, CAPPED_ROW_SLACK if softcap else None)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [None, 0.07])
def test_fp16_and_scale(scale, causal):
    q, k, v = rand(2, 333, 8, 128, dtype=FP16), rand(2, 444, 2, 128, dtype=FP16), rand(2, 444, 2, 128, dtype=FP16)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, lse, _ = flash_attn_func(*leaves, softmax_scale=scale, causal=causal, return_attn_probs=True)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = fa_reference(*ref_leaves, causal=causal, softmax_scale=scale)
    assert_close(out.detach(), ref.detach(), FWD_TOL[FP16], "fp16 out")
    check_lse(lse, ref_lse.detach(), "fp16 softmax_lse")
    dout = torch.randn_like(out)
    check_grads(torch.autograd.grad(out, leaves, dout), torch.autograd.grad(ref, ref_leaves, dout.double()), FP16,
                "fp16")


def test_gradient_through_softmax_lse():
    """softmax_lse is differentiable here (flash-attn drops its gradient): a loss using it gets exact gradients."""
    q, k, v = rand(1, 200, 4, 64), rand(1, 300, 4, 64), rand(1, 300, 4, 64)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, lse, _ = flash_attn_func(*leaves, causal=True, return_attn_probs=True)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = fa_reference(*ref_leaves, causal=True)
    dout, dlse = torch.randn_like(out), torch.randn_like(lse)
    got = torch.autograd.grad((out.float() * dout).sum() + (lse * dlse).sum(), leaves)
    want = torch.autograd.grad((ref * dout.double()).sum() + (ref_lse * dlse.double()).sum(), ref_leaves)
    check_grads(got, want, BF16, "through softmax_lse")


@pytest.mark.parametrize("causal, window, softcap", [OPTIONS[1], OPTIONS[3], OPTIONS[6]],
                         ids=[OPTION_IDS[1], OPTION_IDS[3], OPTION_IDS[6]])
def test_packed(causal, window, softcap):
    """qkvpacked and kvpacked compute what flash_attn_func computes on their slices (bit for bit: the same kernels on
    the same values, read in place), with gradients in the packed shape against the reference."""
    s = CAP_INPUT_SCALE if softcap else 1.0
    qkv = rand(2, 300, 3, 4, 64, scale=s)
    qkv[:, :, 2] /= s  # values unscaled
    options = dict(causal=causal, window_size=window, softcap=softcap)
    leaf = qkv.detach().requires_grad_()
    out = flash_attn_qkvpacked_func(leaf, **options)
    assert torch.equal(out, flash_attn_func(*qkv.unbind(2), **options))
    ref_leaf = qkv.detach().double().requires_grad_()
    ref, _ = fa_reference(*ref_leaf.unbind(2), **options)
    assert_close(out.detach(), ref.detach(), FWD_TOL[BF16], "qkvpacked out")
    dout = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, leaf, dout)
    (want,) = torch.autograd.grad(ref, ref_leaf, dout.double())
    assert got.shape == qkv.shape
    check_grads(got.unbind(2), want.unbind(2), BF16, "qkvpacked", CAPPED_ROW_SLACK if softcap else None)

    q, kv = rand(2, 200, 8, 64, scale=s), rand(2, 350, 2, 2, 64, scale=s)
    kv[:, :, 1] /= s
    leaves = [q.detach().requires_grad_(), kv.detach().requires_grad_()]
    out, lse, _ = flash_attn_kvpacked_func(*leaves, return_attn_probs=True, **options)
    out2, lse2, _ = flash_attn_func(q, *kv.unbind(2), return_attn_probs=True, **options)
    assert torch.equal(out, out2) and torch.equal(lse, lse2)
    ref_leaves = [q.detach().double().requires_grad_(), kv.detach().double().requires_grad_()]
    ref, _ = fa_reference(ref_leaves[0], *ref_leaves[1].unbind(2), **options)
    assert_close(out.detach(), ref.detach(), FWD_TOL[BF16], "kvpacked out")
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, dout)
    want = torch.autograd.grad(ref, ref_leaves, dout.double())
    assert got[1].shape == kv.shape
    check_grads((got[0], *got[1].unbind(2)), (want[0], *want[1].unbind(2)), BF16, "kvpacked",
                CAPPED_ROW_SLACK if softcap else None)


# Documents (query rows, key rows): equal lengths, an empty query side, more queries than keys (bottom-right causal
# leaves its top rows empty), fewer; then 50 query rows past the last offset.
DOCS = [(300, 300), (0, 100), (700, 400), (100, 400), (1, 1)]


@pytest.mark.parametrize("offsets_on", ["cuda", "cpu"])
@pytest.mark.parametrize("causal, window, softcap", OPTIONS, ids=OPTION_IDS)
def test_varlen(causal, window, softcap, offsets_on):
    cu_q = torch.tensor([0] + [sum(d[0] for d in DOCS[:i + 1]) for i in range(len(DOCS))], dtype=torch.int32)
    cu_k = torch.tensor([0] + [sum(d[1] for d in DOCS[:i + 1]) for i in range(len(DOCS))], dtype=torch.int32)
    total_q, total_k = int(cu_q[-1]) + 50, int(cu_k[-1])
    s = CAP_INPUT_SCALE if softcap else 1.0
    q, k, v = rand(total_q, 8, 64, scale=s), rand(total_k, 2, 64, scale=s), rand(total_k, 2, 64)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    max_q, max_k = max(d[0] for d in DOCS), max(d[1] for d in DOCS)
    fresh_pool_with_nan(4 * q.numel())
    out, lse, none = flash_attn_varlen_func(*leaves, cu_q.to(offsets_on), cu_k.to(offsets_on), max_q, max_k,
                                            causal=causal, window_size=window, softcap=softcap, return_attn_probs=True)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    options = dict(causal=causal, window_size=window, softcap=softcap)
    ref, ref_lse = fa_varlen_reference(*ref_leaves, cu_q, cu_k, **options)
    what = f"varlen causal={causal} window={window} softcap={softcap}"
    assert none is None and out.shape == q.shape
    assert_close(out.detach(), ref.detach(), FWD_TOL[BF16], f"{what}: out")
    check_lse(lse, ref_lse, f"{what}: softmax_lse (H, total_q)", CAPPED_LSE_ATOL if softcap else LSE_ATOL)
    assert (out[int(cu_q[-1]):] == 0).all(), "rows past the last offset output 0"
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, dout)
    want = torch.autograd.grad(ref, ref_leaves, dout.double())
    check_grads(got, want, BF16, what, CAPPED_ROW_SLACK if softcap else None)


def test_deterministic():
    """Refused where a backward may run (its dQ accumulation is atomic), accepted for a forward alone (which is
    deterministic: two calls agree bit for bit)."""
    q, k, v = rand(1, 256, 4, 64), rand(1, 256, 4, 64), rand(1, 256, 4, 64)
    with pytest.raises(InputError, match="deterministic"):
        flash_attn_func(q.requires_grad_(), k, v, causal=True, deterministic=True)
    with torch.no_grad():
        first = flash_attn_func(q, k, v, causal=True, deterministic=True)
        assert torch.equal(first, flash_attn_func(q, k, v, causal=True, deterministic=True))
        assert torch.equal(first, flash_attn_func(q, k, v, causal=True))
