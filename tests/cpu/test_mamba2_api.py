"""Mamba-2 API checks that need no GPU: the op's argument rules (kernels/mamba2/binding.cpp, run by its CPU and Meta
kernels as by the CUDA one), the Meta kernel's output shapes, and the Python wrapper's own checks (argument types, the
gradients reaching the op)."""
import math

import pytest
import torch

import tk_ops
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError

from ..util import empty as t, skip_unless_built


@pytest.fixture
def built():
    """The op and its rules are C++, registered when the extension loads (no GPU needed)."""
    skip_unless_built("the Mamba-2 op", "mamba2")


def scan_args(b=2, l=100, h=4, g=2, p=64, n=128, dtype=torch.bfloat16, device="cpu"):
    """x, dt, A, B, C of a valid problem."""
    f32 = dict(dtype=torch.float32, device=device)
    return (t(b, l, h, p, dtype=dtype, device=device), t(b, l, h, **f32), t(h, **f32),
            t(b, l, g, n, dtype=dtype, device=device), t(b, l, g, n, dtype=dtype, device=device))


def replaced(args, i, value):
    args = list(args)
    args[i] = value
    return tuple(args)


# ---------------------------------------------------------------- argument rules (through the CPU kernel)

@pytest.mark.parametrize("make, kind, match", [
    (lambda: scan_args(dtype=torch.float32), DTypeError, "x must be bfloat16 or float16, got torch.float32"),
    (lambda: replaced(scan_args(), 3, t(2, 100, 2, 128, dtype=torch.float16)), DTypeError,
     "B must have x's dtype torch.bfloat16, got torch.float16"),
    (lambda: replaced(scan_args(), 1, t(2, 100, 4)), DTypeError, "dt must be float32, got torch.bfloat16"),
    (lambda: replaced(scan_args(), 2, t(4, dtype=torch.float64)), DTypeError, "A must be float32, got torch.float64"),
    (lambda: replaced(scan_args(), 0, t(2, 100, 256)), InputError, r"x must be 4-D \(batch, seq_len, heads, head_dim\)"),
    (lambda: replaced(scan_args(), 3, t(2, 100, 128)), InputError, "B must be 4-D"),
    (lambda: replaced(scan_args(), 3, t(2, 99, 2, 128)), InputError,
     r"B must be \(batch, seq_len, groups, state_dim\) with x's \(batch, seq_len\) = \(2, 100\)"),
    (lambda: scan_args(g=3), InputError, "groups .* must divide the heads .* = 4, got 3"),
    (lambda: replaced(scan_args(), 4, t(2, 100, 1, 128)), InputError, r"C must have B's shape \(2, 100, 2, 128\)"),
    (lambda: scan_args(l=0), InputError, "sequence length .* must be at least 1, got 0"),
    (lambda: scan_args(p=96), InputError, r"head dimension \(x's last\) must be 64 or 128, got 96"),
    (lambda: scan_args(n=32), InputError, r"state dimension \(B's and C's last\) must be 64 or 128, got 32"),
    (lambda: replaced(scan_args(), 1, t(2, 100, 3, dtype=torch.float32)), InputError,
     r"dt must be \(batch, seq_len, heads\) = \(2, 100, 4\), got \(2, 100, 3\)"),
    (lambda: replaced(scan_args(), 2, t(4, 1, dtype=torch.float32)), InputError, r"A must be \(heads,\) = \(4,\)"),
])
def test_rejects_inputs(make, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.mamba2_chunk_scan(*make())


@pytest.mark.parametrize("kwargs, kind, match", [
    (dict(D=t(4, 32, dtype=torch.float32)), InputError, r"D must be \(heads,\) = \(4,\) or \(heads, head_dim\) = \(4, 64\)"),
    (dict(D=t(4)), DTypeError, "D must be float32"),
    (dict(z=t(2, 100, 4, 32)), InputError, "z must be x's shape"),
    (dict(z=t(2, 100, 4, 64, dtype=torch.float16)), DTypeError, "z must have x's dtype"),
    (dict(dt_bias=t(3, dtype=torch.float32)), InputError, r"dt_bias must be \(heads,\) = \(4,\)"),
    (dict(initial_states=t(2, 4, 64, 64, dtype=torch.float32)), InputError,
     r"initial_states must be \(batch, heads, head_dim, state_dim\) = \(2, 4, 64, 128\)"),
    (dict(initial_states=t(2, 4, 64, 128)), DTypeError, "initial_states must be float32"),
    (dict(seq_idx=t(2, 100, dtype=torch.int64)), DTypeError, r"seq_idx must be int32, got torch.int64; pass seq_idx.int\(\)"),
    (dict(seq_idx=t(2, 99, dtype=torch.int32)), InputError, r"seq_idx must be \(batch, seq_len\) = \(2, 100\)"),
    (dict(chunk_size=32), InputError, "chunk_size must be 64, 128 or 256, got 32"),
    (dict(dt_limit=(1.0, 0.5)), InputError, r"dt_limit must be \(low, high\) with low <= high"),
    (dict(dt_limit=(float("nan"), 1.0)), InputError, r"dt_limit must be \(low, high\)"),
])
def test_rejects_options(kwargs, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.mamba2_chunk_scan(*scan_args(), **kwargs)


def test_rejects_cpu_tensors(built):
    with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors, but x is on cpu"):
        tk_ops.mamba2_chunk_scan(*scan_args())
    with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors"):
        tk_ops.mamba2_chunk_scan(*scan_args(), D=t(4, dtype=torch.float32), z=t(2, 100, 4, 64),
                                 seq_idx=t(2, 100, dtype=torch.int32), return_final_states=True)


# ---------------------------------------------------------------- the wrapper's own checks (no extension needed)

@pytest.mark.parametrize("kwargs, match", [
    (dict(dt_softplus=1), "dt_softplus must be a bool, got int"),
    (dict(return_final_states="yes"), "return_final_states must be a bool, got str"),
    (dict(dt_limit=0.5), r"dt_limit must be a \(low, high\) pair of numbers"),
    (dict(dt_limit=(0.0, 1.0, 2.0)), r"dt_limit must be a \(low, high\) pair of numbers"),
    (dict(chunk_size=256.0), "chunk_size must be an int"),
    (dict(chunk_size=True), "chunk_size must be an int"),
])
def test_python_types_need_no_extension(kwargs, match):
    with pytest.raises(InputError, match=match):
        tk_ops.mamba2_chunk_scan(*scan_args(), **kwargs)


def test_inputs_that_require_grad_reach_the_op(built):
    # The autograd kernel hands CPU tensors on to the op, whose CPU kernel names the device rule.
    x, dt, A, B, C = scan_args()
    with pytest.raises(DeviceMismatchError):
        tk_ops.mamba2_chunk_scan(x.requires_grad_(), dt, A, B, C)
    with pytest.raises(DeviceMismatchError):
        tk_ops.mamba2_chunk_scan(x.detach(), dt, A, B, C, D=t(4, dtype=torch.float32).requires_grad_())


def test_no_grad_lets_inputs_that_require_grad_through(built):
    x, dt, A, B, C = scan_args()
    with torch.no_grad(), pytest.raises(DeviceMismatchError):
        tk_ops.mamba2_chunk_scan(x.requires_grad_(), dt, A, B, C)


# ---------------------------------------------------------------- Meta kernel

@pytest.mark.parametrize("options", [False, True])
def test_backward_meta_shapes(options, built):
    x, dt, A, B, C = scan_args(3, 77, 6, 3, 128, 64, dtype=torch.float16, device="meta")
    D = t(6, 128, dtype=torch.float32, device="meta") if options else None
    z = torch.empty_like(x) if options else None
    bias = t(6, dtype=torch.float32, device="meta") if options else None
    init = t(3, 6, 128, 64, dtype=torch.float32, device="meta") if options else None
    grads = torch.ops.tk_ops.mamba2_chunk_scan_bwd(x, dt, A, B, C, D, z, bias, init, None, True, 0.0, math.inf,
                                                   torch.empty_like(x), init)
    expected = [x, dt, A, B, C, D, z, bias, init]
    for got, want in zip(grads, expected):
        if want is None:
            assert got.shape == (0,)
        else:
            assert got.shape == want.shape and got.dtype == want.dtype


@pytest.mark.parametrize("present", [(), ("z",), ("dt_bias",), ("D", "dt_bias"), ("z", "initial_states"),
                                     ("D", "z", "dt_bias", "initial_states")], ids=lambda p: "+".join(p) or "none")
def test_autograd_hands_each_gradient_to_its_input(present, built):
    # On meta tensors the ops' Meta kernels run, so the autograd plumbing (which of the backward's results reaches
    # which input, with optional inputs absent) is checked without a GPU.
    b, l, h, g, p, n = 2, 10, 4, 2, 64, 128
    x, dt, A, B, C = (v.requires_grad_() for v in scan_args(b, l, h, g, p, n, device="meta"))
    optional = dict(D=t(h, dtype=torch.float32, device="meta"), z=torch.empty_like(x),
                    dt_bias=t(h, dtype=torch.float32, device="meta"),
                    initial_states=t(b, h, p, n, dtype=torch.float32, device="meta"))
    kw = {k: optional[k].requires_grad_() for k in present}
    out, final = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, 64, return_final_states=True, dt_softplus=True, **kw)
    leaves = [x, dt, A, B, C, *kw.values()]
    grads = torch.autograd.grad([out, final], leaves, [torch.empty_like(out), torch.empty_like(final)])
    for leaf, grad in zip(leaves, grads):
        assert grad.shape == leaf.shape and grad.dtype == leaf.dtype


def test_backward_rules(built):
    x, dt, A, B, C = scan_args(2, 10, 4, 1, 64, 64, device="meta")
    with pytest.raises(ValueError, match="output.s gradient must have x's shape and dtype"):
        torch.ops.tk_ops.mamba2_chunk_scan_bwd(x, dt, A, B, C, None, None, None, None, None, False, 0.0, math.inf,
                                               x[:, :5], None)
    with pytest.raises(ValueError, match="final states. gradient must be"):
        torch.ops.tk_ops.mamba2_chunk_scan_bwd(x, dt, A, B, C, None, None, None, None, None, False, 0.0, math.inf,
                                               torch.empty_like(x), t(2, 4, 64, 32, dtype=torch.float32, device="meta"))


@pytest.mark.parametrize("final", [False, True])
def test_meta_shapes(final, built):
    x, dt, A, B, C = scan_args(3, 77, 6, 3, 128, 64, dtype=torch.float16, device="meta")
    D = t(6, 128, dtype=torch.float32, device="meta")
    out, states = torch.ops.tk_ops.mamba2_chunk_scan_fwd(x, dt, A, B, C, 128, D, None, None, None, None, True, 0.0,
                                                         math.inf, final)
    assert out.shape == (3, 77, 6, 128) and out.dtype == torch.float16 and out.is_contiguous()
    assert states.dtype == torch.float32 and states.shape == ((3, 6, 128, 64) if final else (0,))


def test_meta_runs_the_rules(built):
    x, dt, A, B, C = scan_args(device="meta")
    with pytest.raises(ValueError, match="chunk_size must be 64, 128 or 256, got 100"):
        torch.ops.tk_ops.mamba2_chunk_scan_fwd(x, dt, A, B, C, 100, None, None, None, None, None, False, 0.0, math.inf,
                                               False)
