"""The Based benchmark's cases, without a GPU: sizes, the peers' FLOP convention, FLA as a peer only when it
imports (a note when not), FLA called at its autograd Functions on (B, H, T, K) copies made untimed (so that its
public functions' layout copy is not timed), the checks' tolerances and output names, and --backward's training-step
cases (forward and backward timed together, 3x the forward's FLOPs, the gradients of every side taken for the same
leaves). FLA itself is faked by modules computing its Functions' (o, z) on the CPU."""
import importlib.machinery
import importlib.util
import sys
import types

import pytest
import torch

import tk_ops
import tk_ops.reference as ref
from tk_ops.bench import based, core


def test_sizes_and_flops():
    cases = based.cases()
    assert [(c.group, c.name) for c in cases] == [("Dv=64", f"N={n}") for n in (1024, 2048, 4096, 8192, 16384)] + [
        ("Dv=128", f"N={n}") for n in (1024, 4096, 16384)]
    first = cases[0]
    assert first.shape == (16, 16, 1024, 64)
    # 2 B N H E + 4 B N H Dv E, E = 273: the value ANCHORS.md's rates are computed from.
    assert first.flops == 2 * 16 * 1024 * 16 * 273 + 4 * 16 * 1024 * 16 * 64 * 273
    wide = cases[5]
    assert wide.shape == (16, 16, 1024, 128)
    assert wide.flops == 2 * 16 * 1024 * 16 * 273 + 4 * 16 * 1024 * 16 * 128 * 273
    assert [c.name for c in based.cases(quick=True)] == ["N=1024", "N=4096", "N=1024"]


class FakeFunction:
    """FLA's FusedChunkBasedFunction / ParallelBasedFunction on the CPU: (o, z) unnormalised, for (B, H, T, K)
    inputs, recording the layout of what it was given."""

    def __init__(self):
        self.seen = []

    def apply(self, q, k, v, scale):
        self.seen.append(tuple((tuple(t.shape), t.is_contiguous()) for t in (q, k, v)))
        s = scale * (q @ k.transpose(-1, -2))
        w = (1 + s + 0.5 * s * s).tril()
        return (w @ v).to(q.dtype), w.sum(-1)


@pytest.fixture
def fake_fla(monkeypatch):
    """fla.ops.based.fused_chunk and .parallel with fake Functions; returns {module name: its Function}."""
    functions = {}
    for name in ("fla", "fla.ops", "fla.ops.based", "fla.ops.based.fused_chunk", "fla.ops.based.parallel"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, module)
    for module, attr in (("fused_chunk", "FusedChunkBasedFunction"), ("parallel", "ParallelBasedFunction")):
        functions[module] = FakeFunction()
        setattr(sys.modules[f"fla.ops.based.{module}"], attr, functions[module])
    return functions


def test_fla_is_a_peer_only_when_it_imports(monkeypatch, fake_fla):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fla" else real(name, *a))
    case = based.based_case(1024)
    assert [i.name for i in case.impls] == ["tk_ops"]
    assert len(case.notes) == 1 and case.notes[0].startswith("FLA left out")
    monkeypatch.setattr(importlib.util, "find_spec", real)
    case = based.based_case(1024)
    assert [i.name for i in case.impls] == ["tk_ops", "fla fused_chunk", "fla parallel"]
    assert [i.ours for i in case.impls] == [True, False, False] and case.notes == []
    # FLA's Functions set up (copied into their layout) untimed; ours reads the inputs in place
    assert case.impls[0].setup is None and all(i.setup is not None for i in case.impls[1:])


def test_fla_public_function_when_its_autograd_function_is_missing(monkeypatch, fake_fla):
    monkeypatch.delattr(sys.modules["fla.ops.based.parallel"], "ParallelBasedFunction")
    case = based.based_case(1024)
    assert [i.name for i in case.impls] == ["tk_ops", "fla fused_chunk", "fla parallel (API)"]
    assert len(case.notes) == 1 and "ParallelBasedFunction not found" in case.notes[0]
    assert "public function is timed instead" in case.notes[0]


def cpu_inputs(n, backward, value_dim=8, b=2, h=3):
    def make():
        q, k = (torch.randn(b, n, h, based.FEATURE_DIM, requires_grad=backward) for _ in range(2))
        v = torch.randn(b, n, h, value_dim, requires_grad=backward)
        return (q, k, v, torch.randn(b, n, h, value_dim)) if backward else (q, k, v)
    return make


