"""The FFT convolution's backward without a GPU: the autograd formula (kernels/fftconv/autograd.cpp) on meta tensors
(which gradient reaches which input, with each gate present or absent and any set of inputs requiring one; the mask
fftconv_bwd is asked with), the backward op's rules (kernels/fftconv/binding.cpp), the refusal of gradients for the
cached spectrum; the cuFFT path's algorithm of the gradients (kernels/fftconv/fftconv_cufft.cpp), forced on CPU
tensors through tk_ops_testing, against autograd through the float64 reference; and the formula's values, opcheck and
torch.compile tracing on CPU stand-ins for the ops' kernels. The backward on our kernels (the time-reversed forward
for u and pregate, the forward with dy as postgate, the filter-gradient kernels) is tested on the GPU
(tests/gpu/ops/test_fftconv_bwd.py)."""
import itertools
from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tk_ops
from tk_ops import reference
from tk_ops._testing import fftconv as _testing_fftconv
from tk_ops.errors import DeviceMismatchError, InputError

from ..util import empty as t, skip_unless_built

GATES = {"none": (), "pre": ("pregate",), "post": ("postgate",), "both": ("pregate", "postgate")}
LEAVES = ("u", "k", "pregate", "postgate")


@pytest.fixture
def built():
    """The ops, their rules, Meta kernels and autograd formula are C++, registered when the extension loads."""
    skip_unless_built("the FFT convolution ops", "fftconv")


def meta_inputs(gates, b=3, h=4, n=100, nk=60, k_dtype=torch.float32, dtype=torch.bfloat16):
    """u, k and the gates named in `gates` (the others None), by name, on the meta device."""
    tensors = dict(u=t(b, h, n, dtype=dtype, device="meta"), k=t(h, nk, dtype=k_dtype, device="meta"),
                   pregate=None, postgate=None)
    for g in gates:
        tensors[g] = t(b, h, n, dtype=dtype, device="meta")
    return tensors


class BackwardCalls(TorchDispatchMode):
    """Records the output_mask of every fftconv_bwd call that reaches the dispatcher while active."""

    def __init__(self):
        super().__init__()
        self.masks = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.tk_ops.fftconv_bwd.default:
            self.masks.append(tuple(args[6]))
        return func(*args, **(kwargs or {}))


# ---------------------------------------------------------------- the autograd formula on meta tensors

def requires_grad_patterns(present):
    """Every non-empty subset of the present inputs, as the set of those requiring a gradient."""
    for r in range(1, len(present) + 1):
        yield from itertools.combinations(present, r)


@pytest.mark.parametrize("k_dtype", [torch.float32, torch.bfloat16], ids=["k_fp32", "k_bf16"])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
def test_autograd_hands_each_gradient_to_its_input(gates, k_dtype, built):
    # On meta tensors the ops' Meta kernels run, so the plumbing (which of the backward's results reaches which
    # input, with optional inputs absent, and what the backward op is asked for) is checked without a GPU.
    present = ("u", "k") + GATES[gates]
    for wanted in requires_grad_patterns(present):
        x = meta_inputs(GATES[gates], k_dtype=k_dtype)
        for name in wanted:
            x[name].requires_grad_()
        y = tk_ops.fftconv(x["u"], x["k"], x["pregate"], x["postgate"])
        assert y.shape == x["u"].shape and y.dtype == x["u"].dtype and y.requires_grad
        with BackwardCalls() as calls:
            grads = torch.autograd.grad(y, [x[name] for name in wanted], torch.empty_like(y))
        assert calls.masks == [tuple(name in wanted for name in LEAVES)], f"requires grad: {wanted}"
        for name, grad in zip(wanted, grads):
            assert grad.shape == x[name].shape and grad.dtype == x[name].dtype, f"d{name} of {wanted}"


