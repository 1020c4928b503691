"""Attention backward (tk_ops::attention_bwd, through autograd) against the float64 reference on the GPU:
head dims 64 and 128, causal or not, MHA / GQA / MQA, ragged and cross-attention lengths (both ways, causal
bottom-right included), bf16 and fp16; gradients through the log-sum-exp; strided views; gradients on a
subset of the inputs; torch.compile (forward and backward), CUDA graphs and opcheck."""
import pytest
import torch

import tk_ops
from tk_ops import reference

from ..util import assert_close, fresh_pool_with_nan, rel_err, worst_row

# ||grad - ref|| / ||ref||, and 4x that in every row (a (b, h, n) vector; assert_close). The backward rounds more on
# the way than the forward (P and dS go to 16 bits before their products, O enters delta in 16 bits): about 2.5e-3
# in bf16 and 3e-4 in fp16. A row that sees few keys is worse: dS = P (dP - delta) cancels where one key dominates and
# delta carries O's rounding to 16 bits, which leaves a few rows of dQ at up to about 3e-2 in bf16 and 4e-3 in fp16.
# fp16 keeps three more mantissa bits than bf16, so its bounds are about 7x tighter.
TOL = {torch.bfloat16: 2e-2, torch.float16: 3e-3}
# max |grad - ref| / max |ref|: a single wrong element the row norm would dilute.
MAX_TOL = {torch.bfloat16: 5e-2, torch.float16: 7.5e-3}
# With one visible key per row the softmax is constant and dQ = dK = 0 exactly; the kernel leaves ~1e-6 there
# (delta and dP agree only to fp32 rounding).
ZERO_ATOL = 5e-5


def qkv(b, hq, hk, nq, nk, d, dtype):
    q = torch.randn(b, hq, nq, d, device="cuda").to(dtype)
    k = torch.randn(b, hk, nk, d, device="cuda").to(dtype)
    v = torch.randn(b, hk, nk, d, device="cuda").to(dtype)
    return q, k, v


def max_err(out, ref) -> float:
    """max |out - ref| / max |ref| in float64."""
    out64, ref64 = out.double(), ref.double()
    return (out64 - ref64).abs().max().item() / ref64.abs().max().item()


def assert_grads(got, ref, dtype, what, tol=None, max_tol=None, row_tol=None):
    """Each gradient against its float64 reference: shape, dtype, finite, within `tol` (TOL) as a whole and `row_tol`
    (assert_close's default: ROW_SLACK x tol) in every row, and within `max_tol` (MAX_TOL) in its largest element
    error; a reference that is exactly zero by `ZERO_ATOL` in absolute terms."""
    tol = TOL[dtype] if tol is None else tol
    max_tol = MAX_TOL[dtype] if max_tol is None else max_tol
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert g.shape == r.shape, f"{what} {name}: shape {tuple(g.shape)} != {tuple(r.shape)}"
        assert g.dtype == dtype, f"{what} {name}: dtype {g.dtype}"
        assert torch.isfinite(g).all(), f"{what} {name}: non-finite values"
        if r.numel() == 0:
            continue
        if not r.any():
            err = g.double().abs().max().item()
            assert err <= ZERO_ATOL, f"{what} {name}: exactly 0 in the reference, max |value| {err:.3e}"
            continue
        assert_close(g, r, tol, f"{what} {name}", row_tol)
        mx = max_err(g, r)
        assert mx <= max_tol, f"{what} {name}: max error {mx:.3e} of the largest value"


