"""The Mamba-2 benchmark's cases, without a GPU: the two shapes and their sizes, the FLOP convention, mamba_ssm as a peer
only when it imports (a note when not), the arguments both sides get, the checks' tolerances and output names, and
--backward's training-step cases (the gradients of every input that takes one, 3x the forward's FLOPs)."""
import pytest
import torch

from tk_ops.bench import __main__ as bench_main
from tk_ops.bench import mamba2


def test_registered_as_a_family():
    assert "mamba2" in bench_main.families()
    assert bench_main.parse_args(["mamba2", "--backward"]).family == "mamba2"


def test_shapes_sizes_and_flops():
    cases = mamba2.cases()
    lens = (1024, 2048, 4096, 8192, 16384)
    assert [c.name for c in cases] == [f"l={l}" for l in lens] * 2
    small, module = cases[0], cases[len(lens)]
    assert small.shape == (16, 1024, 16, 64) and module.shape == (4, 1024, 64, 64)
    assert small.group != module.group and "Mamba2 module" in module.group
    # 2 b h l (T n + T p + 2 p n), T the requested chunk size.
    assert small.flops == 2 * 16 * 16 * 1024 * (64 * 64 + 64 * 64 + 2 * 64 * 64)
    assert module.flops == 2 * 4 * 64 * 1024 * (256 * 128 + 256 * 64 + 2 * 64 * 128)
    assert [c.name for c in mamba2.cases(quick=True)] == ["l=1024", "l=4096"] * 2


def test_mamba_ssm_is_a_peer_only_when_it_imports(monkeypatch):
    monkeypatch.setattr(mamba2, "_peer", lambda: None)
    case = mamba2.mamba2_case(mamba2.SHAPES[0], 1024)
    assert [i.name for i in case.impls] == ["tk_ops"] and case.notes == [mamba2.PEER_NOTE]
    monkeypatch.setattr(mamba2, "_peer", lambda: (lambda *a, **k: None))
    case = mamba2.mamba2_case(mamba2.SHAPES[0], 1024)
    assert [i.name for i in case.impls] == ["tk_ops", "mamba_ssm"]
    assert [i.ours for i in case.impls] == [True, False] and case.notes == []


@pytest.mark.parametrize("shape", mamba2.SHAPES, ids=["small", "module"])
def test_checks_name_every_output(shape):
    """One name per output the timed function returns: the scan's output, or the gradient of every input that takes
    one, in the order of the inputs."""
    forward, backward = mamba2.mamba2_case(shape, 128), mamba2.mamba2_case(shape, 128, backward=True)
    assert forward.outputs == ("out",) and forward.tol == mamba2.FORWARD_TOL
    leaves = [n for n, t in zip(mamba2.INPUT_NAMES, mamba2.make_inputs(shape, 16, backward=True, device="cpu"))
              if t is not None]
    assert backward.outputs == tuple(f"d{n}" for n in leaves) and backward.tol == mamba2.BACKWARD_TOL
    assert len(backward.outputs) == (7 if shape.module_options else 5)


def test_peer_lookup_survives_a_missing_package(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_mamba_ssm(name, *args, **kwargs):
        if name.startswith("mamba_ssm"):
            raise ImportError("No module named 'einops'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_mamba_ssm)
    assert mamba2._peer() is None


@pytest.mark.parametrize("shape", mamba2.SHAPES, ids=["small", "module"])
def test_both_sides_get_the_same_arguments(shape, monkeypatch):
    calls = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
    monkeypatch.setattr(mamba2, "_peer", lambda: record)
    case = mamba2.mamba2_case(shape, 128)
    inputs = mamba2.make_inputs(shape, 128, device="cpu")
    case.impls[1].fn(*inputs)
    (args, kwargs), = calls
    assert args[5] == shape.chunk_size and all(a is b for a, b in zip(args[:5], inputs[:5]))
    assert kwargs["dt_softplus"] is shape.module_options
    assert (kwargs["D"] is None) == (not shape.module_options) and kwargs["D"] is inputs[5]
    assert kwargs["dt_bias"] is inputs[6]
    x, dt, A, B, C = inputs[:5]
    assert x.shape == (shape.batch, 128, shape.heads, shape.head_dim) and x.dtype == torch.bfloat16
    assert dt.dtype == A.dtype == torch.float32 and B.shape == C.shape == (shape.batch, 128, 1, shape.state_dim)
    if not shape.module_options:
        assert (dt >= 0).all()  # no softplus: a negative dt would only be clamped to 0


def test_backward_cases():
    forward, backward = mamba2.cases(), mamba2.cases(backward=True)
    assert [c.name for c in backward] == [c.name for c in forward]
    for f, b in zip(forward, backward):
        assert b.shape == f.shape and b.group == f.group + " fwd+bwd" and b.flops == pytest.approx(3 * f.flops)
        assert b.impls[0].name == "tk_ops" and b.impls[0].ours


@pytest.mark.parametrize("shape", mamba2.SHAPES, ids=["small", "module"])
def test_training_step_differentiates_every_input(shape):
    """The timed function returns the gradients of every input that requires one, given d_out (checked with a
    CPU stand-in for the scan)."""
    inputs = mamba2.make_inputs(shape, 16, backward=True, device="cpu")
    leaves = [t for t in inputs[:-1] if t is not None]
    assert all(t.requires_grad for t in leaves) and not inputs[-1].requires_grad
    assert len(leaves) == (7 if shape.module_options else 5)

    def standin(x, dt, A, B, C, D, dt_bias):
        out = x.float() * (dt.sum() + A.sum() + B.float().sum() + C.float().sum())
        if D is not None:
            out = out * (D.sum() + dt_bias.sum())
        return out
    grads = mamba2._training_step(standin)(*inputs)
    assert len(grads) == len(leaves) and all(g.shape == t.shape for g, t in zip(grads, leaves))


def test_training_step_takes_the_gradient_of_every_input_that_requires_one():
    inputs = mamba2.make_inputs(mamba2.SHAPES[1], 16, backward=True, device="cpu")

    def stand_in(x, dt, A, B, C, D, dt_bias):  # depends on every input, as the scan does
        scalars = dt.sum() + A.sum() + B.float().sum() + C.float().sum() + dt_bias.sum()
        return x.float() * D[:, None] * scalars

    grads = mamba2._training_step(stand_in)(*inputs)
    assert len(grads) == 7 and all(g is not None and torch.isfinite(g).all() for g in grads)