def fake_ours(q, k, v):
    """tk_ops.based on the CPU: the float64 reference, in the inputs' dtype."""
    assert q.shape[1] == 3 and q.stride(2) == 3 * based.FEATURE_DIM  # (B, H, N, D) views of the (B, N, H, D) inputs
    return ref.based(q, k, v).to(q.dtype)


def timer(fn, arg_sets, calls, warmup, capture=True, profile=True):
    fn(*arg_sets[0])
    return core.Sample(1.0)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_fla_functions_agree_with_ours_on_their_own_layout(backward, monkeypatch, fake_fla):
    """The whole row on the CPU: FLA's Functions receive (B, H, T, K) contiguous copies, their normalised output (and
    their gradients, as (B, N, H, D) views) pass the checks against ours, output by output."""
    monkeypatch.setattr(tk_ops, "based", fake_ours)
    case = based.based_case(32, backward=backward)
    case.make_inputs = cpu_inputs(32, backward)
    row = core.run_case(case, reps=3, warmup=1, l2_bytes=1 << 16, timer=timer)
    assert row.reference == "fla fused_chunk" and row.status == "ok", core.format_table([row])
    ours = row.results["tk_ops"]
    assert [c.output for c in ours.checks] == (["dq", "dk", "dv"] if backward else ["o"])
    assert ours.rel_err < 1e-5 and row.results["fla parallel"].rel_err < 1e-5
    for function in fake_fla.values():
        assert function.seen and all(shapes == (((2, 3, 32, 16), True),) * 2 + (((2, 3, 32, 8), True),)
                                     for shapes in function.seen)


def test_fla_training_step_gradients_come_back_in_the_inputs_layout(fake_fla):
    impl = based.fla_impls(backward=True)[0][0]
    q, k, v, d_o = cpu_inputs(16, True)()
    args = impl.setup(q, k, v, d_o)
    assert all(a.is_contiguous() and a.shape[1] == 3 for a in args)
    assert all(a.requires_grad for a in args[:3]) and not args[3].requires_grad
    grads = impl.fn(*args)
    assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    expect = torch.autograd.grad(ref.based(qd.transpose(1, 2), kd.transpose(1, 2), vd.transpose(1, 2)),
                                 (qd, kd, vd), d_o.double().transpose(1, 2))
    for got, want in zip(grads, expect):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_backward_cases():
    forward, backward = based.cases(), based.cases(backward=True)
    assert [c.name for c in backward] == [c.name for c in forward]
    for f, b in zip(forward, backward):
        assert b.shape == f.shape and b.group == f"{f.group} fwd+bwd" and b.flops == pytest.approx(3 * f.flops)
        assert b.impls[0].name == "tk_ops" and b.impls[0].ours
        assert [i.name for i in b.impls] == [i.name for i in f.impls]
        assert f.tol == based.FORWARD_TOL and f.outputs == ("o",)
        assert b.tol == based.BACKWARD_TOL and b.outputs == ("dq", "dk", "dv")
    assert [c.name for c in based.cases(quick=True, backward=True)] == ["N=1024", "N=4096", "N=1024"]


def test_training_step_differentiates_the_leaves():
    """The timed function runs the forward on (B, H, N, D) views of the (B, N, H, D) leaves and returns their
    gradients, with d_o handed over in the forward's output layout (checked with a CPU stand-in for the op)."""
    b, n, h = 2, 5, 3
    q, k = (torch.randn(b, n, h, 16, dtype=torch.float64, requires_grad=True) for _ in range(2))
    v = torch.randn(b, n, h, 8, dtype=torch.float64, requires_grad=True)
    d_o = torch.randn(b, n, h, 8, dtype=torch.float64)

    def standin(q, k, v):  # a (B, N, H, .) -> (B, H, N, Dv) function of all three, like the ops
        return (q.sum(-1, keepdim=True) * k.square().sum(-1, keepdim=True) * v).transpose(1, 2)
    dq, dk, dv = based._training_step(standin)(q, k, v, d_o)
    expect = torch.autograd.grad((standin(q, k, v) * d_o.transpose(1, 2)).sum(), (q, k, v))
    for g, e in zip((dq, dk, dv), expect):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)
