"""The Based benchmark's cases, without a GPU: sizes, the peers' FLOP convention, FLA as a peer only when it
imports, and --backward's training-step cases (forward and backward timed together, 3x the forward's FLOPs, the
gradients of every side taken for the same leaves)."""
import importlib.util

import pytest
import torch

from tk_ops.bench import based


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


def test_fla_is_a_peer_only_when_it_imports(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fla" else real(name, *a))
    assert [i.name for i in based.based_case(1024).impls] == ["tk_ops"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "fla" else real(name, *a))
    impls = based.based_case(1024).impls
    assert [i.name for i in impls] == ["tk_ops", "fla fused_chunk", "fla parallel"]
    assert [i.ours for i in impls] == [True, False, False]


def test_backward_cases():
    forward, backward = based.cases(), based.cases(backward=True)
    assert [c.name for c in backward] == [c.name for c in forward]
    for f, b in zip(forward, backward):
        assert b.shape == f.shape and b.group == f"{f.group} fwd+bwd" and b.flops == pytest.approx(3 * f.flops)
        assert b.impls[0].name == "tk_ops" and b.impls[0].ours
        assert [i.name for i in b.impls] == [i.name for i in f.impls]
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