def check(q, k, v, causal, scale=None, what=""):
    """Gradients of sum(O * dO) through tk_ops.attention against reference.attention_backward."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = tk_ops.attention(q, k, v, causal=causal, scale=scale)
    dout = torch.randn_like(out)
    fresh_pool_with_nan(2 * (q.numel() + k.numel() + v.numel()))
    got = torch.autograd.grad(out, (q, k, v), dout)
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, causal, scale)
    assert_grads(got, ref, q.dtype, what)
    nq, nk = q.shape[2], k.shape[2]
    if causal and nq > nk:  # the first nq - nk rows see no key
        assert (got[0][:, :, : nq - nk] == 0).all(), f"{what}: dq of rows that see no key must be 0"
    return got


def self_grid():
    """Every (D, causal, heads, N) in bf16; fp16 on the short and the long ragged length."""
    heads = {"mha": (2, 2), "gqa": (4, 2), "mqa": (3, 1)}
    out = []
    for d in (64, 128):
        for causal in (False, True):
            for hname, h in heads.items():
                for n in (1, 17, 1000, 4097):
                    out.append(pytest.param(d, causal, h, n, torch.bfloat16,
                                            id=f"d{d}-{'causal' if causal else 'full'}-{hname}-n{n}-bf16"))
                for n in (17, 4097):
                    out.append(pytest.param(d, causal, h, n, torch.float16,
                                            id=f"d{d}-{'causal' if causal else 'full'}-{hname}-n{n}-fp16"))
    return out


@pytest.mark.parametrize("d, causal, heads, n, dtype", self_grid())
def test_self_attention(d, causal, heads, n, dtype):
    hq, hk = heads
    b = 2 if n < 4096 else 1
    check(*qkv(b, hq, hk, n, n, d, dtype), causal, what=f"d={d} causal={causal} heads={heads} n={n}")


# (Nq, Nk): shorter and longer query sides, ragged both ways; causal rows with Nq > Nk see no key at the top.
CROSS = [(17, 1000), (1000, 17), (4097, 1000), (1, 4097), (300, 257), (193, 577)]


def cross_grid():
    """Every (D, causal, lengths) in bf16; fp16 on two of the length pairs."""
    out = []
    for d in (64, 128):
        for causal in (False, True):
            for nq, nk in CROSS:
                for dtype in (torch.bfloat16, torch.float16):
                    if dtype == torch.float16 and (nq, nk) not in ((1000, 17), (193, 577)):
                        continue
                    name = f"d{d}-{'causal_bottom_right' if causal else 'full'}-{nq}x{nk}-{str(dtype)[6:]}"
                    out.append(pytest.param(d, causal, (nq, nk), dtype, id=name))
    return out


@pytest.mark.parametrize("d, causal, lens, dtype", cross_grid())
def test_cross_lengths(d, causal, lens, dtype):
    nq, nk = lens
    check(*qkv(2, 4, 2, nq, nk, d, dtype), causal, what=f"d={d} causal={causal} {nq}x{nk}")


@pytest.mark.parametrize("scale", [0.05, 1.0, -0.3])
def test_explicit_scale(scale):
    check(*qkv(1, 4, 2, 300, 300, 64, torch.bfloat16), True, scale=scale, what=f"scale={scale}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lens, causal", [((600, 600), False), ((300, 257), True), ((257, 300), True)],
                         ids=["self_full", "cross_causal_empty_rows", "cross_causal"])
def test_gradient_through_lse(lens, causal, dtype):
    """A loss that uses the log-sum-exp (as well as O, or alone) gets the exact gradient."""
    nq, nk = lens
    q, k, v = (t.requires_grad_() for t in qkv(2, 4, 2, nq, nk, 128, dtype))
    out, lse = tk_ops.attention_with_lse(q, k, v, causal=causal)
    dout = torch.randn_like(out)
    seen = torch.isfinite(lse)
    dlse = torch.where(seen, torch.randn_like(lse), 0.0)
    lse_term = (torch.where(seen, lse, 0.0) * dlse).sum()
    for loss, with_o in (((out.float() * dout.float()).sum() + lse_term, True), (lse_term, False)):
        got = torch.autograd.grad(loss, (q, k, v), retain_graph=True)
        ref = reference.attention_backward(q.detach(), k.detach(), v.detach(),
                                           dout if with_o else torch.zeros_like(dout), causal, dlse=dlse)
        what = f"{nq}x{nk} causal={causal} with_o={with_o}"
        if with_o:
            assert_grads(got, ref, dtype, what)
        else:  # dV of the LSE alone is exactly zero
            assert_grads(got[:2], ref[:2], dtype, what)
            assert (got[2] == 0).all(), f"{what}: dv must be 0"
        if causal and nq > nk:
            assert (got[0][:, :, : nq - nk] == 0).all(), f"{what}: dq of rows that see no key must be 0"


@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_accuracy(causal):
    """Our gradients are about as close to float64 as SDPA's (same inputs, square causal agrees)."""
    q, k, v = (t.requires_grad_() for t in qkv(2, 8, 8, 1024, 1024, 128, torch.bfloat16))
    dout = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    ours = torch.autograd.grad(tk_ops.attention(q, k, v, causal=causal), (q, k, v), dout)
    theirs = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                 (q, k, v), dout)
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, causal)
    for name, a, b, r in zip(("dq", "dk", "dv"), ours, theirs, ref):
        assert rel_err(a, r) <= 2 * rel_err(b, r) + 1e-3, f"{name}: ours {rel_err(a, r):.2e} sdpa {rel_err(b, r):.2e}"
        ours_row, sdpa_row = worst_row(a, r)[1], worst_row(b, r)[1]
        assert ours_row <= 2 * sdpa_row + 4e-3, f"{name}: worst row ours {ours_row:.2e} sdpa {sdpa_row:.2e}"


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_transposed_bnhd_views(d, causal):
    """(B, N, H, D) leaves viewed as (B, H, N, D): their .grad is in their own (B, N, H, D) layout."""
    b, n, hq, hk = 2, 777, 4, 2
    qb = torch.randn(b, n, hq, d, device="cuda").bfloat16().requires_grad_()
    kb = torch.randn(b, n, hk, d, device="cuda").bfloat16().requires_grad_()
    vb = torch.randn(b, n, hk, d, device="cuda").bfloat16().requires_grad_()
    q, k, v = (t.transpose(1, 2) for t in (qb, kb, vb))
    out = tk_ops.attention(q, k, v, causal=causal)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, causal)
    assert_grads([t.grad.transpose(1, 2) for t in (qb, kb, vb)], ref, torch.bfloat16, "transposed views")


