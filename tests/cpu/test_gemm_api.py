"""GEMM API checks that need no GPU: argument validation and the ops' fake (meta) implementations."""
import pytest
import torch

import tk_ops
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError


def bf16(*shape):
    return torch.randn(*shape).bfloat16()


def test_matmul_rejects_wrong_dtype():
    with pytest.raises(DTypeError, match="bfloat16"):
        tk_ops.matmul(torch.randn(16, 16), bf16(16, 16))


def test_matmul_rejects_inner_mismatch():
    with pytest.raises(InputError, match="inner dimensions"):
        tk_ops.matmul(bf16(16, 24), bf16(16, 16))


@pytest.mark.parametrize("k,n", [(12, 16), (16, 3071)])
def test_matmul_names_the_tma_rule(k, n):
    with pytest.raises(InputError, match="multiple of 8.*16 bytes"):
        tk_ops.matmul(bf16(16, k), bf16(k, n))


def test_matmul_rejects_cpu_tensors():
    with pytest.raises(ValueError, match="(?i)cuda|cpu"):
        tk_ops.matmul(bf16(16, 16), bf16(16, 16))


def test_scaled_mm_layout_rules():
    a = torch.randn(32, 64).to(torch.float8_e4m3fn)
    w = torch.randn(48, 64).to(torch.float8_e4m3fn)
    s = torch.ones(1)
    with pytest.raises(InputError, match="column-major"):
        tk_ops.scaled_mm(a, w.t().contiguous(), s, s)
    with pytest.raises(InputError, match="multiple of 16"):
        tk_ops.scaled_mm(torch.randn(32, 40).to(torch.float8_e4m3fn),
                         torch.randn(48, 40).to(torch.float8_e4m3fn).t(), s, s)
    with pytest.raises(InputError, match="out_dtype"):
        tk_ops.scaled_mm(a, w.t(), s, s, out_dtype=torch.int32)


def test_scaled_mm_scale_rules():
    """One element per tensor, or torch._scaled_mm's row-wise shapes: (M, 1) for a's rows, (1, N) for b's columns."""
    a = torch.randn(32, 64).to(torch.float8_e4m3fn)
    w = torch.randn(48, 64).to(torch.float8_e4m3fn)
    s = torch.ones(1)
    for bad_a in (torch.ones(32), torch.ones(1, 32), torch.ones(32, 2)):
        with pytest.raises(InputError, match=r"scale_a must have one element .* \(32, 1\)"):
            tk_ops.scaled_mm(a, w.t(), bad_a, s)
    for bad_b in (torch.ones(48), torch.ones(48, 1)):
        with pytest.raises(InputError, match=r"scale_b must have one element .* \(1, 48\)"):
            tk_ops.scaled_mm(a, w.t(), s, bad_b)
    with pytest.raises(InputError, match="float32"):
        tk_ops.scaled_mm(a, w.t(), torch.ones(32, 1, dtype=torch.float64), s)


def test_fake_implementations_give_shapes():
    a = torch.empty(100, 64, device="meta", dtype=torch.bfloat16)
    b = torch.empty(64, 72, device="meta", dtype=torch.bfloat16)
    out = torch.ops.tk_ops.matmul(a, b)
    assert out.shape == (100, 72) and out.dtype == torch.bfloat16
    a8 = torch.empty(100, 64, device="meta", dtype=torch.float8_e4m3fn)
    s = torch.empty(1, device="meta")
    out8 = torch.ops.tk_ops.scaled_mm(a8, a8.t()[:, :48], s, s, torch.float16)
    assert out8.shape == (100, 48) and out8.dtype == torch.float16


def test_linear_checks_feature_multiples():
    with pytest.raises(InputError, match="multiple of 8"):
        tk_ops.nn.Linear(100, 12)
    layer = tk_ops.nn.Linear(16, 24)
    assert layer.weight.dtype == torch.bfloat16 and layer.weight.shape == (24, 16)
    with pytest.raises(DTypeError, match="bfloat16"):
        layer(torch.randn(3, 16))
    with pytest.raises(InputError, match="features"):
        layer(torch.randn(3, 15, dtype=torch.bfloat16))
    with pytest.raises(DeviceMismatchError, match="cuda"):
        layer(torch.randn(3, 16, dtype=torch.bfloat16))


def test_linear_fake_gives_shapes():
    """tk_ops::linear's fake: x (..., K), weight (N, K) -> (..., N), as torch.compile sees it."""
    w = torch.empty(24, 16, device="meta", dtype=torch.bfloat16)
    for lead in [(), (5,), (2, 3)]:
        x = torch.empty(*lead, 16, device="meta", dtype=torch.bfloat16)
        for bias in (None, torch.empty(24, device="meta", dtype=torch.bfloat16)):
            y = torch.ops.tk_ops.linear(x, w, bias)
            assert y.shape == (*lead, 24) and y.dtype == torch.bfloat16 and y.is_contiguous()