@pytest.mark.parametrize("gates", ["none", "both"])
def test_backward_computes_only_what_is_asked_for(gates, built):
    """Inputs that require a gradient but are not among autograd.grad's inputs are not computed (dk costs FFTs)."""
    x = meta_inputs(GATES[gates])
    for name in ("u", "k") + GATES[gates]:
        x[name].requires_grad_()
    for asked in ("u", "k") + GATES[gates]:
        y = tk_ops.fftconv(x["u"], x["k"], x["pregate"], x["postgate"])
        with BackwardCalls() as calls:
            (grad,) = torch.autograd.grad(y, [x[asked]], torch.empty_like(y))
        assert calls.masks == [tuple(name == asked for name in LEAVES)]
        assert grad.shape == x[asked].shape


def test_no_gradient_needed_skips_the_formula(built):
    x = meta_inputs(("pregate", "postgate"))
    assert tk_ops.fftconv(x["u"], x["k"], x["pregate"], x["postgate"]).grad_fn is None
    with torch.no_grad():
        assert tk_ops.fftconv(x["u"].requires_grad_(), x["k"]).grad_fn is None


def test_cached_spectrum_passes_gradients_to_u_and_the_gates(built):
    """A k_f that requires no gradient: u and the gates get theirs (from the same spectrum), and the mask never asks
    for dk."""
    x = meta_inputs(("pregate", "postgate"), n=128)
    k_f = torch.ops.tk_ops.fftconv_spectrum(x["k"], 128)
    leaves = [x[name].requires_grad_() for name in ("u", "pregate", "postgate")]
    y = tk_ops.fftconv(x["u"], None, x["pregate"], x["postgate"], k_f=k_f)
    with BackwardCalls() as calls:
        grads = torch.autograd.grad(y, leaves, torch.empty_like(y))
    assert calls.masks == [(True, False, True, True)]
    assert all(g.shape == (3, 4, 128) for g in grads)


# ---------------------------------------------------------------- refusals and rules

def test_spectrum_that_requires_grad_is_refused(built):
    u, k = t(2, 4, 100), t(4, 100, dtype=torch.float32)
    k_f = t(4, 129, dtype=torch.complex64).requires_grad_()
    with pytest.raises(InputError, match="k_f, the filter's precomputed spectrum, gets no gradient.*pass k itself"):
        tk_ops.fftconv(u, None, k_f=k_f)
    with pytest.raises(InputError, match="the spectrum gets no gradient, so its filter may not require one"):
        tk_ops.fftconv_spectrum(k.requires_grad_(), 100)
    with torch.no_grad(), pytest.raises(DeviceMismatchError):  # inference: only the device rule is left
        tk_ops.fftconv(u, None, k_f=k_f)
    with torch.no_grad(), pytest.raises(DeviceMismatchError):
        tk_ops.fftconv_spectrum(k, 100)


def bwd(u, k, pregate=None, postgate=None, k_f=None, dy=None, mask=(True, True, False, False)):
    return torch.ops.tk_ops.fftconv_bwd(u, k, pregate, postgate, k_f, torch.empty_like(u) if dy is None else dy,
                                        list(mask))


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_backward_rules(device, built):
    u, k = t(2, 4, 100, device=device), t(4, 60, dtype=torch.float32, device=device)
    gate = t(2, 4, 100, device=device)
    with pytest.raises(ValueError, match=r"the output's gradient must have u's shape \(2, 4, 100\) and dtype "
                                         r"torch.bfloat16, got \(2, 4, 99\) torch.bfloat16"):
        bwd(u, k, dy=t(2, 4, 99, device=device))
    with pytest.raises(ValueError, match="the output's gradient must have u's shape .* got \\(2, 4, 100\\) torch.float16"):
        bwd(u, k, dy=t(2, 4, 100, dtype=torch.float16, device=device))
    with pytest.raises(ValueError, match="k_f, the filter's precomputed spectrum, gets no gradient"):
        bwd(u, None, k_f=t(4, 129, dtype=torch.complex64, device=device))
    with pytest.raises(ValueError, match="pregate's gradient was asked for without a pregate"):
        bwd(u, k, postgate=gate, mask=(True, False, True, False))
    with pytest.raises(ValueError, match="postgate's gradient was asked for without a postgate"):
        bwd(u, k, pregate=gate, mask=(False, False, False, True))
    with pytest.raises(ValueError, match="k's length Nk = 101 must be between 1"):  # the forward's rules too
        bwd(u, t(4, 101, dtype=torch.float32, device=device))


