"""The FFT convolution benchmark's cases, without a GPU: sizes and the FLOP convention, the torch.fft formulation
held to the float64 reference (values and gradients), its torch.compile'd twin as the second peer, FlashFFTConv as a
peer only when it imports (a note when not) and with the causal FFT size, the arguments every side gets, the checks'
tolerances and output names, --backward's training-step cases (tk_ops's on CPU stand-ins for its ops' kernels), and
the sizes tk_ops refuses recorded as its result while the peers are still timed."""
import math

import pytest
import torch

import tk_ops.reference as ref
from tk_ops.bench import __main__ as bench_main
from tk_ops.bench import core, fftconv

from ..util import skip_unless_built


def test_registered_as_a_family():
    assert "fftconv" in bench_main.families()
    assert bench_main.parse_args(["fftconv", "--backward"]).family == "fftconv"


def test_sizes_and_flops():
    cases = fftconv.cases()
    assert [c.name for c in cases] == ["N=256 B=16", "N=1024 B=16", "N=4096 B=16", "N=16384 B=16", "N=65536 B=4",
                                       "N=262144 B=1", "N=1048576 B=1 H=256", "N=4096 B=16"]
    assert [c.shape for c in cases[:7]] == [(16, 1024, 256), (16, 1024, 1024), (16, 1024, 4096), (16, 1024, 16384),
                                            (4, 1024, 65536), (1, 1024, 262144), (1, 256, 1048576)]
    assert {c.group for c in cases[:7]} == {"bf16"} and "pregate + postgate" in cases[7].group
    # 2 * 10 * N log2(N) * d_model * B, the paper's convention (ANCHORS.md, docs/fftconv.md).
    assert cases[2].flops == 2 * 10 * 4096 * 12 * 1024 * 16
    assert cases[4].flops == 2 * 10 * 65536 * 16 * 1024 * 4
    assert cases[6].flops == 2 * 10 * 2 ** 20 * 20 * 256
    assert cases[7].flops == cases[2].flops
    for c in cases:
        b, h, n = c.shape
        assert c.flops == pytest.approx(20 * n * math.log2(n) * h * b)
    quick = fftconv.cases(quick=True)
    assert [c.name for c in quick] == ["N=1024 B=16", "N=4096 B=16", "N=4096 B=16"]
    # A smoke run stays within what tk_ops is built for, so that it can pass.
    assert all(c.shape[-1] <= 4096 for c in quick)


def test_peers_and_their_order(monkeypatch):
    monkeypatch.setattr(fftconv, "_flash_class", lambda: None)
    case = fftconv.fftconv_case(1024, 16)
    # torch.fft first: it is the reference every output is checked against.
    assert [i.name for i in case.impls] == ["tk_ops", "torch.fft", "torch.fft compiled"]
    assert [i.ours for i in case.impls] == [True, False, False]
    assert len(case.notes) == 1 and case.notes[0].startswith("FlashFFTConv left out")
    monkeypatch.setattr(fftconv, "_flash_class", lambda: object)
    case = fftconv.fftconv_case(1024, 16)
    assert [i.name for i in case.impls] == ["tk_ops", "torch.fft", "torch.fft compiled", "FlashFFTConv"]
    assert case.notes == []


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_checks_name_every_output(backward, gated):
    case = fftconv.fftconv_case(1024, 16, gated=gated, backward=backward)
    if backward:
        assert case.tol == fftconv.BACKWARD_TOL
        assert case.outputs == (("du", "dk", "dpregate", "dpostgate") if gated else ("du", "dk"))
    else:
        assert case.tol == fftconv.FORWARD_TOL and case.outputs == ("y",)
    assert case.tol[torch.bfloat16] <= 5e-2 and case.tol[torch.float32] <= 5e-2


