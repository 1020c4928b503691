"""tk_ops.mamba2_step checks that need no GPU: the op's argument rules (kernels/mamba2/binding.cpp, run by its CPU
and Meta kernels as by the CUDA one), the Meta kernel's output, the schema's in-place marking, and the wrapper's own
check of Python types."""
import pytest
import torch

import tk_ops
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError

from ..util import empty as t, skip_unless_built


@pytest.fixture
def built():
    """The op and its rules are C++, registered when the extension loads (no GPU needed)."""
    skip_unless_built("the Mamba-2 step", "mamba2")


def step_args(b=2, h=4, g=2, p=64, n=128, dtype=torch.bfloat16, device="cpu"):
    """state, x, dt, A, B, C of a valid step."""
    f32 = dict(dtype=torch.float32, device=device)
    return (t(b, h, p, n, **f32), t(b, h, p, dtype=dtype, device=device), t(b, h, **f32), t(h, **f32),
            t(b, g, n, dtype=dtype, device=device), t(b, g, n, dtype=dtype, device=device))


def replaced(args, i, value):
    args = list(args)
    args[i] = value
    return tuple(args)


# ---------------------------------------------------------------- argument rules (through the CPU kernel)

@pytest.mark.parametrize("make, kind, match", [
    (lambda: step_args(dtype=torch.float32), DTypeError, "x must be bfloat16 or float16, got torch.float32"),
    (lambda: replaced(step_args(), 4, t(2, 2, 128, dtype=torch.float16)), DTypeError,
     "B must have x's dtype torch.bfloat16, got torch.float16"),
    (lambda: replaced(step_args(), 5, t(2, 2, 128, dtype=torch.float32)), DTypeError, "C must have x's dtype"),
    (lambda: replaced(step_args(), 2, t(2, 4, dtype=torch.float16)), DTypeError,
     "dt must be float32 or x's dtype torch.bfloat16, got torch.float16"),
    (lambda: replaced(step_args(), 0, t(2, 4, 64, 128)), DTypeError,
     "state must be float32, got torch.bfloat16 .*updated in place"),
    (lambda: replaced(step_args(), 3, t(4, dtype=torch.float64)), DTypeError, "A must be float32, got torch.float64"),
    (lambda: replaced(step_args(), 0, t(2, 4, 64 * 128, dtype=torch.float32)), InputError,
     r"state must be 4-D \(batch, heads, head_dim, state_dim\)"),
    (lambda: replaced(step_args(), 1, t(2, 4, 1, 64)), InputError,
     r"x must be \(batch, heads, head_dim\) = \(2, 4, 64\) .* one token per sequence"),
    (lambda: replaced(step_args(), 1, t(2, 4, 32)), InputError, r"x must be \(batch, heads, head_dim\) = \(2, 4, 64\)"),
    (lambda: replaced(step_args(), 2, t(2, 3, dtype=torch.float32)), InputError,
     r"dt must be \(batch, heads\) = \(2, 4\), got \(2, 3\)"),
    (lambda: replaced(step_args(), 3, t(4, 1, dtype=torch.float32)), InputError, r"A must be \(heads,\) = \(4,\)"),
    (lambda: replaced(step_args(), 4, t(2, 128)), InputError, r"B must be 3-D \(batch, groups, state_dim\)"),
    (lambda: replaced(step_args(), 4, t(2, 2, 64)), InputError,
     r"B must be \(batch, groups, state_dim\) with the state's batch = 2 and state_dim = 128, got \(2, 2, 64\)"),
    (lambda: step_args(g=3), InputError, r"groups \(B's dim 1\) must divide the heads .* = 4, got 3"),
    (lambda: replaced(step_args(), 5, t(2, 1, 128)), InputError, r"C must have B's shape \(2, 2, 128\)"),
    (lambda: step_args(n=48), InputError, "state dimension .* must be 16, 32, 64, 128 or 256, got 48"),
    (lambda: step_args(n=512), InputError, "must be 16, 32, 64, 128 or 256, got 512"),
])
def test_rejects_inputs(make, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.mamba2_step(*make())


@pytest.mark.parametrize("kwargs, kind, match", [
    (dict(D=t(4, 32, dtype=torch.float32)), InputError,
     r"D must be \(heads,\) = \(4,\) or \(heads, head_dim\) = \(4, 64\)"),
    (dict(D=t(4)), DTypeError, "D must be float32"),
    (dict(z=t(2, 4, 32)), InputError, r"z must be x's shape \(batch, heads, head_dim\)"),
    (dict(z=t(2, 4, 64, dtype=torch.float16)), DTypeError, "z must have x's dtype"),
    (dict(dt_bias=t(3, dtype=torch.float32)), InputError, r"dt_bias must be \(heads,\) = \(4,\)"),
    (dict(dt_bias=t(4)), DTypeError, "dt_bias must be float32"),
])
def test_rejects_options(kwargs, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.mamba2_step(*step_args(), **kwargs)


def test_accepts_every_valid_option_then_asks_for_cuda(built):
    """Valid arguments of every kind pass the rules, and the CPU kernel then names the device rule."""
    f32 = dict(dtype=torch.float32)
    for n in (16, 32, 64, 128, 256):
        with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors, but state is on cpu"):
            tk_ops.mamba2_step(*step_args(p=37, n=n))
    with pytest.raises(DeviceMismatchError, match="tk_ops kernels run on CUDA tensors"):
        tk_ops.mamba2_step(*replaced(step_args(dtype=torch.float16), 2, t(2, 4, dtype=torch.float16)),
                           D=t(4, 64, **f32), z=t(2, 4, 64, dtype=torch.float16), dt_bias=t(4, **f32),
                           dt_softplus=True)


def test_python_types_need_no_extension():
    with pytest.raises(InputError, match="dt_softplus must be a bool, got int"):
        tk_ops.mamba2_step(*step_args(), dt_softplus=1)


def test_wrong_argument_types(built):
    with pytest.raises(DTypeError, match="x must be a torch.Tensor, got list"):
        tk_ops.mamba2_step(*replaced(step_args(), 1, [1.0]))


# ---------------------------------------------------------------- Meta kernel and schema

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_meta_shapes(dtype, built):
    state, x, dt, A, B, C = step_args(3, 6, 3, 37, 64, dtype=dtype, device="meta")
    y = torch.ops.tk_ops.mamba2_step(state, x, dt, A, B, C, t(6, 37, dtype=torch.float32, device="meta"),
                                     t(3, 6, 37, dtype=dtype, device="meta"), None, True)
    assert y.shape == (3, 6, 37) and y.dtype == dtype and y.is_contiguous() and y.device.type == "meta"


def test_meta_runs_the_rules(built):
    state, x, dt, A, B, C = step_args(n=48, device="meta")
    with pytest.raises(ValueError, match="must be 16, 32, 64, 128 or 256, got 48"):
        torch.ops.tk_ops.mamba2_step(state, x, dt, A, B, C)


def test_schema_marks_the_state_mutated(built):
    schema = torch.ops.tk_ops.mamba2_step.default._schema
    state = schema.arguments[0]
    assert state.name == "state" and state.alias_info is not None and state.alias_info.is_write
    assert all(a.alias_info is None for a in schema.arguments[1:])
    assert [a.name for a in schema.arguments] == ["state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias",
                                                  "dt_softplus"]


def test_state_that_requires_grad_is_refused(built):
    state, x, dt, A, B, C = step_args(device="meta")
    with pytest.raises(ValueError, match="the state requires grad"):
        torch.ops.tk_ops.mamba2_step(state.requires_grad_(), x, dt, A, B, C)
    with torch.no_grad():  # no graph to protect: the rules run (and the Meta kernel answers)
        assert torch.ops.tk_ops.mamba2_step(state, x, dt, A, B, C).shape == (2, 4, 64)
