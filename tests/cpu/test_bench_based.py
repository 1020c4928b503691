"""The Based benchmark's cases, without a GPU: sizes, the peers' FLOP convention, FLA as a peer only when it
imports, and a clear stop for --backward."""
import importlib.util

import pytest

from tk_ops.bench import based


def test_sizes_and_flops():
    cases = based.cases()
    assert [c.name for c in cases] == [f"N={n}" for n in (1024, 2048, 4096, 8192, 16384)]
    first = cases[0]
    assert first.shape == (16, 16, 1024, 64)
    # 2 B N H E + 4 B N H Dv E, E = 273: the value ANCHORS.md's rates are computed from.
    assert first.flops == 2 * 16 * 1024 * 16 * 273 + 4 * 16 * 1024 * 16 * 64 * 273
    assert [c.name for c in based.cases(quick=True)] == ["N=1024", "N=4096"]


def test_fla_is_a_peer_only_when_it_imports(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fla" else real(name, *a))
    assert [i.name for i in based.based_case(1024).impls] == ["tk_ops"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "fla" else real(name, *a))
    impls = based.based_case(1024).impls
    assert [i.name for i in impls] == ["tk_ops", "fla fused_chunk", "fla parallel"]
    assert [i.ours for i in impls] == [True, False, False]


def test_backward_is_refused_with_a_reason():
    with pytest.raises(SystemExit, match="no backward kernel yet"):
        based.cases(backward=True)
