"""The benchmark's bookkeeping and reports, exercised on the CPU with stand-in timers (the timing itself needs CUDA
graphs, events and the profiler, and runs only in `python -m tk_ops.bench` on a GPU): the rounds and their statistics,
the flags, the per-output checks that gate a row, the table, the JSON, the command's exit status, and measure's
choice between the graph and the profiler."""
import functools
import json
import math
import re

import pytest
import torch

from tk_ops.bench import __main__ as bench_main
from tk_ops.bench import core, gemm

from .. import background
from .toolchain import run_python


def fixed_timer(ms, eager=None, kernel=None, method=core.GRAPH):
    """A timer that calls fn on the first input sets (as measure's warm-up would) and reports fixed figures; its
    calls are recorded as (fn, number of input sets, calls, warmup, capture, profile)."""
    calls = []

    def timer(fn, arg_sets, n, warmup, capture=True, profile=True):
        for args in arg_sets[:2]:
            fn(*args)
        calls.append((fn, len(arg_sets), n, warmup, capture, profile))
        return core.Sample(ms, method, ms if eager is None else eager, kernel)
    timer.calls = calls
    return timer


def matmul_case(impls, flops=2.0 * 64 * 32 * 48, **kw):
    return core.Case("fp32", "64x32x48", (64, 32, 48), flops,
                     lambda: (torch.randn(64, 48), torch.randn(48, 32)), impls, **kw)


def run(case, timer=None, reps=6, rounds=core.ROUNDS):
    return core.run_case(case, reps=reps, warmup=2, l2_bytes=1 << 20, timer=timer or fixed_timer(1.0), rounds=rounds)


def cells_of(table: str, row_name: str) -> dict[str, str]:
    lines = table.splitlines()
    header = re.split(r"\s{2,}", next(line for line in lines if line.startswith("size")).strip())
    return dict(zip(header, re.split(r"\s{2,}", next(line for line in lines if line.startswith(row_name)).strip())))


# ---------------------------------------------------------------- rotation, rounds and statistics

def test_rotation_spans_several_l2_sizes():
    l2 = 50 << 20
    assert core.rotation_count(4 << 20, l2) * (4 << 20) >= core.L2_SPAN * l2
    assert core.rotation_count(1 << 30, l2) == core.MIN_SETS
    assert core.rotation_count(1, l2) == core.MAX_SETS


