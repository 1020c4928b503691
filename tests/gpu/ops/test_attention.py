"""tk_ops.attention (flash attention forward) against a float64 reference on the GPU: head dims 64 and
128, causal or not, MHA / GQA / MQA, ragged and cross-attention lengths, bf16 and fp16, the log-sum-exp,
strided views, torch.compile and CUDA graphs."""
import pytest
import torch

import tk_ops
from tk_ops import reference

from ..util import TOL as ROUNDED_ONCE, assert_close, fresh_pool_with_nan, rel_err, worst_row

# ||O - ref|| / ||ref||, and 4x that in every (b, h, n) row (assert_close). O goes through two roundings (P to 16
# bits before the PV product, O on the way out): about 2e-3 in bf16 and 3e-4 in fp16, whose three more mantissa
# bits earn it a bound 10x tighter than bf16's.
TOL = {torch.bfloat16: 1e-2, torch.float16: ROUNDED_ONCE[torch.float16]}
LSE_ATOL = 2e-3  # per element; the scores are exact products of the 16-bit inputs, summed in fp32


def qkv(b, hq, hk, nq, nk, d, dtype):
    q = torch.randn(b, hq, nq, d, device="cuda").to(dtype)
    k = torch.randn(b, hk, nk, d, device="cuda").to(dtype)
    v = torch.randn(b, hk, nk, d, device="cuda").to(dtype)
    return q, k, v


def check(q, k, v, causal, scale=None, what=""):
    b, hq, nq, d = q.shape
    fresh_pool_with_nan(2 * b * hq * nq * (d + 1))
    out, lse = tk_ops.attention_with_lse(q, k, v, causal=causal, scale=scale)
    ref, ref_lse = reference.attention(q, k, v, causal=causal, scale=scale)
    assert out.dtype == q.dtype and out.shape == (b, hq, nq, d), what
    assert lse.dtype == torch.float32 and lse.shape == (b, hq, nq), what
    assert_close(out, ref, TOL[q.dtype], f"{what}: O")
    # Rows that see no key: O exactly 0 and LSE -inf; the others a finite LSE close to the reference.
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: -inf LSE rows differ"
    assert not torch.isnan(lse).any(), f"{what}: NaN in LSE"
    if empty.any():
        assert (out[empty] == 0).all(), f"{what}: rows that see no key must be 0"
    if (~empty).any():
        lse_err = (lse.double()[~empty] - ref_lse[~empty]).abs().max().item()
        assert lse_err <= LSE_ATOL, f"{what}: LSE max error {lse_err:.3e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (3, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_self_attention(d, causal, heads, n, dtype):
    hq, hk = heads
    b = 2 if n < 4096 else 1
    check(*qkv(b, hq, hk, n, n, d, dtype), causal, what=f"d={d} causal={causal} heads={heads} n={n}")


# (Nq, Nk): shorter and longer query sides, ragged both ways; causal rows with Nq > Nk see no key at the top.
CROSS = [(17, 1000), (1000, 17), (4097, 1000), (1, 4097), (300, 257), (193, 577)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lens", CROSS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal_bottom_right"])
@pytest.mark.parametrize("d", [64, 128])
def test_cross_lengths(d, causal, lens, dtype):
    nq, nk = lens
    check(*qkv(2, 4, 2, nq, nk, d, dtype), causal, what=f"d={d} causal={causal} {nq}x{nk}")


