"""The benchmark's bookkeeping and reports, exercised on the CPU with a stand-in timer (the timing
itself needs CUDA events and runs only in `python -m tk_ops.bench` on a GPU)."""
import functools
import json
import re

import pytest
import torch

from tk_ops.bench import core, gemm

from .. import background
from .toolchain import run_python


def fixed_timer(ms):
    calls = []

    def timer(fn, arg_sets, reps, warmup):
        for args in arg_sets[:2]:
            fn(*args)
        calls.append(len(arg_sets))
        return ms
    timer.calls = calls
    return timer


def matmul_case(impls, flops=2.0 * 64 * 32 * 48):
    return core.Case("fp32", "64x32x48", (64, 32, 48), flops,
                     lambda: (torch.randn(64, 48), torch.randn(48, 32)), impls)


def test_rotation_spans_several_l2_sizes():
    l2 = 50 << 20
    assert core.rotation_count(4 << 20, l2) * (4 << 20) >= core.L2_SPAN * l2
    assert core.rotation_count(1 << 30, l2) == core.MIN_SETS
    assert core.rotation_count(1, l2) == core.MAX_SETS


def test_run_case_records_each_implementation():
    def broken(a, b):
        raise RuntimeError("kernel exploded")
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b, ours=True), core.Impl("peer", torch.matmul),
                        core.Impl("other", broken)])
    timer = fixed_timer(0.5)
    steps = []
    row = core.run_case(case, reps=5, warmup=1, l2_bytes=1 << 20, progress=steps.append, timer=timer)
    assert row.ours == "ours" and steps == [1, 1, 1]
    ours = row.results["ours"]
    assert ours.ms == 0.5 and ours.tflops == pytest.approx(case.flops / 0.5e-3 / 1e12)
    assert row.results["other"].error.startswith("RuntimeError: kernel exploded")
    assert row.ratio() == pytest.approx(1.0)
    assert row.rel_err is not None and row.rel_err < 1e-5
    # input sets: enough to span the (1 MiB) L2 several times
    set_bytes = (64 * 48 + 48 * 32) * 4
    assert timer.calls[0] == core.rotation_count(set_bytes, 1 << 20) > 2


def test_wrong_result_is_flagged():
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b + 1.0, ours=True), core.Impl("peer", torch.matmul)])
    row = core.run_case(case, reps=3, warmup=1, l2_bytes=1 << 20, timer=fixed_timer(1.0))
    assert row.rel_err > core.ERROR_FLAG
    assert " !" in core.format_table([row])


def test_wrong_peer_is_flagged():
    """A second peer that computes something else is marked in its cell, so that a broken peer build can not pass for
    a fast one; the first peer, the reference, and a correct second peer are not."""
    case = matmul_case([core.Impl("ours", lambda a, b: a @ b, ours=True), core.Impl("peer", torch.matmul),
                        core.Impl("good", lambda a, b: (a.double() @ b.double()).float()),
                        core.Impl("broken", lambda a, b: a @ b * 2.0)])
    row = core.run_case(case, reps=3, warmup=1, l2_bytes=1 << 20, timer=fixed_timer(1.0))
    assert row.results["peer"].rel_err is None
    assert row.results["good"].rel_err < 1e-5 and row.results["ours"].rel_err == row.rel_err < 1e-5
    assert row.results["broken"].rel_err == pytest.approx(1.0, rel=1e-4)
    lines = core.format_table([row]).splitlines()
    header = re.split(r"\s{2,}", next(line for line in lines if line.startswith("size")).strip())
    cells = dict(zip(header, re.split(r"\s{2,}", next(line for line in lines if line.startswith("64x32x48")).strip())))
    assert cells["broken"].endswith(" !")
    assert not any(cells[name].endswith("!") for name in ("ours", "peer", "good"))


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


def make_rows():
    def row(name, ours_ms, peer_ms, flops=1e12):
        r = core.Row("bf16", name, (1, 1, 1), flops, "tk_ops")
        r.results["tk_ops"] = core.Result(ours_ms, flops / (ours_ms * 1e-3) / 1e12)
        r.results["torch"] = core.Result(peer_ms, flops / (peer_ms * 1e-3) / 1e12)
        r.rel_err = 2e-3
        return r
    failed = core.Row("fp8 e4m3", "4096x4096x4096", (4096,) * 3, 2 * 4096.0 ** 3, "tk_ops")
    failed.results["tk_ops"] = core.Result(error="ExtensionNotBuiltError: not built")
    failed.results["torch._scaled_mm"] = core.Result(0.2, 687.2)
    return [row("1024x1024x1024", 2.0, 1.0), row("2048x2048x2048", 1.0, 2.0), failed]


def test_ratio_is_ours_over_best_peer():
    slow, fast, failed = make_rows()
    assert slow.ratio() == pytest.approx(0.5) and fast.ratio() == pytest.approx(2.0)
    assert failed.ratio() is None
    fast.results["cublas-alt"] = core.Result(0.25, 4000.0)
    assert fast.best_peer()[0] == "cublas-alt" and fast.ratio() == pytest.approx(0.25)


def test_table_layout():
    text = core.format_table(make_rows())
    lines = text.splitlines()
    assert "bf16: TFLOP/s (ms)" in lines and "fp8 e4m3: TFLOP/s (ms)" in lines
    row = next(line for line in lines if line.startswith("1024x1024x1024"))
    assert "500.0 (2.000)" in row and "1000.0 (1.000)" in row and "0.50x" in row and "2.0e-03" in row
    assert any("ExtensionNotBuiltError: not built" in line for line in lines)
    # the line left on screen: geometric mean per group (0.5x and 2x average to 1x)
    assert lines[-1] == "ours / best peer, geometric mean: bf16 1.00x, fp8 e4m3 -"
    assert max(len(line) for line in lines) <= 100


def test_json_and_plot(tmp_path):
    rows = make_rows()
    core.write_json(tmp_path / "gemm.json", "gemm", rows, {"device": "test"})
    doc = json.loads((tmp_path / "gemm.json").read_text())
    assert doc["family"] == "gemm" and doc["device"] == "test" and len(doc["rows"]) == 3
    assert doc["rows"][0]["results"]["tk_ops"]["tflops"] == pytest.approx(500.0)
    assert doc["rows"][0]["ratio"] == pytest.approx(0.5) and doc["rows"][2]["ratio"] is None
    pytest.importorskip("matplotlib")
    assert core.write_plot(tmp_path / "gemm.png", "GEMM", rows)
    assert (tmp_path / "gemm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
    backward = gemm.cases(quick=True, backward=True)
    assert backward and all(c.group in ("bf16 backward", "bf16, b = w.t() backward") and c.impls[0].setup
                            for c in backward)
    assert all(c.flops == 4.0 * c.shape[0] * c.shape[1] * c.shape[2] for c in backward)


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
