"""Sliding windows and softcap on tk_ops.attention, forward (O, LSE) and backward, against the float64 reference:
every window shape (left only, right only, both, the diagonal alone, windows combined with causal), cross lengths
(bottom-right aligned, rows that see no key), GQA, head dims 64 and 128, bf16 and fp16, gradients through the LSE,
torch.compile and CUDA graphs."""
import pytest
import torch

import tk_ops
from tk_ops import reference

from ..util import assert_close, fresh_pool_with_nan, rel_err
from .test_attention import LSE_ATOL, TOL as FWD_TOL, qkv
from .test_attention_bwd import MAX_TOL as BWD_MAX_TOL, TOL as BWD_TOL, assert_grads

# The softcap the tests run with, on q and k scaled by CAP_INPUT_SCALE: scores of standard deviation 4, each row's
# largest near 3x the cap, so the cap bends most of the scores that matter (about a fifth pass it) while leaving
# enough of them unsaturated that its derivative shapes the gradients. Computed in float64 on the bands below, a
# kernel that ignored the cap would miss O by 0.09 to 5 (relative; the least where each row sees two keys) and the
# gradients by 0.3 to 11; one that dropped the cap's derivative 1 - tanh^2 from dS would miss dQ and dK by 0.5 to
# 2.6. (With the diagonal alone each row sees one key and no cap changes anything.)
CAP, CAP_INPUT_SCALE = 5.0, 2.0
# The kernels' tanh is the hardware's approximation (relative error up to 2^-11): each capped score carries an error
# up to softcap * 2^-11, above fp16's own rounding, and where tanh saturates its derivative 1 - tanh^2 keeps few
# correct bits. With a softcap fp16 results are held to these bounds instead of fp16's.
CAPPED_FP16_FWD_TOL, CAPPED_FP16_BWD_TOL, CAPPED_FP16_BWD_MAX_TOL = 5e-3, 1e-2, 2.5e-2
# A row of dQ that sees few keys (the top of a causal band) comes from dS = P (dP - delta), a difference that cancels
# where one key dominates, and delta carries O's rounding to 16 bits. The cap's derivative shrinks the other rows'
# gradients, against whose root-mean-square norm such a row is measured, so with a cap these rows reach 6e-2 in bf16
# (4e-3 when delta is formed from the exact O). Rows are held to 8x the tolerance there instead of 4x: a dropped or
# misplaced row is off by 0.5 to 1.
CAPPED_BWD_ROW_SLACK = 8.0


def lse_tol(softcap):
    """The LSE's bound per element: LSE_ATOL, or with a cap the hardware tanh's worst case if larger (a row that sees
    one key has the capped score itself as its LSE, off by up to softcap * 2^-11)."""
    return max(LSE_ATOL, softcap * 2.0 ** -11 + 1e-4)


def tolerances(dtype, softcap):
    """(forward tolerance, backward tolerance, backward max-element tolerance, backward row tolerance or None for
    assert_close's default) for this dtype and softcap."""
    if not softcap:
        return FWD_TOL[dtype], BWD_TOL[dtype], BWD_MAX_TOL[dtype], None
    if dtype == torch.float16:
        fwd, bwd, bwd_max = CAPPED_FP16_FWD_TOL, CAPPED_FP16_BWD_TOL, CAPPED_FP16_BWD_MAX_TOL
    else:
        fwd, bwd, bwd_max = FWD_TOL[dtype], BWD_TOL[dtype], BWD_MAX_TOL[dtype]
    return fwd, bwd, bwd_max, CAPPED_BWD_ROW_SLACK * bwd


def capped_qkv(b, hq, hk, nq, nk, d, dtype, softcap):
    """qkv(...), with q and k scaled by CAP_INPUT_SCALE when there is a softcap (so that it binds)."""
    q, k, v = qkv(b, hq, hk, nq, nk, d, dtype)
    if softcap:
        q, k = ((t.float() * CAP_INPUT_SCALE).to(dtype) for t in (q, k))
    return q, k, v


# (causal, window): a left window under causal (Mistral, Gemma 2), symmetric and lopsided non-causal windows,
# the diagonal alone, a right-only window, a window wider than the sequence.
BANDS = [(True, (128, -1)), (True, (1, -1)), (False, (100, 50)), (False, (0, 0)), (False, (-1, 30)),
         (False, (300, 7)), (True, (5000, 0))]
BAND_IDS = [f"{'causal' if c else 'full'}-w{w[0]}_{w[1]}" for c, w in BANDS]


