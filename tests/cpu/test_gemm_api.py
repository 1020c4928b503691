"""GEMM API checks that need no GPU: the ops' argument rules (kernels/gemm/binding.cpp), which their CPU and Meta
kernels run as the CUDA kernels do, and the output shapes the Meta kernels give torch.compile. They need the
extension built (no GPU needed for that)."""
import re

import pytest
import torch

import tk_ops
from tk_ops._testing import gemm as testing
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError

from ..util import skip_unless_built


@pytest.fixture(autouse=True)
def built():
    skip_unless_built("the GEMM ops and their checks")


def bf16(*shape):
    return torch.randn(*shape).bfloat16()


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="meta", dtype=dtype)


def test_matmul_rejects_wrong_dtype():
    with pytest.raises(DTypeError, match="bfloat16"):
        tk_ops.matmul(torch.randn(16, 16), bf16(16, 16))


def test_matmul_rejects_inner_mismatch():
    with pytest.raises(InputError, match="inner dimensions"):
        tk_ops.matmul(bf16(16, 24), bf16(16, 16))


@pytest.mark.parametrize("m,k,n", [(15, 12, 16), (16, 16, 3071)])
def test_matmul_names_the_tma_rule(m, k, n):
    with pytest.raises(InputError, match="multiple of 8.*16 bytes"):
        tk_ops.matmul(bf16(m, k), bf16(k, n))


def test_matmul_rejects_cpu_tensors():
    with pytest.raises(DeviceMismatchError, match="CUDA tensors, but a is on cpu"):
        tk_ops.matmul(bf16(16, 16), bf16(16, 16))


def test_matmul_rank_rules():
    with pytest.raises(InputError, match=r"a must be \(M, K\) or \(\.\.\., M, K\), got shape \(16,\)"):
        tk_ops.matmul(bf16(16), bf16(16, 16))
    with pytest.raises(InputError, match=r"b must be 2-D \(K, N\), got shape \(2, 16, 16\)"):
        tk_ops.matmul(bf16(16, 16), bf16(2, 16, 16))


def test_matmul_takes_any_k_when_m_allows():
    """K-major storage needs K % 8 == 0; the op stores A transposed when only M is a multiple of 8 (how
    dW = dY^T X contracts over any number of tokens), so only K and M both ragged is refused."""
    assert tk_ops.matmul(meta(16, 12), meta(12, 24)).shape == (16, 24)
    with pytest.raises(InputError, match="K=12 or M=15 must be a multiple of 8"):
        tk_ops.matmul(meta(15, 12), meta(12, 24))


def test_matmul_folds_leading_dimensions():
    out = tk_ops.matmul(meta(3, 5, 7, 64), meta(64, 40))
    assert out.shape == (3, 5, 7, 40) and out.dtype == torch.bfloat16
    with pytest.raises(InputError, match="K=12 or M=105 must be a multiple of 8"):  # M counts every leading row
        tk_ops.matmul(meta(3, 5, 7, 12), meta(12, 40))


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


def test_meta_kernels_give_shapes():
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
    with pytest.raises(DTypeError, match="x must be torch.bfloat16, got torch.float32"):
        layer(torch.randn(3, 16))
    with pytest.raises(InputError, match="x has 15 features, weight expects 16"):
        layer(torch.randn(3, 15, dtype=torch.bfloat16))
    with pytest.raises(DeviceMismatchError, match=r"cuda\(\)"):
        layer(torch.randn(3, 16, dtype=torch.bfloat16))
    with pytest.raises(DTypeError, match="weight must be torch.bfloat16, got torch.float32"):
        tk_ops.nn.Linear(16, 24, dtype=torch.float32)(torch.randn(3, 16, dtype=torch.bfloat16))


def test_linear_meta_kernel_gives_shapes():
    """tk_ops::linear's fake: x (..., K), weight (N, K) -> (..., N), as torch.compile sees it."""
    w = torch.empty(24, 16, device="meta", dtype=torch.bfloat16)
    for lead in [(), (5,), (2, 3)]:
        x = torch.empty(*lead, 16, device="meta", dtype=torch.bfloat16)
        for bias in (None, torch.empty(24, device="meta", dtype=torch.bfloat16)):
            y = torch.ops.tk_ops.linear(x, w, bias)
            assert y.shape == (*lead, 24) and y.dtype == torch.bfloat16 and y.is_contiguous()


def test_linear_bias_rules():
    w = meta(24, 16)
    with pytest.raises(ValueError, match=r"bias must be \(out_features,\) = \(24,\), got shape \(16,\)"):
        torch.ops.tk_ops.linear(meta(3, 16), w, meta(16))
    with pytest.raises(TypeError, match="bias must be torch.bfloat16, got torch.float32"):
        torch.ops.tk_ops.linear(meta(3, 16), w, meta(24, dtype=torch.float32))


def test_scaled_mm_meta_and_messages():
    a8 = meta(32, 64, dtype=torch.float8_e4m3fn)
    w8 = meta(48, 64, dtype=torch.float8_e4m3fn)
    s = meta(1, dtype=torch.float32)
    assert tk_ops.scaled_mm(a8, w8.t(), meta(32, 1, dtype=torch.float32), s).shape == (32, 48)
    with pytest.raises(DTypeError, match="b must be torch.float8_e4m3fn, got torch.bfloat16"):
        tk_ops.scaled_mm(a8, meta(64, 48), s, s)
    with pytest.raises(InputError, match=r"a must be row-major \(call .contiguous\(\)\)"):
        tk_ops.scaled_mm(meta(64, 32, dtype=torch.float8_e4m3fn).t(), w8.t(), s, s)
    with pytest.raises(DTypeError, match="scale_a must be a torch.Tensor, got float"):
        tk_ops.scaled_mm(a8, w8.t(), 1.0, s)
    with pytest.raises(InputError, match="out_dtype must be a torch.dtype, got str"):
        tk_ops.scaled_mm(a8, w8.t(), s, s, "bfloat16")