def test_spread_is_median_min_max():
    assert core.spread([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert core.spread([5.0]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        core.spread([])


def test_summarize_keeps_every_round():
    samples = [core.Sample(2.0, eager_ms=2.1, kernel_ms=1.9), core.Sample(1.0, eager_ms=1.2),
               core.Sample(4.0, eager_ms=3.9)]
    res = core.summarize(samples, flops=2e9)
    assert (res.ms, res.ms_min, res.ms_max) == (2.0, 1.0, 4.0) and res.rounds_ms == [2.0, 1.0, 4.0]
    assert res.tflops == pytest.approx(2e9 / 2e-3 / 1e12)  # from the median round
    assert res.eager_ms == 2.1 and res.kernel_ms == 1.9 and res.method == core.GRAPH and res.flags == []


def test_rounds_alternate_order_and_only_the_first_warms_up_and_profiles():
    def named(name):
        def fn(a, b):
            return a @ b
        fn.__name__ = name
        return fn
    impls = [core.Impl("ours", named("ours"), ours=True), core.Impl("peer", named("peer")),
             core.Impl("other", named("other"))]
    timer = fixed_timer(1.0)
    row = run(matmul_case(impls), timer, reps=9)
    order = [c[0].__name__ for c in timer.calls]
    assert order == ["ours", "peer", "other", "other", "peer", "ours", "ours", "peer", "other"]
    assert {c[2] for c in timer.calls} == {9 // core.REPLAYS}  # calls per graph
    first, later = timer.calls[:3], timer.calls[3:]
    assert all(c[3] == 2 and c[5] for c in first) and all(c[3] == 1 and not c[5] for c in later)
    assert all(len(r.rounds_ms) == 3 for r in row.results.values())


def test_run_case_records_each_implementation():
    def broken(a, b):
        raise RuntimeError("kernel exploded")
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b, ours=True), core.Impl("peer", torch.matmul),
                        core.Impl("other", broken)])
    timer = fixed_timer(0.5)
    steps = []
    row = core.run_case(case, reps=6, warmup=1, l2_bytes=1 << 20, progress=steps.append, timer=timer)
    assert row.ours == "ours" and steps == [1, 1, 1]
    ours = row.results["ours"]
    assert ours.ms == 0.5 and ours.tflops == pytest.approx(case.flops / 0.5e-3 / 1e12)
    assert (ours.ms_min, ours.ms_max) == (0.5, 0.5)
    assert row.results["other"].error.startswith("RuntimeError: kernel exploded")
    assert row.ratio() == pytest.approx(1.0) and row.reference == "peer" and row.status == "ok"
    assert row.rel_err is not None and row.rel_err < 1e-5
    # input sets: enough to span the (1 MiB) L2 several times
    set_bytes = (64 * 48 + 48 * 32) * 4
    assert timer.calls[0][1] == core.rotation_count(set_bytes, 1 << 20) > 2


def test_round_figures_are_median_min_and_max():
    figures = iter([3.0, 5.0, 1.0, 4.0, 2.0, 9.0])  # ours, peer, then reversed: peer, ours, then ours, peer

    def timer(fn, arg_sets, n, warmup, capture=True, profile=True):
        fn(*arg_sets[0])
        return core.Sample(next(figures))
    row = run(matmul_case([core.Impl("ours", torch.matmul, ours=True), core.Impl("peer", torch.matmul)]), timer)
    ours, peer = row.results["ours"], row.results["peer"]
    assert ours.rounds_ms == [3.0, 4.0, 2.0] and (ours.ms, ours.ms_min, ours.ms_max) == (3.0, 2.0, 4.0)
    assert peer.rounds_ms == [5.0, 1.0, 9.0] and (peer.ms, peer.ms_min, peer.ms_max) == (5.0, 1.0, 9.0)
    assert row.ratio() == pytest.approx(5.0 / 3.0)


def test_a_call_that_failed_to_capture_is_not_captured_again():
    seen = []

    def timer(fn, arg_sets, n, warmup, capture=True, profile=True):
        seen.append(capture)
        return core.Sample(2.0, core.PROFILER, 2.5, 2.0, "RuntimeError: operation not permitted while capturing")
    row = run(matmul_case([core.Impl("ours", torch.matmul, ours=True)]), timer)
    assert seen == [True, False, False]
    res = row.results["ours"]
    assert res.method == core.PROFILER and "profiler" in res.flags and res.capture_error.startswith("RuntimeError")


# ---------------------------------------------------------------- flags

def test_flags_rule():
    m = core.HOST_MARGIN
    assert core.flags_for(1.0, 1.0 + m * 1.5, None, core.GRAPH) == ["host"]
    assert core.flags_for(1.0, 1.0 + m * 0.5, None, core.GRAPH) == []
    assert core.flags_for(1.0, None, None, core.GRAPH) == []
    assert core.flags_for(1.0, 1.0, 1.0, core.PROFILER) == ["profiler"]
    assert core.flags_for(1.0, 1.0, 1.0 / (1 + core.IDLE_MARGIN * 2), core.GRAPH) == ["idle"]
    assert core.flags_for(1.0, 1.0, 1.0 / (1 + core.IDLE_MARGIN / 2), core.GRAPH) == []
    # a profiler figure is the kernels' sum itself: no idle flag
    assert core.flags_for(2.0, 2.0, 1.0, core.PROFILER) == ["profiler"]


def test_host_bound_peer_is_flagged_in_table_and_json(tmp_path):
    def timer(fn, arg_sets, n, warmup, capture=True, profile=True):
        fn(*arg_sets[0])
        slow_host = fn is torch.matmul
        return core.Sample(1.0, eager_ms=4.0 if slow_host else 1.02, kernel_ms=0.98)
    row = run(matmul_case([core.Impl("ours", lambda a, b: a @ b, ours=True), core.Impl("peer", torch.matmul)]), timer)
    assert row.results["peer"].flags == ["host"] and row.results["ours"].flags == []
    assert row.flagged() == {"peer": ["host"]}
    table = core.format_table([row])
    cells = cells_of(table, "64x32x48")
    assert cells["peer"].endswith(" h") and not cells["ours"].endswith(" h")
    assert f"  h: {core.FLAG_TEXT['host']}" in table.splitlines()
    core.write_json(tmp_path / "x.json", "x", [row], {})
    doc = json.loads((tmp_path / "x.json").read_text())
    assert doc["rows"][0]["flags"] == {"peer": ["host"]} and doc["rows"][0]["results"]["peer"]["flags"] == ["host"]


# ---------------------------------------------------------------- checks

def test_wrong_result_fails_the_row():
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b + 1.0, ours=True), core.Impl("peer", torch.matmul)])
    row = run(case)
    assert row.status == "FAIL" and row.results["ours"].failed and row.rel_err > 0.05
    assert row.ratio() is None and core.geomean_ratio([row]) is None and core.failed([row])
    table = core.format_table([row])
    cells = cells_of(table, "64x32x48")
    assert cells["check"] == "FAIL" and cells["ratio"] == "-" and cells["ours"].endswith("FAIL")
    assert "failed checks:" in table and "fp32 64x32x48: ours output 0 against peer: relative error" in table
    assert table.splitlines()[-1] == "ours / best peer, geometric mean: fp32 - (1 FAIL left out)"