def test_backward_rejects_cpu_tensors(built):
    u, k = t(2, 4, 100), t(4, 60, dtype=torch.float32)
    refusal = r"^tk_ops.fftconv_bwd: tk_ops kernels run on CUDA tensors, but u is on cpu; move it with .cuda\(\)$"
    for mask in ((True, True, False, False), (False, True, False, False), (False, False, False, False)):
        with pytest.raises(ValueError, match=refusal):
            bwd(u, k, mask=mask)
    with pytest.raises(ValueError, match=refusal):
        bwd(t(0, 4, 100), k)


@pytest.mark.parametrize("mask", [(True, True, True, True), (False, True, False, False), (True, False, False, True)])
def test_backward_meta_shapes(mask, built):
    x = meta_inputs(("pregate", "postgate"), k_dtype=torch.bfloat16, dtype=torch.float16)
    grads = bwd(x["u"], x["k"], x["pregate"], x["postgate"], mask=mask)
    for wanted, grad, name in zip(mask, grads, LEAVES):
        like = x[name]
        if wanted:
            assert grad.shape == like.shape and grad.dtype == like.dtype and grad.is_contiguous(), name
        else:
            assert grad.shape == (0,), name


# ---------------------------------------------------------------- the cuFFT path's algorithm on the CPU

def fft_size(n):
    """The kernels' FFT size for length n <= 4096 (kernels/fftconv/fftconv_configs.cuh)."""
    size = 256
    while size < 2 * n:
        size *= 2
    return size


def correlation_size(n):
    """The cuFFT path's FFT size: the smallest power of two >= 2n."""
    size = 1
    while size < 2 * n:
        size *= 2
    return size


def problem(b, h, n, nk, gates, dtype=torch.bfloat16, k_dtype=torch.float32, seed=0):
    """u, k, the gates (around 1) and dy by name, as the GPU tests draw them."""
    gen = torch.Generator().manual_seed(seed)
    decay = torch.exp(-torch.arange(nk) / max(1.0, nk / 4))
    x = dict(u=torch.randn(b, h, n, generator=gen).to(dtype),
             k=(torch.randn(h, nk, generator=gen) * decay / nk ** 0.5).to(k_dtype), pregate=None, postgate=None)
    for g in gates:
        x[g] = (1 + 0.5 * torch.randn(b, h, n, generator=gen)).to(dtype)
    x["dy"] = torch.randn(b, h, n, generator=gen).to(dtype)
    return x


def reference_grads(x, names):
    leaves = {name: x[name].detach().double().requires_grad_() for name in names}
    args = [leaves.get(name, x[name]) for name in LEAVES]
    y = reference.fftconv(*args, form="direct")
    return dict(zip(names, torch.autograd.grad(y, [leaves[name] for name in names], x["dy"].double())))


def rel_err(got, want):
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


# By the gradient's dtype: 16-bit ones are fp32 results rounded once; an fp32 dk comes from exact fp32 products through
# fp32 FFTs. A wrong correlation, gate or lag is of order 1.
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}


def cufft_grads(x, mask, fft=None):
    """The gradients of the cuFFT path's algorithm (tk_ops_testing), by name, at fft (default: the op's size)."""
    n = x["u"].shape[-1]
    grads = _testing_fftconv.bwd_by_cufft(x["u"], x["k"], x["pregate"], x["postgate"], x["dy"], mask,
                                          correlation_size(n) if fft is None else fft)
    return dict(zip(LEAVES, grads))


@pytest.mark.parametrize("dtype, k_dtype", [(torch.bfloat16, torch.float32), (torch.float16, torch.bfloat16)],
                         ids=["bf16_k_fp32", "fp16_k_bf16"])