def check_forward(q, k, v, causal, window, softcap, what):
    b, hq, nq, d = q.shape
    fresh_pool_with_nan(2 * b * hq * nq * (d + 1))
    out, lse = tk_ops.attention_with_lse(q, k, v, causal=causal, window=window, softcap=softcap)
    ref, ref_lse = reference.attention(q, k, v, causal=causal, window=window, softcap=softcap)
    assert_close(out, ref, tolerances(q.dtype, softcap)[0], f"{what}: O")
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: -inf LSE rows differ"
    if empty.any():
        assert (out[empty] == 0).all(), f"{what}: rows that see no key must be 0"
    if (~empty).any():
        lse_err = (lse.double()[~empty] - ref_lse[~empty]).abs().max().item()  # per element
        assert lse_err <= lse_tol(softcap), f"{what}: LSE max error {lse_err:.3e}"


def check_backward(q, k, v, causal, window, softcap, what):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = tk_ops.attention(q, k, v, causal=causal, window=window, softcap=softcap)
    dout = torch.randn_like(out)
    fresh_pool_with_nan(2 * (q.numel() + k.numel() + v.numel()))
    got = torch.autograd.grad(out, (q, k, v), dout)
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, causal, window=window,
                                       softcap=softcap)
    _, tol, max_tol, row_tol = tolerances(q.dtype, softcap)
    assert_grads(got, ref, q.dtype, what, tol, max_tol, row_tol)


@pytest.mark.parametrize("softcap", [0.0, CAP], ids=["nocap", f"cap{CAP:g}"])
@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
@pytest.mark.parametrize("causal, window", BANDS, ids=BAND_IDS)
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_forward_self(d, causal, window, n, softcap):
    b = 2 if n < 4096 else 1
    check_forward(*capped_qkv(b, 4, 2, n, n, d, torch.bfloat16, softcap), causal, window, softcap,
                  f"d={d} causal={causal} window={window} n={n} softcap={softcap}")


@pytest.mark.parametrize("causal, window", [(True, (2047, 0)), (True, (2048, 0)), (False, (1000, 1047)),
                                            (False, (1000, 1048))])
@pytest.mark.parametrize("softcap", [0.0, CAP], ids=["nocap", f"cap{CAP:g}"])
def test_window_tile_widths(causal, window, softcap):
    """At D = 64 windows with left + right below 2048 keys run on narrower key tiles than wider ones: both sides of
    the boundary, causal and not."""
    check_forward(*capped_qkv(1, 4, 2, 4500, 4500, 64, torch.bfloat16, softcap), causal, window, softcap,
                  f"causal={causal} window={window} softcap={softcap}")


@pytest.mark.parametrize("softcap", [0.0, CAP], ids=["nocap", f"cap{CAP:g}"])
@pytest.mark.parametrize("n", [17, 1000, 4097])
@pytest.mark.parametrize("causal, window", BANDS, ids=BAND_IDS)
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_backward_self(d, causal, window, n, softcap):
    b = 2 if n < 4096 else 1
    check_backward(*capped_qkv(b, 4, 2, n, n, d, torch.bfloat16, softcap), causal, window, softcap,
                   f"d={d} causal={causal} window={window} n={n} softcap={softcap}")


# Cross lengths: with Nq > Nk the top rows' bands start before key 0 (and causal rows see nothing there).
CROSS = [(300, 777), (777, 300), (1, 4097), (4097, 1)]