def test_small_wrong_gradient_fails_although_the_pooled_error_is_small():
    """One large correct output and one small wrong one: the pooled norm is far under the tolerance, each output's
    own error is not."""
    def make():
        return torch.randn(256, 256) * 100, torch.randn(8)

    def right(big, small):
        return big * 2, small * 3

    def wrong(big, small):
        return big * 2, small * 3 + 1.0
    case = core.Case("g", "n", (1,), 1e9, make, [core.Impl("ours", wrong, ours=True), core.Impl("peer", right)],
                     tol={torch.float32: 1e-2}, outputs=("dbig", "dsmall"))
    row = run(case)
    inputs = make()
    pooled = core.rel_error(wrong(*inputs), right(*inputs))
    assert pooled < 1e-2  # one norm over all outputs would pass it
    checks = {c.output: c for c in row.results["ours"].checks if c.against == "peer"}
    assert checks["dbig"].passed and not checks["dsmall"].passed and checks["dsmall"].rel_err > 0.1
    assert row.status == "FAIL" and "ours dsmall against peer" in core.format_table([row])


def test_wrong_peer_fails_the_row_and_is_not_the_best_peer():
    """A second peer that computes something else fails its check (it can not pass for a fast one); the first peer is
    the reference, and a correct second peer passes."""
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b, ours=True), core.Impl("peer", torch.matmul),
                        core.Impl("good", lambda a, b: (a.double() @ b.double()).float()),
                        core.Impl("broken", lambda a, b: a @ b * 2.0)])

    def timer(fn, arg_sets, n, warmup, capture=True, profile=True):
        fn(*arg_sets[0])
        return core.Sample(0.1 if fn is case.impls[3].fn else 1.0)  # the broken one is the fastest
    row = run(case, timer)
    assert row.results["peer"].rel_err is None and row.reference == "peer"
    assert row.results["good"].passed and row.results["ours"].passed
    assert row.results["broken"].failed and row.results["broken"].rel_err == pytest.approx(1.0, rel=1e-4)
    assert row.best_peer()[0] != "broken"
    assert row.status == "FAIL" and row.ratio() is None
    cells = cells_of(core.format_table([row]), "64x32x48")
    assert cells["broken"].endswith(" FAIL")
    assert not any(cells[name].endswith("FAIL") for name in ("ours", "peer", "good"))


def test_reference_is_the_first_peer_that_ran():
    def broken(a, b):
        raise RuntimeError("peer missing a kernel")
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b + 1.0, ours=True), core.Impl("first", broken),
                        core.Impl("second", torch.matmul)])
    row = run(case)
    assert row.reference == "second" and row.results["ours"].failed
    assert [c.against for c in row.results["ours"].checks] == ["second"]