@pytest.mark.parametrize("n, nk", [(1, 1), (7, 7), (7, 3), (100, 100), (256, 40)])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
def test_cufft_backward_gives_the_reference_gradients(gates, n, nk, dtype, k_dtype, built):
    """The algorithm of the gradients past the block path (dv by a correlation in frequency, dpostgate, dk's sum over
    the batch), forced on short CPU sequences, against autograd through the float64 reference."""
    x = problem(3, 2, n, nk, GATES[gates], dtype, k_dtype)
    names = ("u", "k") + GATES[gates]
    want = reference_grads(x, names)
    got = cufft_grads(x, [name in names for name in LEAVES])
    for name in names:
        assert got[name].dtype == x[name].dtype and got[name].shape == x[name].shape and got[name].is_contiguous()
        err = rel_err(got[name], want[name])
        assert err <= TOL[x[name].dtype], f"d{name}: relative error {err:.2e}"


@pytest.mark.parametrize("fft", [200, 203, 1024])
def test_cufft_backward_at_any_size_without_wrapping(fft, built):
    """Every FFT size from 2N on gives the same gradients (the correlation and the convolution have no wrapped terms),
    and a smaller one is refused."""
    x = problem(2, 3, 100, 60, ("pregate", "postgate"), torch.float16)
    want = reference_grads(x, LEAVES)
    got = cufft_grads(x, [True] * 4, fft)
    for name in LEAVES:
        assert rel_err(got[name], want[name]) <= TOL[x[name].dtype], name
    with pytest.raises(ValueError, match="the FFT size 199 must be at least 2N = 200"):
        cufft_grads(x, [True] * 4, 199)


@pytest.mark.parametrize("asked", [("u",), ("k",), ("pregate",), ("postgate",), ("u", "postgate"), ("k", "pregate")])
def test_cufft_backward_computes_only_what_is_asked_for(asked, built):
    x = problem(3, 2, 50, 20, ("pregate", "postgate"))
    want = reference_grads(x, asked)
    got = cufft_grads(x, [name in asked for name in LEAVES])
    for name in LEAVES:
        if name in asked:
            assert rel_err(got[name], want[name]) <= TOL[x[name].dtype], name
        else:
            assert got[name].shape == (0,), name


def test_cufft_backward_takes_an_expanded_output_gradient(built):
    """y.sum() hands the backward an expanded (stride 0) dy."""
    x = problem(2, 3, 50, 50, ("pregate", "postgate"))
    x["dy"] = torch.ones(1, 1, 1, dtype=torch.bfloat16).expand(2, 3, 50)
    want = reference_grads(x, LEAVES)
    got = cufft_grads(x, [True] * 4)
    for name in LEAVES:
        assert rel_err(got[name], want[name]) <= TOL[x[name].dtype], name


def test_cufft_backward_of_an_empty_batch(built):
    x = problem(0, 2, 50, 20, ("pregate",))
    got = cufft_grads(x, [True, True, True, False])
    assert got["u"].shape == got["pregate"].shape == (0, 2, 50)
    assert torch.equal(got["k"], torch.zeros(2, 20))


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_cufft_backward_gives_the_same_under_a_dispatch_mode(built):
    """torch.compile's AOT path calls the op from a Python dispatch mode's handler, where a lazily conjugated
    spectrum once lost its conjugation (dk was the convolution instead of the correlation)."""
    x = problem(3, 2, 20, 9, ("pregate", "postgate"))
    eager = cufft_grads(x, [True] * 4)
    with PassThrough():
        moded = cufft_grads(x, [True] * 4)
    for name in LEAVES:
        assert torch.equal(eager[name], moded[name]), f"d{name}"


def test_opcheck_cufft_backward(built):
    """Schema and fake-vs-real metadata of the internal op, whose outputs the public backward's Meta kernel shapes."""
    x = problem(3, 2, 20, 9, ("pregate", "postgate"))
    args = (x["u"], x["k"], x["pregate"], x["postgate"], x["dy"])
    for mask in ([True, True, True, True], [False, True, False, True]):
        torch.library.opcheck(torch.ops.tk_ops_testing.fftconv_bwd_by_cufft, (*args, mask, 64))


# ---------------------------------------------------------------- the public ops on CPU stand-ins

def _standin_spectrum(k, n):
    return torch.fft.rfft(k.double(), n=fft_size(n)).to(torch.complex64)


