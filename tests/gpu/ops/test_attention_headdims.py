"""tk_ops.attention at head dimensions 96 and 256 against the float64 references on the GPU, forward (O and the
log-sum-exp) and backward (dQ, dK, dV): causal or not, MHA / GQA / MQA, ragged and cross-attention lengths, bf16
and fp16, strided views. D = 96 runs 64-byte-swizzled tiles of three chunks; D = 256 runs the two-consumer forward
with one Q slot and the backward whose consumers split the head dimensions (kernels/attention/attention_configs.cuh).
At every head dimension, lengths whose last query or key tile holds a single row, forward and backward."""
import pytest
import torch

import tk_ops
from tk_ops import reference

from .test_attention import CROSS, check as check_forward, qkv
from .test_attention_bwd import assert_grads, check as check_backward

HEAD_DIMS = [96, 256]
HEADS = {"mha": (2, 2), "gqa": (4, 2), "mqa": (3, 1)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def what(d, causal, extra):
    return f"d={d} {'causal' if causal else 'full'} {extra}"


# Lengths: one row, less than a tile, ragged, and one past a multiple of every block size. Causal with N mod the
# forward's block (192 rows at D = 96, 128 at D = 256) in 1..64 shifts the blocks (N = 1, 17 and 4097 do).
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
@pytest.mark.parametrize("heads", list(HEADS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_forward_self_attention(d, causal, heads, n, dtype):
    hq, hk = HEADS[heads]
    b = 2 if n < 4096 else 1
    check_forward(*qkv(b, hq, hk, n, n, d, DTYPES[dtype]), causal, what=what(d, causal, f"{heads} n={n}"))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("lens", CROSS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal_bottom_right"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_forward_cross_lengths(d, causal, lens, dtype):
    nq, nk = lens
    check_forward(*qkv(2, 4, 2, nq, nk, d, DTYPES[dtype]), causal, what=what(d, causal, f"{nq}x{nk}"))


@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
@pytest.mark.parametrize("heads", list(HEADS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_backward_self_attention_bf16(d, causal, heads, n):
    hq, hk = HEADS[heads]
    b = 2 if n < 4096 else 1
    check_backward(*qkv(b, hq, hk, n, n, d, torch.bfloat16), causal, what=what(d, causal, f"{heads} n={n}"))


@pytest.mark.parametrize("n", [17, 4097])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_backward_self_attention_fp16(d, causal, n):
    b = 2 if n < 4096 else 1
    check_backward(*qkv(b, 4, 2, n, n, d, torch.float16), causal, what=what(d, causal, f"gqa n={n} fp16"))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("lens", CROSS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal_bottom_right"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_backward_cross_lengths(d, causal, lens, dtype):
    nq, nk = lens
    check_backward(*qkv(2, 4, 2, nq, nk, d, DTYPES[dtype]), causal, what=what(d, causal, f"{nq}x{nk}"))


@pytest.mark.parametrize("d, n", [(96, 8300), (256, 4200)], ids=["d96", "d256"])
def test_backward_heaviest_first_order(d, n):
    """Causal, few heads and at least 64 key blocks per head: the backward's tasks go heaviest first across heads
    (attention.h's bwd_heaviest_first; D = 256 has 64-key blocks, so it starts at half the length)."""
    check_backward(*qkv(1, 2, 1, n, n, d, torch.bfloat16), True, what=what(d, True, f"heaviest first n={n}"))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_many_tasks(d, causal):
    """More tasks than SMs in both directions: every task of the persistent grids is walked once."""
    check_backward(*qkv(8, 16, 4, 520, 520, d, torch.bfloat16), causal, what=what(d, causal, "many tasks"))


@pytest.mark.parametrize("scale", [0.05, -0.3])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_explicit_scale(d, scale):
    q, k, v = qkv(1, 4, 2, 300, 300, d, torch.bfloat16)
    check_forward(q, k, v, True, scale=scale, what=f"d={d} scale={scale}")
    check_backward(q, k, v, True, scale=scale, what=f"d={d} scale={scale}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_transposed_bnhd_views(d, causal):
    """(B, N, H, D) leaves viewed as (B, H, N, D): strided TMA rows of 192 / 512 bytes, gradients in their own
    layout."""
    b, n, hq, hk = 2, 777, 4, 2
    qb, kb, vb = (torch.randn(b, n, h, d, device="cuda").bfloat16().requires_grad_() for h in (hq, hk, hk))
    q, k, v = (t.transpose(1, 2) for t in (qb, kb, vb))
    assert not q.is_contiguous()
    check_forward(q.detach(), k.detach(), v.detach(), causal, what=what(d, causal, "transposed views"))
    out = tk_ops.attention(q, k, v, causal=causal)
    dout = torch.randn_like(out)
    out.backward(dout)
    ref = reference.attention_backward(q.detach(), k.detach(), v.detach(), dout, causal)
    assert_grads([t.grad.transpose(1, 2) for t in (qb, kb, vb)], ref, torch.bfloat16, what(d, causal, "transposed"))


# Lengths one past a multiple of a tile the kernels cut a sequence into, so that the last tile holds a single row or
# key (attention_configs.cuh): 65 for the forward consumers' 64 rows, the backward's 64-row query steps (D >= 96) and
# D = 256's 64-key backward blocks; 129 for the backward's 128-row query steps (D = 64), its 128-key blocks
# (D <= 128), D = 256's 128-row forward tasks and D = 96's 128-key forward tiles; 193 for the 192-row forward tasks
# (D = 64, 96, 128); 177, 113 and 81 for the forward's key tiles at D = 64, 128 and 256. N = 1 and 4097 run above and
# in test_attention.py / test_attention_bwd.py.
ONE_ROW_TAILS = {64: [65, 129, 177, 193], 96: [65, 129, 193], 128: [65, 113, 129, 193], 256: [65, 81, 129]}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d, n", [(d, n) for d, lengths in ONE_ROW_TAILS.items() for n in lengths],
                         ids=[f"d{d}-n{n}" for d, lengths in ONE_ROW_TAILS.items() for n in lengths])
def test_one_row_tails(d, n, causal, dtype):
    """A last tile of one row, two batches and GQA heads after one another: a tail row left unwritten, masked away or
    read from the next batch or head is wrong by order 1 in its own row, which the per-row checks catch however
    small its share of the whole tensor."""
    q, k, v = qkv(2, 4, 2, n, n, d, DTYPES[dtype])
    check_forward(q, k, v, causal, what=what(d, causal, f"one-row tail n={n} {dtype}"))
    check_backward(q, k, v, causal, what=what(d, causal, f"one-row tail n={n} {dtype}"))