@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa(causal):
    q, k, v = qkv(2, 8, 8, 1024, 1024, 128, torch.bfloat16)
    ours = tk_ops.attention(q, k, v, causal=causal)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref, _ = reference.attention(q, k, v, causal=causal)
    assert rel_err(ours, ref) <= 1.5 * rel_err(theirs, ref) + 1e-4
    # and no row much worse than SDPA's worst
    assert worst_row(ours, ref)[1] <= 2 * worst_row(theirs, ref)[1] + 1e-3


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [0.05, 1.0, -0.3, 0.0])
def test_explicit_scale(scale, causal):
    # The kernel needs scale > 0; negative and zero scales go through equivalent positive-scale problems.
    check(*qkv(1, 2, 2, 300, 300, 64, torch.bfloat16), causal, scale=scale, what=f"scale={scale}")


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_transposed_bnhd_views(d, causal):
    """(B, N, H, D) tensors viewed as (B, H, N, D): read in place through strided TMA maps."""
    b, n, hq, hk = 2, 777, 4, 2
    q = torch.randn(b, n, hq, d, device="cuda").bfloat16().transpose(1, 2)
    k = torch.randn(b, n, hk, d, device="cuda").bfloat16().transpose(1, 2)
    v = torch.randn(b, n, hk, d, device="cuda").bfloat16().transpose(1, 2)
    assert not q.is_contiguous()
    check(q, k, v, causal, what="transposed views")


def test_views_tma_cannot_read_are_copied():
    """A head dimension with stride 2 cannot go to TMA: it is copied, never read wrongly."""
    wide = torch.randn(1, 2, 100, 128, device="cuda").bfloat16()
    q = wide[..., ::2]
    k = torch.randn(1, 2, 90, 128, device="cuda").bfloat16()[..., 1::2]
    v = torch.randn(1, 2, 90, 64, device="cuda").bfloat16()
    check(q, k, v, False, what="stride-2 head dim")


def test_batch_slices_with_odd_offsets():
    """A view starting at an element offset that breaks 16-byte alignment is copied first."""
    big = torch.randn(2 * 64 * 65 + 3, device="cuda").bfloat16()
    q = big[3:].view(2, 1, 65, 64)
    k, v = torch.randn(2, 2, 2, 65, 64, device="cuda").bfloat16().unbind(0)
    k, v = k[:, :1], v[:, :1]
    check(q, k, v, True, what="misaligned base")


def test_compiles_fullgraph():
    class Block(torch.nn.Module):
        def forward(self, x, k, v):
            return tk_ops.attention(x * 2, k, v, causal=True).float().sum(-1)

    q, k, v = qkv(2, 4, 2, 333, 333, 64, torch.bfloat16)
    eager = Block()(q, k, v)
    compiled = torch.compile(Block(), fullgraph=True)(q, k, v)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-4)


def test_cuda_graph_capture():
    q, k, v = qkv(2, 4, 4, 1000, 1000, 128, torch.float16)
    tk_ops.attention(q, k, v, causal=True)  # warm up (TMA map cache, kernel attributes) outside capture
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = tk_ops.attention(q, k, v, causal=True)
    q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention(q, k, v, causal=True)
    assert_close(out, ref, TOL[torch.float16], "graph replay")


def test_large_batch_many_tasks():
    """More tasks than SMs, many heads: every task of the persistent grid is walked once."""
    check(*qkv(8, 16, 4, 520, 520, 64, torch.bfloat16), True, what="many tasks")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_row_maxima_that_keep_rising(d, causal, dtype):
    """Scores that grow along the keys, by steps both below and above the kernel's rescaling slack (2^8 in
    the base-2 exponent): the running maximum of each row moves at some tiles and not at others, and rows
    differ in where. Sign-flipped rows make the maximum fall instead."""
    b, h, n = 1, 2, 1500
    q, k, v = qkv(b, h, h, n, n, d, torch.float32)
    q = q.abs() * torch.where(torch.rand(b, h, n, 1, device="cuda") < 0.25, -1.0, 1.0)
    ramp = torch.linspace(0.0, 3.0, n, device="cuda") ** 2  # up to ~9x the scores at the end
    k = (k.abs() + 0.2) * ramp[:, None] * torch.rand(b, h, 1, 1, device="cuda").add(0.5)
    check(q.to(dtype), k.to(dtype), v.to(dtype), causal, what=f"rising maxima d={d} causal={causal}")