# -- the testing ops (tk_ops_testing, tk_ops._testing.gemm): the public rules plus the configuration's -------------

def test_no_process_wide_configuration_switch():
    assert not hasattr(torch.ops.tk_ops, "gemm_force_config") and not hasattr(tk_ops.gemm, "force_config")


def test_testing_ops_take_every_configuration():
    a8, w8, s = meta(100, 64, dtype=torch.float8_e4m3fn), meta(48, 64, dtype=torch.float8_e4m3fn), meta(1, dtype=torch.float32)
    for config in ("auto", *testing.CONFIGS):
        assert testing.matmul(meta(100, 64), meta(64, 72), config).shape == (100, 72)
        assert testing.linear(meta(3, 5, 64), meta(24, 64), meta(24), config).shape == (3, 5, 24)
    for config in ("auto", *testing.FP8_CONFIGS):
        out = testing.scaled_mm(a8, w8.t(), s, s, torch.float32, config)
        assert out.shape == (100, 48) and out.dtype == torch.float32


def test_testing_ops_name_the_configurations():
    """An unknown name is refused with the list the kernels have, which is the list the tests run."""
    names = ", ".join(("auto", *testing.CONFIGS))
    with pytest.raises(ValueError, match=f"tk_ops_testing.matmul: config must be one of {names}; got 'huge'"):
        testing.matmul(meta(16, 16), meta(16, 16), "huge")
    with pytest.raises(ValueError, match="tk_ops_testing.linear: config must be one of"):
        testing.linear(meta(16, 16), meta(16, 16), None, "")


def test_resident_holds_short_contractions_only():
    assert testing.cannot_run("resident", 128, 128, 256) is None
    why = testing.cannot_run("resident", 128, 128, 264)
    assert "config 'resident' holds contractions of at most 256 (its B panel), got K=264" in why
    assert all(testing.cannot_run(c, 128, 128, 264) is None for c in testing.CONFIGS if c != "resident")


def test_fp8_runs_its_own_configurations():
    for config in ("auto", *testing.FP8_CONFIGS):
        assert testing.cannot_run(config, 64, 64, 64, fp8=True) is None
    for config in set(testing.CONFIGS) - set(testing.FP8_CONFIGS):
        assert "the fp8 kernel runs config auto, big, small or tiny" in testing.cannot_run(config, 64, 64, 64, fp8=True)


def test_testing_ops_keep_the_public_rules():
    with pytest.raises(ValueError, match="tk_ops_testing.matmul: a is 16x24 but b is 16x16: inner dimensions must match"):
        testing.matmul(meta(16, 24), meta(16, 16), "big")
    with pytest.raises(TypeError, match="tk_ops_testing.linear: x must be torch.bfloat16, got torch.float32"):
        testing.linear(meta(3, 16, dtype=torch.float32), meta(24, 16), None, "tiny")
    with pytest.raises(ValueError, match=re.escape("tk_ops_testing.scaled_mm: b must be column-major")):
        a8 = meta(32, 64, dtype=torch.float8_e4m3fn)
        testing.scaled_mm(a8, meta(64, 48, dtype=torch.float8_e4m3fn), meta(1, dtype=torch.float32),
                          meta(1, dtype=torch.float32), torch.bfloat16, "small")


def test_testing_ops_refuse_cpu_tensors():
    s = torch.ones(1)
    with pytest.raises(ValueError, match=r"tk_ops_testing.matmul: tk_ops kernels run on CUDA tensors, but a is on "
                                         r"cpu; move it with \.cuda\(\)"):
        testing.matmul(bf16(16, 16), bf16(16, 16), "big")
    with pytest.raises(ValueError, match="tk_ops_testing.linear: tk_ops kernels run on CUDA tensors, but x is on cpu"):
        testing.linear(bf16(3, 16), bf16(24, 16), None, "auto")
    with pytest.raises(ValueError, match="tk_ops_testing.scaled_mm: tk_ops kernels run on CUDA tensors, but a is on"):
        testing.scaled_mm(torch.randn(32, 64).to(torch.float8_e4m3fn), torch.randn(48, 64).to(torch.float8_e4m3fn).t(),
                          s, s, torch.bfloat16, "tiny")


def test_gemm_config_rules():
    with pytest.raises(ValueError, match="M, N and K must be positive and below 2"):
        testing.gemm_config(0, 64, 64)
    with pytest.raises(TypeError, match="in_dtype must be torch.bfloat16 or torch.float8_e4m3fn, got torch.float32"):
        testing.gemm_config(64, 64, 64, torch.float32)
    with pytest.raises(ValueError, match="the bf16 GEMM's out_dtype is bfloat16, got torch.float32"):
        testing.gemm_config(64, 64, 64, torch.bfloat16, torch.float32)
    with pytest.raises(ValueError, match="the fp8 GEMM has no bias"):
        testing.gemm_config(64, 64, 64, torch.float8_e4m3fn, bias=True)
    with pytest.raises(ValueError, match="out_dtype must be bfloat16, float16 or float32"):
        testing.gemm_config(64, 64, 64, torch.float8_e4m3fn, torch.int32)