def _standin_forward(u, k, pregate=None, postgate=None, k_f=None):
    """What the CUDA forward computes, in float64 through the kernels' FFT size and spectrum layout, rounded once."""
    n = u.shape[-1]
    spectrum = _standin_spectrum(k, n) if k_f is None else k_f
    v = u.double() if pregate is None else u.double() * pregate.double()
    y = torch.fft.irfft(torch.fft.rfft(v, n=fft_size(n)) * spectrum.to(torch.complex128), n=fft_size(n))[..., :n]
    return (y if postgate is None else y * postgate.double()).to(u.dtype)


def _standin_backward(u, k, pregate, postgate, k_f, dy, output_mask):
    """The gradients by the cuFFT path's algorithm (which takes k: enough for the calls below, which all pass it)."""
    return tuple(_testing_fftconv.bwd_by_cufft(u, k, pregate, postgate, dy, output_mask, fft_size(u.shape[-1])))


@contextmanager
def cpu_kernels():
    """CPU stand-ins for the forward, spectrum and backward ops' kernels, registered for the duration of the block: the
    autograd formula, opcheck and torch.compile then run on the CPU."""
    lib = torch.library.Library("tk_ops", "IMPL")
    try:
        torch.library.register_kernel("tk_ops::fftconv_fwd", "cpu", _standin_forward, lib=lib)
        torch.library.register_kernel("tk_ops::fftconv_spectrum", "cpu", _standin_spectrum, lib=lib)
        torch.library.register_kernel("tk_ops::fftconv_bwd", "cpu", _standin_backward, lib=lib)
        yield
    finally:
        lib._destroy()


@pytest.mark.parametrize("gates", GATES, ids=GATES)
def test_autograd_formula_on_cpu_standins_gives_the_reference_gradients(gates, built):
    """Values, not only shapes (the meta tests above): the formula hands dy and the saved inputs to the backward op and
    each of its results to its input."""
    x = problem(3, 2, 100, 30, GATES[gates])
    names = ("u", "k") + GATES[gates]
    want = reference_grads(x, names)
    with cpu_kernels():
        leaves = [x[name].requires_grad_() for name in names]
        y = tk_ops.fftconv(x["u"], x["k"], x["pregate"], x["postgate"])
        got = dict(zip(names, torch.autograd.grad(y, leaves, x["dy"])))
    for name in names:
        assert got[name].dtype == x[name].dtype and got[name].shape == x[name].shape
        assert rel_err(got[name], want[name]) <= TOL[x[name].dtype], name


def test_opcheck_ops(built):
    """Schema, fake-vs-real metadata, autograd registration and AOT dispatch (torch.compile's path) of the forward,
    differentiated, and of the backward op, on the CPU stand-ins."""
    x = problem(3, 2, 20, 9, ("pregate", "postgate"))
    with cpu_kernels():
        args = [x[name].requires_grad_() for name in LEAVES]
        torch.library.opcheck(torch.ops.tk_ops.fftconv_fwd, (*args, None))
        torch.library.opcheck(torch.ops.tk_ops.fftconv_fwd, (args[0], args[1], None, args[3], None))
        plain = [a.detach() for a in args]
        torch.library.opcheck(torch.ops.tk_ops.fftconv_bwd, (*plain, None, x["dy"], [True, True, True, True]))
        torch.library.opcheck(torch.ops.tk_ops.fftconv_bwd, (*plain, None, x["dy"], [False, True, False, True]))


def test_compiled_forward_and_backward_trace(built):
    """torch.compile(fullgraph=True) traces the forward and the C++ formula's backward op; results equal eager."""
    x = problem(2, 3, 40, 40, ("pregate", "postgate"))

    def loss(u, k, pregate, postgate):
        return tk_ops.fftconv(u * 2, k, pregate, postgate).float().square().sum()

    with cpu_kernels():
        leaves = [x[name].requires_grad_() for name in LEAVES]
        eager = torch.autograd.grad(loss(*leaves), leaves)
        compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
        got = torch.autograd.grad(compiled(*leaves), leaves)
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e)