def test_compiled_peer_compiles_the_formulation_once(monkeypatch):
    """torch.compile of the very torch_fft function (dynamic=False: once per shape), made on the first call and kept,
    with room in dynamo's cache for every size's compilation."""
    compiled = []

    def fake_compile(fn, **kwargs):
        compiled.append((fn, kwargs))
        return fn
    monkeypatch.setattr(torch, "compile", fake_compile)
    # config.patch restores the limits afterwards (monkeypatch would delete dynamo's config entries on undo).
    with torch._dynamo.config.patch(recompile_limit=8, accumulated_recompile_limit=8):
        fn = fftconv.compiled_torch_fft()
        assert compiled == []  # nothing compiled while the cases are listed
        u, k, pregate, postgate = fftconv.make_inputs(64, 2, heads=3, gated=True, device="cpu")
        y = fn(u, k, pregate, postgate)
        fn(u, k)
        assert compiled == [(fftconv.torch_fft, {"dynamic": False})]
        assert torch.equal(y, fftconv.torch_fft(u, k, pregate, postgate))
        config = torch._dynamo.config
        assert config.recompile_limit >= 64 and config.accumulated_recompile_limit >= 64


def test_flash_lookup_survives_a_missing_package(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_flash(name, *args, **kwargs):
        if name.startswith(("flashfftconv", "monarch_cuda")):
            raise ImportError("No module named 'monarch_cuda'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_flash)
    assert fftconv._flash_class() is None


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_every_side_gets_the_same_arguments(gated, monkeypatch):
    built, calls = [], []

    def compiled(fn, **kwargs):
        def run(*args):
            calls.append(("compiled", *args))
            return fn(*args)
        return run
    monkeypatch.setattr(torch, "compile", compiled)

    class FakeFlash:
        def __init__(self, fft_size, dtype):
            built.append((fft_size, dtype))

        def to(self, device):
            return self

        def __call__(self, u, k, pregate, postgate):
            calls.append(("flash", u, k, pregate, postgate))
            return u

    def fake_ours(u, k, pregate=None, postgate=None):
        calls.append(("tk_ops", u, k, pregate, postgate))
        return u
    monkeypatch.setattr(fftconv, "_flash_class", lambda: FakeFlash)
    import tk_ops
    monkeypatch.setattr(tk_ops, "fftconv", fake_ours)
    case = fftconv.fftconv_case(256, 2, gated=gated, heads=3, device="cpu")
    inputs = fftconv.make_inputs(256, 2, heads=3, gated=gated, device="cpu")
    u, k, pregate, postgate = inputs
    assert u.shape == (2, 3, 256) and u.dtype == torch.bfloat16
    assert k.shape == (3, 256) and k.dtype == torch.float32
    assert (pregate is None and postgate is None) != gated
    if gated:
        assert pregate.shape == postgate.shape == u.shape and pregate.dtype == postgate.dtype == torch.bfloat16
    for impl in case.impls:
        impl.fn(*inputs)
        impl.fn(*inputs)
    # FlashFFTConv built once, at the causal FFT size 2N, in u's dtype.
    assert built == [(512, torch.bfloat16)]
    assert [c[0] for c in calls] == ["tk_ops"] * 2 + ["compiled"] * 2 + ["flash"] * 2
    for _, *args in calls:
        assert all(a is b for a, b in zip(args, inputs))
    out = case.impls[1].fn(*inputs)  # torch.fft: y in u's dtype and shape
    assert out.shape == u.shape and out.dtype == torch.bfloat16


@pytest.mark.parametrize("n, nk", [(64, 64), (100, 100), (100, 37)])
@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_torch_fft_formulation_matches_the_reference(n, nk, gated):
    """In float64 the formulation equals the reference's direct sum: it is the convolution tk_ops computes."""
    g = torch.Generator().manual_seed(n + nk + gated)
    u = torch.randn(2, 3, n, dtype=torch.float64, generator=g)
    k = torch.randn(3, nk, dtype=torch.float64, generator=g)
    gates = [torch.randn(2, 3, n, dtype=torch.float64, generator=g) if gated else None for _ in range(2)]
    expect = ref.fftconv(u, k, *gates, form="direct")
    got = fftconv.torch_fft(u, k, *gates)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expect, rtol=1e-10, atol=1e-10)


def test_torch_fft_formulation_in_bf16():
    """The benchmark's own inputs: bf16 out, within bf16 rounding of the float64 reference."""
    u, k, pregate, postgate = fftconv.make_inputs(512, 2, heads=4, gated=True, device="cpu")
    got = fftconv.torch_fft(u, k, pregate, postgate)
    assert got.dtype == torch.bfloat16
    assert core.rel_error(got, ref.fftconv(u, k, pregate, postgate)) < 1e-2


def test_backward_cases():
    forward, backward = fftconv.cases(), fftconv.cases(backward=True)
    assert [c.name for c in backward] == [c.name for c in forward]
    for f, b in zip(forward, backward):
        assert b.shape == f.shape and b.group == f.group + " fwd+bwd" and b.flops == pytest.approx(3 * f.flops)
        assert b.impls[0].name == "tk_ops" and b.impls[0].ours
        assert [i.name for i in b.impls] == [i.name for i in f.impls]


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_training_step_gives_the_reference_gradients(gated):
    """The timed function returns the gradients of u, k and the gates, given d_y: those of the float64 reference."""
    inputs = fftconv.make_inputs(64, 2, heads=3, gated=gated, backward=True, device="cpu")
    inputs = tuple(None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in inputs)
    leaves = [t for t in inputs[:-1] if t is not None]
    assert all(t.requires_grad for t in leaves) and not inputs[-1].requires_grad
    assert len(leaves) == (4 if gated else 2)
    grads = fftconv._training_step(fftconv.torch_fft)(*inputs)
    expect = torch.autograd.grad(ref.fftconv(*inputs[:4], form="direct"), leaves, inputs[-1])
    assert len(grads) == len(leaves)
    for got, want, leaf in zip(grads, expect, leaves):
        assert got.shape == leaf.shape
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "gated"])
def test_tk_ops_training_step_gives_the_reference_gradients(gated):
    """tk_ops's timed function runs its backward (on CPU stand-ins for the ops' kernels, as in test_fftconv_bwd_api.py)
    and returns the gradients of u, k and the gates in the order torch.fft's come."""
    skip_unless_built("the FFT convolution ops", "fftconv")
    from .test_fftconv_bwd_api import cpu_kernels
    inputs = fftconv.make_inputs(64, 2, heads=3, gated=gated, backward=True, device="cpu")
    leaves = [t.detach().double().requires_grad_() for t in inputs[:-1] if t is not None]
    args64 = iter(leaves)
    expect = torch.autograd.grad(ref.fftconv(*(None if t is None else next(args64) for t in inputs[:4]),
                                             form="direct"), leaves, inputs[-1].double())
    with cpu_kernels():
        grads = fftconv._training_step(fftconv._ours)(*inputs)
    assert len(grads) == len(expect)
    for got, want in zip(grads, expect):
        assert core.rel_error(got, want) < 1e-2


