"""Attention API checks that need no GPU: argument validation, the fake (meta) implementation and the
float64 reference's conventions (GQA head mapping, bottom-right causal alignment, empty rows)."""
import math

import pytest
import torch

import tk_ops
from tk_ops import reference
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError


def t(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.empty(*shape, dtype=dtype, device=device)


def test_rejects_float32():
    with pytest.raises(DTypeError, match="bfloat16 or float16"):
        tk_ops.attention(t(1, 2, 8, 64, dtype=torch.float32), t(1, 2, 8, 64), t(1, 2, 8, 64))


def test_rejects_mixed_dtypes():
    with pytest.raises(DTypeError, match="share one dtype"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64, dtype=torch.float16), t(1, 2, 8, 64))


def test_rejects_3d():
    with pytest.raises(InputError, match="4-D"):
        tk_ops.attention(t(2, 8, 64), t(2, 8, 64), t(2, 8, 64))


@pytest.mark.parametrize("d", [32, 96, 256])
def test_rejects_head_dim(d):
    with pytest.raises(InputError, match="head_dim must be 64 or 128"):
        tk_ops.attention(t(1, 2, 8, d), t(1, 2, 8, d), t(1, 2, 8, d))


def test_rejects_kv_shape_mismatch():
    with pytest.raises(InputError, match="same shape"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 9, 64))
    with pytest.raises(InputError, match="batch"):
        tk_ops.attention(t(1, 2, 8, 64), t(2, 2, 8, 64), t(2, 2, 8, 64))


def test_rejects_head_group_mismatch():
    with pytest.raises(InputError, match="multiple of the key/value heads"):
        tk_ops.attention(t(1, 6, 8, 64), t(1, 4, 8, 64), t(1, 4, 8, 64))


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "0.1", True])
def test_rejects_bad_scale(scale):
    with pytest.raises(InputError, match="scale"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64), scale=scale)


def test_rejects_cpu_tensors():
    with pytest.raises(DeviceMismatchError, match="(?i)cuda"):
        tk_ops.attention(t(1, 2, 8, 64), t(1, 2, 8, 64), t(1, 2, 8, 64))


def test_fake_implementation_gives_shapes():
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