@pytest.mark.parametrize("wrt", ["q", "k", "v", "kv"])
def test_loss_backward_on_a_subset(wrt):
    """loss.backward() with requires_grad on some inputs only; the others get no .grad. The loss is a plain
    sum, so dO arrives as an expanded (stride-0) tensor."""
    q, k, v = qkv(2, 4, 1, 333, 333, 64, torch.bfloat16)
    for name, t in zip("qkv", (q, k, v)):
        t.requires_grad_(name in wrt)
    tk_ops.attention(q, k, v, causal=True).sum().backward()
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(),
                                       torch.ones(2, 4, 333, 64, device="cuda", dtype=torch.bfloat16), True)
    for name, t, r in zip("qkv", (q, k, v), ref):
        if name in wrt:
            assert t.grad is not None and t.grad.dtype == torch.bfloat16
            assert_close(t.grad, r, TOL[torch.bfloat16], f"d{name}")
        else:
            assert t.grad is None, f"{name} does not require grad but got one"


def test_compiles_fullgraph_forward_and_backward():
    class Block(torch.nn.Module):
        def forward(self, x, k, v):
            return tk_ops.attention(x * 2, k, v, causal=True).float().square().mean()

    q, k, v = (t.requires_grad_() for t in qkv(2, 4, 2, 333, 333, 64, torch.bfloat16))
    eager = torch.autograd.grad(Block()(q, k, v), (q, k, v))
    compiled = torch.autograd.grad(torch.compile(Block(), fullgraph=True)(q, k, v), (q, k, v))
    for name, c, e in zip("qkv", compiled, eager):
        assert rel_err(c, e) <= 1e-3, f"d{name}: compiled differs from eager by {rel_err(c, e):.2e}"


def test_cuda_graph_capture_of_backward():
    q, k, v = qkv(2, 4, 2, 1000, 1000, 128, torch.float16)
    out, lse = tk_ops.attention_with_lse(q, k, v, causal=True)
    dout = torch.randn_like(out)
    scale = 128 ** -0.5
    torch.ops.tk_ops.attention_bwd(q, k, v, out, dout, lse, True, scale)  # warm up outside capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        grads = torch.ops.tk_ops.attention_bwd(q, k, v, out, dout, lse, True, scale)
    dout.copy_(torch.randn_like(dout))
    graph.replay()
    torch.cuda.synchronize()
    assert_grads(grads, reference.attention_backward(q, k, v, dout, True), torch.float16, "graph replay")


def test_opcheck():
    """Schema, fake-vs-kernel metadata (shapes, strides, dtypes) and the autograd path torch.compile takes."""
    q, k, v = (t.requires_grad_() for t in qkv(1, 4, 2, 129, 200, 64, torch.bfloat16))
    # compiled and eager gradients may differ in the last bits (accumulation order), hence the tolerances
    torch.library.opcheck(torch.ops.tk_ops.attention_fwd, (q, k, v, True, 0.125), rtol=2e-2, atol=2e-2)
    out, lse = (t.detach() for t in torch.ops.tk_ops.attention_fwd(q, k, v, True, 0.125))
    qt = torch.randn(1, 129, 4, 64, device="cuda").bfloat16().transpose(1, 2)  # a strided q
    torch.library.opcheck(torch.ops.tk_ops.attention_bwd,
                          (qt, k.detach(), v.detach(), out, torch.randn_like(out), lse, True, 0.125))


def test_large_batch_many_tasks():
    """More tasks than SMs, many heads: every task of the persistent grid is walked once."""
    check(*qkv(8, 16, 4, 520, 520, 64, torch.bfloat16), True, what="many tasks")