def fixed_timer(fn, arg_sets, calls, warmup, capture=True, profile=True):
    fn(*arg_sets[0])
    return core.Sample(2.0)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_refused_size_is_tk_ops_result_and_peers_still_run(backward, monkeypatch):
    """N = 2^20 + 1 is past what tk_ops.fftconv takes: its InputError (raised by the argument rules, on the CPU as on
    the GPU) becomes tk_ops's entry in the row, the peers are timed, and the table says why."""
    skip_unless_built("the FFT convolution ops", "fftconv")
    monkeypatch.setattr(fftconv, "_flash_class", lambda: None)
    monkeypatch.setattr(fftconv, "compiled_torch_fft", lambda: fftconv.torch_fft)  # no compiling on the CPU
    case = fftconv.fftconv_case((1 << 20) + 1, 1, backward=backward, heads=1, device="cpu")
    row = core.run_case(case, reps=2, warmup=1, l2_bytes=1 << 20, timer=fixed_timer)
    ours, peer = row.results["tk_ops"], row.results["torch.fft"]
    assert ours.ms is None and peer.ms == 2.0
    assert peer.tflops == pytest.approx(case.flops / 2e-3 / 1e12)
    assert ours.error.startswith("InputError") and "= 1048577 is longer than the longest sequence" in ours.error
    assert row.rel_err is None and row.ratio() is None
    assert row.results["torch.fft compiled"].passed and row.status == "unchecked" and core.failed([row])
    table = core.format_table([row])
    assert "errors:" in table and f"tk_ops: {ours.error}" in table