def test_tolerance_per_output_dtype():
    tol = {torch.bfloat16: 2e-2, torch.float32: 1e-4}
    assert core.tolerance(tol, torch.float32, torch.float32) == 1e-4
    assert core.tolerance(tol, torch.float32, torch.bfloat16) == 2e-2  # the less precise side's
    assert core.tolerance({}, torch.float16) == core.DEFAULT_TOL[torch.float16]
    ref32 = torch.randn(64, 64)
    off = ref32 * (1 + 1e-3)  # 1e-3 relative
    (c32,) = core.check_outputs(off, ref32, tol)
    (c16,) = core.check_outputs(off.bfloat16(), ref32.bfloat16(), tol)
    assert not c32.passed and c32.tol == 1e-4 and c32.rel_err == pytest.approx(1e-3, rel=1e-2)
    assert c16.passed and c16.tol == 2e-2


def test_an_error_confined_to_one_row_fails():
    ref = torch.randn(512, 64)
    out = ref.clone()
    out[7] = -out[7]  # one row of 512 wrong: about 0.09 of the whole norm, 2 of the row's
    (check,) = core.check_outputs(out, ref, {torch.float32: 0.2})
    assert check.rel_err < 0.2 and check.row_err > 4 * 0.2 and not check.passed
    (fine,) = core.check_outputs(ref * (1 + 1e-3), ref, {torch.float32: 0.1})
    assert fine.passed and fine.row_err == pytest.approx(1e-3, rel=1e-3)


def test_worst_row_measures_small_rows_against_the_tensor_scale():
    ref = torch.ones(4, 8)
    ref[2] = 1e-6  # a row of tiny values: its own norm would blow up a rounding-size error
    out = ref.clone()
    out[2] += 1e-4
    assert core.worst_row(out, ref) == pytest.approx(1e-4 * math.sqrt(8) / math.sqrt(8 * 3 / 4), rel=1e-3)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_non_finite_output_never_passes(bad):
    ref = torch.randn(16, 16)
    out = ref.clone()
    out[3, 3] = float(bad)
    (check,) = core.check_outputs(out, ref, {torch.float32: 1.0})
    assert not check.passed


def test_shape_and_count_mismatches_fail():
    a = torch.randn(4, 6)
    (shape,) = core.check_outputs(a, a.t().contiguous(), {}, ("O",), "peer")
    assert not shape.passed and shape.output == "O" and "shape (4, 6), (6, 4) from peer" == shape.note
    (count,) = core.check_outputs((a, a), (a,), {})
    assert not count.passed and "2 outputs, 1 from reference" == count.note
    one_none = core.check_outputs((a, None), (a, a), {})
    assert one_none[0].passed and not one_none[1].passed
    both_none = core.check_outputs((a, None), (a, None), {})
    assert all(c.passed for c in both_none)


def test_nested_outputs_are_flattened_in_order():
    a, b, c = torch.ones(1), torch.zeros(2), torch.ones(3)
    assert [t is x for t, x in zip(core.flatten_outputs((a, [b, (c,)], 5)), (a, b, c))] == [True] * 3
    assert len(core.flatten_outputs((a, [b, (c,)], 5))) == 3
    assert core.flatten_outputs(None) == [None]


def test_graph_output_is_held_to_the_eager_output():
    """The timed graph's output of its first call must match the eager call on the same inputs: a capture that
    computes something else fails the row."""
    def timer_with(graph_out):
        def timer(fn, arg_sets, n, warmup, capture=True, profile=True):
            out = fn(*arg_sets[0])
            return core.Sample(1.0, graph_output=graph_out(out))
        return timer
    impls = [core.Impl("ours", torch.matmul, ours=True), core.Impl("peer", torch.matmul)]
    good = run(matmul_case(impls), timer_with(lambda out: out.clone()))
    assert good.status == "ok"
    assert [c.against for c in good.results["peer"].checks] == ["eager"]
    assert [c.against for c in good.results["ours"].checks] == ["peer", "eager"]
    stale = run(matmul_case(impls), timer_with(torch.zeros_like))
    assert stale.status == "FAIL"
    assert all(not c.passed for r in stale.results.values() for c in r.checks if c.against == "eager")
    assert "against eager" in core.format_table([stale])