@pytest.mark.parametrize("lens", CROSS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("causal, window", [(True, (64, -1)), (False, (200, 10)), (False, (-1, 0))],
                         ids=["causal-w64", "full-w200_10", "full-w-1_0"])
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_cross_lengths(d, causal, window, lens):
    nq, nk = lens
    args = (*qkv(2, 4, 2, nq, nk, d, torch.bfloat16), causal, window, 0.0, f"d={d} {nq}x{nk} window={window}")
    check_forward(*args)
    check_backward(*args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("softcap", [50.0, 30.0, 5.0, 1.0])
@pytest.mark.parametrize("d", [64, 96, 128, 256])
def test_softcap(d, softcap, dtype):
    """Caps from barely active (50) to dominant (1: every score squashed into (-1, 1)), with scores large
    enough that the cap matters (inputs scaled by 3)."""
    q, k, v = qkv(2, 4, 4, 777, 777, d, dtype)
    args = ((q.float() * 3).to(dtype), (k.float() * 3).to(dtype), v, True, (-1, -1), softcap,
            f"d={d} softcap={softcap} {dtype}")
    check_forward(*args)
    check_backward(*args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("heads", [(2, 2), (8, 2), (3, 1)], ids=["mha", "gqa", "mqa"])
def test_window_and_softcap_with_gqa(heads, dtype):
    hq, hk = heads
    args = (*capped_qkv(2, hq, hk, 1500, 1500, 128, dtype, CAP), True, (256, -1), CAP, f"heads={heads} {dtype}")
    check_forward(*args)
    check_backward(*args)


def check_forward_scaled(q, k, v, scale, window, softcap, what):
    fresh_pool_with_nan(2 * q.numel() + q.shape[0] * q.shape[1] * q.shape[2])
    out, lse = tk_ops.attention_with_lse(q, k, v, scale=scale, window=window, softcap=softcap)
    ref, ref_lse = reference.attention(q, k, v, scale=scale, window=window, softcap=softcap)
    assert_close(out, ref, FWD_TOL[q.dtype], f"{what}: O")
    lse_err = (lse.double() - ref_lse).abs().max().item()
    assert lse_err <= lse_tol(softcap), f"{what}: LSE max error {lse_err:.3e}"


@pytest.mark.parametrize("scale", [0.05, -0.3, 0.0])
def test_softcap_with_explicit_scale(scale):
    """The cap acts on the scaled scores, softcap * tanh(scale * q.k / softcap): a cap of 2 on doubled inputs binds at
    scale 0.05 (scores of standard deviation 1.6) and saturates at -0.3 (9.6). In float64 on these inputs, ignoring
    the scale misses O by 0.24 and 1.4 (relative) and the gradients by 0.76 and 1.4; ignoring the cap misses O by 1.3
    and 5.6. At scale 0 every score is 0, the cap has nothing to act on, and only the forward runs."""
    q, k, v = capped_qkv(1, 2, 2, 300, 300, 64, torch.bfloat16, 2.0)
    what = f"scale={scale} softcap=2"
    check_forward_scaled(q, k, v, scale, (50, 50), 2.0, what)
    if scale == 0.0:
        return
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = tk_ops.attention(q, k, v, scale=scale, window=(50, 50), softcap=2.0)
    dout = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dout)
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, scale=scale, window=(50, 50),
                                       softcap=2.0)
    assert_grads(got, ref, torch.bfloat16, what, *tolerances(torch.bfloat16, 2.0)[1:])


def test_gradient_through_lse_with_window_and_softcap():
    """The second backward call for an LSE gradient carries the window and the softcap too."""
    q, k, v = (t.requires_grad_() for t in capped_qkv(2, 4, 2, 600, 600, 64, torch.bfloat16, CAP))
    out, lse = tk_ops.attention_with_lse(q, k, v, window=(100, 20), softcap=CAP)
    dout, dlse = torch.randn_like(out), torch.randn_like(lse)
    loss = (out.float() * dout.float()).sum() + (lse * dlse).sum()
    got = torch.autograd.grad(loss, (q, k, v))
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, dlse=dlse, window=(100, 20),
                                       softcap=CAP)
    assert_grads(got, ref, torch.bfloat16, "lse gradient", *tolerances(torch.bfloat16, CAP)[1:])


def test_compiles_fullgraph():
    class Block(torch.nn.Module):
        def forward(self, x, k, v):
            return tk_ops.attention(x * 2, k, v, causal=True, window=(64, -1), softcap=20.0).float().square().mean()

    q, k, v = (t.requires_grad_() for t in qkv(2, 4, 2, 333, 333, 64, torch.bfloat16))
    eager = torch.autograd.grad(Block()(q, k, v), (q, k, v))
    compiled = torch.autograd.grad(torch.compile(Block(), fullgraph=True)(q, k, v), (q, k, v))
    for name, c, e in zip("qkv", compiled, eager):
        assert rel_err(c, e) <= 1e-3, f"d{name}: compiled differs from eager by {rel_err(c, e):.2e}"


def test_cuda_graph_capture():
    q, k, v = capped_qkv(2, 4, 2, 1000, 1000, 128, torch.float16, CAP)
    kw = dict(window=(128, 0), softcap=CAP)
    tk_ops.attention(q, k, v, **kw)  # warm up outside capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = tk_ops.attention(q, k, v, **kw)
    q.copy_(torch.randn_like(q) * CAP_INPUT_SCALE)
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention(q, k, v, **kw)
    assert_close(out, ref, tolerances(torch.float16, CAP)[0], "graph replay")
