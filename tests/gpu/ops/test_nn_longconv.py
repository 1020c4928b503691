"""tk_ops.nn.LongConv on the GPU: the forward against a float64 composition of the documented math (the windowed
first N taps of the filter, tk_ops.reference.fftconv, the skip term D * v added after the convolution, the gates) for
lengths 1 .. 4096 (on chip), on the block path past them and on cuFFT past 65536 up to the longest sequence the op
takes, shorter and full-length sequences, every set of gates, bf16 and fp16; a prefix of a sequence gives the prefix
of the output; the gradients of every parameter, the input and the gates against float64 autograd through the
composition; torch.compile(fullgraph=True) of the module, forward and backward. The windows decay slowly, so that
every block of the filter's taps weighs in the output. Outputs and gradients are compared per position and per
channel (assert_close's rows both ways). The module's plumbing is also tested without a GPU
(tests/cpu/test_nn_longconv.py). Skipped unless the 'fftconv' family is in the build."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.fftconv import fftconv as conv_ref

from ...util import requires_families
from ..util import ROW_SLACK, TOL as ROUNDED_ONCE, assert_close, fresh_pool_with_nan, rel_err
from .test_fftconv import BLOCKS_LEN, FP32_FFT, max_len as op_max_len

# ||out - ref|| / ||ref|| by the input's dtype, that of the fftconv kernels' arithmetic, up to BLOCKS_LEN. The output,
# every gradient (the float32 parameters' through the filter gradient, then the window in fp32) come out of those
# kernels, whose bf16 / fp16 rounding reaches about 6e-3 / 6e-4 (docs/fftconv.md), plus at most one 16-bit product:
# the op's own bounds hold. Past BLOCKS_LEN the op computes in fp32 (cuFFT) and rounds once to each result's dtype
# (bound()): the float32 parameters' gradients measured 3e-7 there with an fp32 FFT convolution on the CPU. A wrong
# tap, window or gate is of order 1.
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# The same kernels under torch.compile, where inductor fuses the filter's elementwise work and the loss's.
COMPILE_TOL = 5e-3
GATES = {"none": (), "pre": ("pregate",), "post": ("postgate",), "both": ("pregate", "postgate")}
DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]

pytestmark = requires_families("fftconv")


def bound(n, dtype, compute):
    """The relative error allowed a result of `dtype` (the output, a gradient) at length n, inputs of dtype
    `compute` (TOL)."""
    if n > BLOCKS_LEN:
        return FP32_FFT if dtype == torch.float32 else ROUNDED_ONCE[dtype]
    return TOL[compute]


def assert_both_ways(out, ref, tol, what):
    """out matches ref as a whole and per row both ways: a (B, N, d_model) tensor per position (its own rows) and per
    channel (a whole sequence), the filter (d_model, max_len) per channel and per tap; a vector is one row."""
    assert_close(out, ref, tol, what)
    if out.dim() > 1:
        assert_close(out.transpose(-1, -2), ref.transpose(-1, -2), tol, f"{what} (rows transposed)")


def make_module(d_model, max_len, seed=0):
    """A module whose every parameter shows in the output: a larger filter, varied skip weights, and decay rates
    spread from 0.05 to 3 (a window still 0.95 to 0.05 at the last tap, against 1e-2 already at 0.3 - 1.5 max_len
    for the module's initial ones), so that the far taps, every block of them past 4096, weigh in the output."""
    torch.manual_seed(seed)
    m = tk_ops.nn.LongConv(d_model, max_len, device="cuda")
    with torch.no_grad():
        m.k.mul_(3.0)
        m.log_decay.uniform_(math.log(0.05), math.log(3.0))
        m.D.normal_(1.0, 0.5)
    return m


def inputs(b, n, h, gates=(), dtype=torch.bfloat16, seed=1):
    """u and the named gates (around 1; the others None) as (B, N, d_model), and an output gradient dy."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = dict(u=torch.randn(b, n, h, device="cuda", generator=gen).to(dtype), pregate=None, postgate=None)
    for g in gates:
        x[g] = (1 + 0.5 * torch.randn(b, n, h, device="cuda", generator=gen)).to(dtype)
    x["dy"] = torch.randn(b, n, h, device="cuda", generator=gen).to(dtype)
    return x


def composition(params, u, pregate, postgate, max_len):
    """The module's documented math in float64 on (B, N, d_model) tensors, the skip term outside the convolution."""
    n = u.shape[1]
    t = torch.arange(n, device=u.device, dtype=torch.float64) / max_len
    k_eff = params["k"][:, :n] * torch.exp(-torch.exp(params["log_decay"])[:, None] * t)
    u_t = u.transpose(1, 2)
    pregate_t = None if pregate is None else pregate.transpose(1, 2)
    v = u_t if pregate is None else u_t * pregate_t
    y = (conv_ref(u_t, k_eff, pregate_t) + params["D"][:, None] * v).transpose(1, 2)
    return y if postgate is None else y * postgate


def reference(m, x, names=()):
    """The composition's output, and with `names` its gradients (dy = x["dy"]) of those parameters and inputs."""
    params = {name: p.detach().double().requires_grad_() for name, p in m.named_parameters()}
    leaves = {name: x[name].detach().double().requires_grad_() for name in ("u", "pregate", "postgate")
              if x[name] is not None}
    y = composition(params, leaves["u"], leaves.get("pregate"), leaves.get("postgate"), m.max_len)
    if not names:
        return y.detach(), {}
    every = {**params, **leaves}
    return y.detach(), dict(zip(names, torch.autograd.grad(y, [every[n] for n in names], x["dy"].double())))


@pytest.mark.parametrize("n, max_len", [(1, 1), (1, 64), (7, 64), (100, 256), (1000, 1024), (1024, 1024),
                                        (3000, 4096), (4096, 4096)])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_the_composition(dtype, gates, n, max_len):
    m = make_module(16, max_len, seed=n)
    x = inputs(3, n, 16, GATES[gates], dtype)
    fresh_pool_with_nan(8 * x["u"].numel(), dtype)
    with torch.no_grad():
        y = m(x["u"], x["pregate"], x["postgate"])
    torch.cuda.synchronize()
    assert y.shape == x["u"].shape and y.dtype == dtype
    assert_both_ways(y, reference(m, x)[0], TOL[dtype], f"N={n} {gates}")


def rms(t):
    return t.double().square().mean().sqrt().item()


def test_a_prefix_gives_the_prefix_of_the_output():
    """Causal, and a shorter sequence uses the same first taps: the output of u[:, :n] is that of u, cut at n. Both
    sides carry the kernels' error; the full output's is spread over its positions at its own scale, which the first
    positions (before the slowly decaying filter has gathered its taps) fall below (by 2.2x at n = 1), so the bound
    is TOL for the part plus TOL scaled by that ratio for the full output. A wrong tap or time scale is of order 1."""
    m = make_module(32, 2048)
    x = inputs(2, 2048, 32, ("pregate", "postgate"))
    with torch.no_grad():
        full = m(x["u"], x["pregate"], x["postgate"])
        for n in (1, 300, 1024, 1500):
            part = m(x["u"][:, :n], x["pregate"][:, :n], x["postgate"][:, :n])
            tol = TOL[torch.bfloat16] * (1 + rms(full) / rms(full[:, :n]))
            assert_both_ways(part, full[:, :n], tol, f"n = {n}")


def check_output_and_gradients(m, x, gates, what):
    """The module's output and the gradients of its parameters, u and the gates in `gates` against the composition's,
    each within its bound (bound()), outputs poisoned before both passes."""
    n, dtype = x["u"].shape[1], x["u"].dtype
    inputs_with_grad = ("u",) + gates
    names = ("k", "log_decay", "D") + inputs_with_grad
    leaves = {name: x[name].detach().requires_grad_() for name in inputs_with_grad}
    fresh_pool_with_nan(8 * x["u"].numel(), dtype)
    y = m(leaves["u"], leaves.get("pregate"), leaves.get("postgate"))
    fresh_pool_with_nan(8 * x["u"].numel(), dtype)
    got = torch.autograd.grad(y, [*m.parameters(), *leaves.values()], x["dy"])
    torch.cuda.synchronize()
    y_ref, want = reference(m, x, names)
    assert y.shape == x["u"].shape and y.dtype == dtype, f"{what}: y {y.shape} {y.dtype}"
    assert_both_ways(y, y_ref, bound(n, dtype, dtype), f"{what} y")
    for name, grad in zip(names, got):
        like = getattr(m, name) if name in ("k", "log_decay", "D") else x[name]
        assert grad.shape == like.shape and grad.dtype == like.dtype, f"{what} d{name}: {grad.shape} {grad.dtype}"
        if name == "log_decay":
            assert_decay_gradient(m, grad, want, n, bound(n, grad.dtype, dtype), f"{what} d{name}")
        else:
            assert_both_ways(grad, want[name], bound(n, grad.dtype, dtype), f"{what} d{name}")


def assert_decay_gradient(m, got, want, n, tol, what):
    """d log_decay[c] = sum over taps m of dL/dk[c, m] k[c, m] (-decay[c] t_m): a sum of terms of both signs, which
    can cancel far below the terms themselves, while the kernels' rounding of dL/dk is relative to the terms. So each
    channel's error is measured against the larger of its value and the root-sum-square of its terms (the size of
    that rounding's random walk); a wrong window, tap or time scale changes the terms by order 1 and still fails."""
    t = torch.arange(n, device=got.device, dtype=torch.float64) / m.max_len
    decay = torch.exp(m.log_decay.detach().double())
    terms = want["k"][:, :n] * m.k.detach().double()[:, :n] * decay[:, None] * t
    scale = torch.maximum(want["log_decay"].abs(), terms.norm(dim=1)).clamp_min(1e-300)
    diff = got.double() - want["log_decay"]
    assert torch.isfinite(got).all(), f"{what}: not finite"
    whole = float(diff.norm() / scale.norm())
    assert whole <= tol, f"{what}: off by {whole:.3e} of max(|value|, ||terms||) over the channels > {tol:.1e}"
    err = diff.abs() / scale
    worst = int(err.argmax())
    assert err[worst] <= ROW_SLACK * tol, (
        f"{what}: channel {worst} off by {float(err[worst]):.3e} of max(|value|, ||terms||) > {ROW_SLACK * tol:.1e}")


@pytest.mark.parametrize("n, max_len", [(1, 16), (100, 100), (700, 1024), (4096, 4096)])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_match_the_composition(dtype, gates, n, max_len):
    m = make_module(16, max_len, seed=n)
    x = inputs(3, n, 16, GATES[gates], dtype, seed=max_len)
    check_output_and_gradients(m, x, GATES[gates], f"N={n} {gates}")


@pytest.mark.parametrize("n, max_len", [(4097, 8192), (8192, 8192), (20000, 32768), (65536, 65536), (65537, 70000),
                                        (100000, 2 ** 17), ("max", "max")])
@pytest.mark.parametrize("gates", ["none", "both"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_long_sequences(dtype, gates, n, max_len):
    """Past 4096 tokens: the block path up to 65536 (2 .. 16 blocks of 4096, the last one a single token at 4097 and
    65537) and cuFFT past it, up to the op's longest sequence, sequences shorter than and as long as max_len; the
    output and every gradient."""
    n = op_max_len() if n == "max" else n
    max_len = op_max_len() if max_len == "max" else max_len
    m = make_module(16, max_len, seed=n)
    x = inputs(2 if n <= 2 ** 17 else 1, n, 16, GATES[gates], dtype, seed=max_len)
    check_output_and_gradients(m, x, GATES[gates], f"N={n} max_len={max_len} {gates}")


def test_compiles_fullgraph_forward_and_backward():
    m = make_module(32, 1024)
    x = inputs(2, 1000, 32, ("pregate", "postgate"))
    weights = x["dy"].float()

    def loss(module, u, pregate, postgate):
        return (module(u, pregate, postgate).float() * weights).sum()

    def grads_of(module):
        leaves = [x[name].detach().clone().requires_grad_() for name in ("u", "pregate", "postgate")]
        params = list(m.parameters())
        return torch.autograd.grad(loss(module, *leaves), params + leaves)

    names = ("k", "log_decay", "D", "u", "pregate", "postgate")
    eager = grads_of(m)
    compiled = grads_of(torch.compile(m, fullgraph=True))
    _, want = reference(m, dict(x, dy=weights), names)
    for name, c, e in zip(names, compiled, eager):
        assert_both_ways(c, want[name], TOL[x["u"].dtype], f"compiled d{name}")
        diff = rel_err(c, e)
        assert diff <= COMPILE_TOL, f"d{name}: compiled differs from eager by {diff:.2e}"
    with torch.no_grad():
        y_compiled = torch.compile(m, fullgraph=True)(x["u"], x["pregate"], x["postgate"])
    assert_both_ways(y_compiled, reference(m, x)[0], TOL[torch.bfloat16], "compiled y")