def test_unchecked_without_a_peer():
    row = run(matmul_case([core.Impl("ours", torch.matmul, ours=True)]))
    assert row.status == "unchecked" and row.reference is None and row.ratio() is None
    assert cells_of(core.format_table([row]), "64x32x48")["check"] == "-"
    assert not core.failed([row])


def test_backward_timing_computes_input_gradients():
    setup, fn = core.backward_of(torch.matmul)
    a = torch.randn(8, 4, requires_grad=True)
    b = torch.randn(4, 6, requires_grad=True)
    out, wrt, grad = setup(a, b)
    ga, gb = fn(out, wrt, grad)
    torch.testing.assert_close(ga, grad @ b.detach().t())
    torch.testing.assert_close(gb, a.detach().t() @ grad)
    ga2, _ = fn(out, wrt, grad)  # the graph is kept, so the timed call can repeat
    torch.testing.assert_close(ga2, ga)


def test_backward_gradients_are_the_same_for_every_implementation():
    """Each implementation's set-up draws the output gradient; they must draw the same one, or their gradients can
    not be compared."""
    a = torch.randn(8, 4, requires_grad=True)
    b = torch.randn(4, 6, requires_grad=True)
    ours, peer = core.backward_of(torch.matmul), core.backward_of(lambda x, y: (x.double() @ y.double()).float())
    _, _, g1 = ours[0](a, b)
    _, _, g2 = peer[0](a, b)
    assert torch.equal(g1, g2) and g1.std() > 0.5
    case = core.Case("bwd", "n", (1,), 1.0, lambda: (torch.randn(8, 4, requires_grad=True),
                                                    torch.randn(4, 6, requires_grad=True)),
                     [core.Impl("ours", ours[1], ours=True, setup=ours[0]), core.Impl("peer", peer[1], setup=peer[0])],
                     tol={torch.float32: 1e-5}, outputs=("dA", "dB"))
    row = run(case)
    assert row.status == "ok" and [c.output for c in row.results["ours"].checks] == ["dA", "dB"]


# ---------------------------------------------------------------- measure: graph or profiler

@pytest.fixture
def fake_cuda(monkeypatch):
    """measure's GPU parts replaced: the graph and profiler figures are fixed, a graph can be made to fail."""
    state = {"graph_fails": False, "graph_calls": 0, "kernel_calls": 0}

    def graph_ms(call, calls):
        state["graph_calls"] += 1
        if state["graph_fails"]:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return 1.5, call(0)

    def kernel_ms(call, calls):
        state["kernel_calls"] += 1
        return 1.25
    monkeypatch.setattr(core, "_graph_ms", graph_ms)
    monkeypatch.setattr(core, "_kernel_ms", kernel_ms)
    monkeypatch.setattr(core, "_eager_ms", lambda call, calls: 2.0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return state


def test_measure_uses_the_graph_when_it_captures(fake_cuda):
    args = [(torch.ones(2),), (torch.zeros(2),)]
    seen = []
    s = core.measure(lambda x: seen.append(x) or x * 2, args, calls=4, warmup=3)
    assert (s.gpu_ms, s.method, s.eager_ms, s.kernel_ms, s.capture_error) == (1.5, core.GRAPH, 2.0, 1.25, None)
    assert torch.equal(s.graph_output, torch.full((2,), 2.0))
    assert len(seen) == 3 + 1 and seen[0] is args[0][0] and seen[1] is args[1][0]  # warm-up cycles the sets
    s = core.measure(lambda x: x, args, calls=4, warmup=0, profile=False)
    assert s.kernel_ms is None and fake_cuda["kernel_calls"] == 1


def test_measure_falls_back_to_the_profiler(fake_cuda):
    fake_cuda["graph_fails"] = True
    s = core.measure(lambda x: x, [(torch.ones(1),)], calls=4, warmup=0, profile=False)
    assert (s.gpu_ms, s.method, s.kernel_ms) == (1.25, core.PROFILER, 1.25)
    assert s.capture_error.startswith("RuntimeError: CUDA error: operation not permitted")
    assert s.graph_output is None
    graphs = fake_cuda["graph_calls"]
    s = core.measure(lambda x: x, [(torch.ones(1),)], calls=4, warmup=0, capture=False, profile=False)
    assert fake_cuda["graph_calls"] == graphs and s.method == core.PROFILER and s.gpu_ms == 1.25


def test_graph_output_is_copied_out_of_the_graph_pool():
    """The checked output must survive the graph (whose memory pool is released with it): a copy, same values."""
    a, b = torch.randn(3), torch.randn(2)
    copied = core._copy_outputs((a, [b, None], 7))
    flat = core.flatten_outputs(copied)
    assert len(flat) == 3 and flat[2] is None
    assert torch.equal(flat[0], a) and torch.equal(flat[1], b)
    assert flat[0].data_ptr() != a.data_ptr() and flat[1].data_ptr() != b.data_ptr()


def test_spin_covers_the_host_time(monkeypatch):
    monkeypatch.setattr(core, "cycles_per_ms", lambda: 1e6)
    assert core.spin_cycles(0.001) == core.SPIN_CYCLES
    assert core.spin_cycles(1.0) == int(core.SPIN_SAFETY * 1e6)
    assert core.spin_cycles(1e6) == int(core.MAX_SPIN_MS * 1e6)


# ---------------------------------------------------------------- reports

def make_rows():
    def row(name, ours_ms, peer_ms, flops=1e12):
        r = core.Row("bf16", name, (1, 1, 1), flops, "tk_ops", reference="torch")
        r.results["tk_ops"] = core.Result(ours_ms, ours_ms * 0.99, ours_ms * 1.02, [ours_ms] * 3,
                                          flops / (ours_ms * 1e-3) / 1e12, rel_err=2e-3, passed=True,
                                          checks=[core.OutputCheck("C", "torch", 2e-3, 3e-3, 1e-2, True)])
        r.results["torch"] = core.Result(peer_ms, peer_ms, peer_ms, [peer_ms] * 3, flops / (peer_ms * 1e-3) / 1e12)
        r.rel_err = 2e-3
        return r
    failed = core.Row("fp8 e4m3", "4096x4096x4096", (4096,) * 3, 2 * 4096.0 ** 3, "tk_ops")
    failed.results["tk_ops"] = core.Result(error="ExtensionNotBuiltError: not built")
    failed.results["torch._scaled_mm"] = core.Result(0.2, 0.2, 0.2, [0.2] * 3, 687.2)
    return [row("1024x1024x1024", 2.0, 1.0), row("2048x2048x2048", 1.0, 2.0), failed]


def test_ratio_is_ours_over_best_peer():
    slow, fast, failed = make_rows()
    assert slow.ratio() == pytest.approx(0.5) and fast.ratio() == pytest.approx(2.0)
    assert failed.ratio() is None
    fast.results["cublas-alt"] = core.Result(0.25, tflops=4000.0)
    assert fast.best_peer()[0] == "cublas-alt" and fast.ratio() == pytest.approx(0.25)


def test_table_layout():
    text = core.format_table(make_rows())
    lines = text.splitlines()
    assert "bf16: TFLOP/s ms [min-max]; checked against torch" in lines and "fp8 e4m3: TFLOP/s ms [min-max]" in lines
    cells = cells_of(text, "1024x1024x1024")
    assert cells["tk_ops"] == "500.0 2 [1.98-2.04]" and cells["torch"] == "1000.0 1 [1-1]"
    assert cells["ratio"] == "0.50x" and cells["check"] == "ok 2.0e-03"
    assert any("ExtensionNotBuiltError: not built" in line for line in lines)
    # the line left on screen: geometric mean per group (0.5x and 2x average to 1x)
    assert lines[-1] == "ours / best peer, geometric mean: bf16 1.00x, fp8 e4m3 -"
    assert max(len(line) for line in lines) <= 100


def test_json_schema(tmp_path):
    rows = make_rows()
    wrong = run(matmul_case([core.Impl("ours", lambda a, b: a @ b * float("nan"), ours=True),
                             core.Impl("peer", torch.matmul)]))
    core.write_json(tmp_path / "gemm.json", "gemm", rows + [wrong], {"device": "test", **core.timing_meta(30)})

    def strict(text):
        raise ValueError(f"not JSON: {text}")
    doc = json.loads((tmp_path / "gemm.json").read_text(), parse_constant=strict)
    assert doc["family"] == "gemm" and doc["schema"] == core.SCHEMA and doc["device"] == "test"
    assert doc["rounds"] == core.ROUNDS and doc["replays"] == core.REPLAYS and doc["calls_per_graph"] == 10
    assert len(doc["rows"]) == 4
    first = doc["rows"][0]
    assert {"group", "name", "shape", "flops", "ours", "results", "rel_err", "reference", "notes", "status", "ratio",
            "flags"} <= first.keys()
    ours = first["results"]["tk_ops"]
    assert ours["tflops"] == pytest.approx(500.0) and ours["ms"] == 2.0
    assert (ours["ms_min"], ours["ms_max"], ours["rounds_ms"]) == (1.98, 2.04, [2.0] * 3)
    assert {"method", "eager_ms", "kernel_ms", "flags", "error", "capture_error", "passed"} <= ours.keys()
    assert ours["checks"][0] == {"output": "C", "against": "torch", "rel_err": 2e-3, "row_err": 3e-3, "tol": 1e-2,
                                 "passed": True, "note": None}
    assert first["status"] == "ok" and first["ratio"] == pytest.approx(0.5) and doc["rows"][2]["ratio"] is None
    last = doc["rows"][3]
    assert last["status"] == "FAIL" and last["ratio"] is None
    assert last["results"]["ours"]["checks"][0]["rel_err"] == "nan" and not last["results"]["ours"]["passed"]


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    assert core.write_plot(tmp_path / "gemm.png", "GEMM", make_rows())
    assert (tmp_path / "gemm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_notes_are_listed_once():
    a, b = make_rows()[:2]
    a.notes = b.notes = ["FlashFFTConv left out: it does not import here"]
    text = core.format_table([a, b])
    assert text.count("FlashFFTConv left out") == 1 and "notes:" in text


# ---------------------------------------------------------------- the command

def test_reps_and_defaults_parse():
    args = bench_main.parse_args(["gemm", "--reps", "12", "--quick"])
    assert args.reps == 12 and args.quick and args.family == "gemm"
    assert core.timing_meta(12)["calls_per_graph"] == 4
    assert core.timing_meta(1)["calls_per_graph"] == 1


@pytest.mark.parametrize("outcome, code", [("ok", 0), ("fail", 1), ("ours_error", 1), ("peer_error", 0)])
def test_exit_status(outcome, code, monkeypatch, tmp_path, capsys):
    """The command exits 1 when a check failed or ours raised, and writes the JSON either way."""
    rows = make_rows()[:2]
    if outcome == "fail":
        rows[1].results["tk_ops"].passed = False
        rows[1].results["tk_ops"].checks[0].passed = False
    elif outcome == "ours_error":
        rows[1].results["tk_ops"] = core.Result(error="InputError: too long")
    elif outcome == "peer_error":
        rows[1].results["torch"] = core.Result(error="RuntimeError: no kernel")
    seen = {}

    def run_cases(cases, reps, warmup):
        seen.update(cases=cases, reps=reps, warmup=warmup)
        return rows
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gemm, "cases", lambda quick, backward, **kw: ["case"])
    monkeypatch.setattr(core, "run_cases", run_cases)
    monkeypatch.setattr(core, "environment", lambda: {"device": "Fake GPU", "torch": torch.__version__})
    monkeypatch.setattr(core, "write_plot", lambda *a: False)
    assert bench_main.main(["gemm", "--out", str(tmp_path)]) == code
    assert seen == {"cases": ["case"], "reps": 30, "warmup": 10}
    doc = json.loads((tmp_path / "gemm.json").read_text())
    assert doc["calls_per_graph"] == 10 and doc["rounds"] == core.ROUNDS and doc["reps"] == 30
    assert [r["status"] for r in doc["rows"]][1] == ("FAIL" if outcome == "fail" else
                                                     "unchecked" if outcome == "ours_error" else "ok")
    out = capsys.readouterr().out
    assert "median of 3 rounds" in out and "CUDA graph of 10 calls" in out


def test_quick_reps(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gemm, "cases", lambda quick, backward, **kw: [])
    monkeypatch.setattr(core, "run_cases", lambda cases, reps, warmup: seen.update(reps=reps, warmup=warmup) or [])
    monkeypatch.setattr(core, "environment", lambda: {"device": "Fake GPU", "torch": torch.__version__})
    monkeypatch.setattr(core, "write_plot", lambda *a: False)
    assert bench_main.main(["gemm", "--quick", "--out", str(tmp_path)]) == 0
    assert seen == {"reps": 9, "warmup": 3}


# ---------------------------------------------------------------- gemm's cases

def test_gemm_cases_cover_the_requested_sizes():
    cases = gemm.cases()
    bf16 = [c for c in cases if c.group == "bf16"]
    fp8 = [c for c in cases if c.group == "fp8 e4m3"]
    expected = [(n, n, n) for n in (1024, 2048, 4096, 8192, 16384)] + [
        (4096, 4096, 256), (4096, 4096, 1024), (8192, 8192, 1024)]
    weight = [c for c in cases if c.group == "bf16, b = w.t()"]
    assert [c.shape for c in bf16] == expected and [c.shape for c in fp8] == expected
    assert [c.shape for c in weight] == expected  # the nn.Linear operand order, same sizes
    assert [c.shape for c in cases if c.group == "fp8 e4m3, row-wise scales"] == expected
    assert all(c.flops == 2.0 * c.shape[0] * c.shape[1] * c.shape[2] for c in cases)
    assert all([i.name for i in c.impls if i.ours] == ["tk_ops"] for c in cases)
    assert all(c.tol == gemm.BF16_TOL and c.outputs == ("C",) for c in bf16 + weight)
    backward = gemm.cases(quick=True, backward=True)
    assert backward and all(c.group in ("bf16 backward", "bf16, b = w.t() backward") and c.impls[0].setup
                            for c in backward)
    assert all(c.flops == 4.0 * c.shape[0] * c.shape[1] * c.shape[2] for c in backward)
    assert all(c.outputs == ("dA", "dB") for c in backward)


@pytest.mark.parametrize("rowwise", [False, True], ids=["per-tensor", "row-wise"])
def test_fp8_peer_with_and_without_fast_accumulation(rowwise, monkeypatch):
    """torch._scaled_mm is timed as called by default (precise accumulation: the reference) and with
    use_fast_accum=True, the accumulation ours does."""
    calls = []

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum):
        calls.append((a, b, scale_a, scale_b, out_dtype, use_fast_accum))
        return a
    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    case = gemm.fp8_case(64, 32, 48, rowwise=rowwise)
    assert [i.name for i in case.impls] == ["tk_ops", "torch._scaled_mm", "torch._scaled_mm fast accum"]
    assert case.tol == gemm.FP8_TOL and case.outputs == ("C",)
    a, b_t, sa, sb = torch.randn(64, 48), torch.randn(32, 48), torch.ones(()), torch.ones(())
    for impl in case.impls[1:]:
        impl.fn(a, b_t, sa, sb)
    assert [c[5] for c in calls] == [False, True]
    assert all(c[0] is a and c[2] is sa and c[3] is sb and c[4] == torch.bfloat16 for c in calls)
    assert all(torch.equal(c[1], b_t.t()) and c[1].stride() == (1, 48) for c in calls)  # b column-major, in place


NO_GPU = not torch.cuda.is_available()


def background_jobs():
    # Child Pythons importing torch: started with the compiles instead of one after the other.
    jobs = {"bench:unknown_family": functools.partial(run_python, "-m", "tk_ops.bench", "nope")}
    if NO_GPU:  # with a GPU this command would run the benchmark
        jobs["bench:no_gpu"] = functools.partial(run_python, "-m", "tk_ops.bench", "gemm", "--quick")
    return jobs


@pytest.mark.skipif(not NO_GPU, reason="checks the message shown on a machine without a GPU")
def test_cli_without_gpu_says_so():
    res = background.result("bench:no_gpu")
    assert res.returncode == 2 and "need a CUDA GPU" in res.stderr


def test_cli_rejects_unknown_family():
    res = background.result("bench:unknown_family")
    assert res.returncode == 2 and "invalid choice: 'nope'" in res.stderr and "gemm" in res.stderr
