"""The float64 references of the FFT convolution (tk_ops.reference.fftconv) against each other and against
hand-written sums: the direct and FFT forms agree, gating follows y = postgate * conv(u * pregate), the cached
spectrum gives the same result, the Monarch factorisation of the DFT equals torch.fft.fft, and the convolution
is linear, causal and differentiable. CPU only and small, so it runs everywhere."""
import itertools
import math

import pytest
import torch

from tk_ops.reference.fftconv import DIRECT_MAX_N, dft_matrix, fftconv, fftconv_spectrum, monarch_fft


@pytest.fixture(autouse=True)
def one_thread():
    """The tensors here are tiny: more threads only add OpenMP hand-offs, which stall when the cores are busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def make(b, h, n, nk, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(b, h, n, generator=g, dtype=dtype)
    k = torch.randn(h, nk, generator=g, dtype=dtype)
    return u, k


def gates(b, h, n, which, seed=1):
    g = torch.Generator().manual_seed(seed)
    pre = torch.randn(b, h, n, generator=g, dtype=torch.float64) if which in ("pre", "both") else None
    post = torch.randn(b, h, n, generator=g, dtype=torch.float64) if which in ("post", "both") else None
    return pre, post


def loop_conv(u, k, pre=None, post=None):
    """The definition, one term at a time."""
    b, h, n = u.shape
    y = torch.zeros(b, h, n, dtype=torch.float64)
    for bi, hi, i in itertools.product(range(b), range(h), range(n)):
        acc = 0.0
        for m in range(min(i + 1, k.shape[1])):
            v = u[bi, hi, i - m].item() * (1.0 if pre is None else pre[bi, hi, i - m].item())
            acc += k[hi, m].item() * v
        y[bi, hi, i] = acc * (1.0 if post is None else post[bi, hi, i].item())
    return y


CASES = sorted({(n, nk) for n in (1, 7, 256, 1000) for nk in (1, max(1, n // 3), n)})


@pytest.mark.parametrize("n,nk", CASES)
def test_direct_equals_fft(n, nk):
    u, k = make(2, 3, n, nk)
    direct = fftconv(u, k, form="direct")
    fft = fftconv(u, k, form="fft")
    assert direct.dtype == fft.dtype == torch.float64 and direct.shape == (2, 3, n)
    assert rel(fft, direct) < 1e-10


@pytest.mark.parametrize("which", ["none", "pre", "post", "both"])
def test_hand_written_loop(which):
    u, k = make(2, 3, 9, 4, seed=2)
    pre, post = gates(2, 3, 9, which)
    expected = loop_conv(u, k, pre, post)
    for form in ("direct", "fft"):
        assert rel(fftconv(u, k, pre, post, form=form), expected) < 1e-12, form


def test_hand_written_values():
    # Filter [1, 2] on [1, 10, 100]: y = [1, 10 + 2, 100 + 20]; the second channel's filter is a delay by one.
    u = torch.tensor([[[1.0, 10.0, 100.0], [1.0, 2.0, 3.0]]])
    k = torch.tensor([[1.0, 2.0], [0.0, 1.0]])
    expected = torch.tensor([[[1.0, 12.0, 120.0], [0.0, 1.0, 2.0]]], dtype=torch.float64)
    for form in ("direct", "fft"):
        assert torch.allclose(fftconv(u, k, form=form), expected, rtol=0, atol=1e-12), form


@pytest.mark.parametrize("which", ["pre", "post", "both"])
@pytest.mark.parametrize("n,nk", [(256, 85), (1000, 1000)])
def test_gating(which, n, nk):
    u, k = make(2, 3, n, nk, seed=3)
    pre, post = gates(2, 3, n, which)
    gated = fftconv(u, k, pre, post, form="direct")
    assert rel(fftconv(u, k, pre, post, form="fft"), gated) < 1e-10
    # The pre-gate acts on the input of the convolution, the post-gate on its output.
    inner = fftconv(u if pre is None else u * pre, k, form="fft")
    assert rel(gated, inner if post is None else inner * post) < 1e-10
    assert rel(gated, fftconv(u, k)) > 0.1


def test_default_form():
    u, k = make(1, 2, 7, 3)
    assert torch.equal(fftconv(u, k), fftconv(u, k, form="direct"))
    u, k = make(1, 2, DIRECT_MAX_N + 1, 5)
    assert torch.equal(fftconv(u, k), fftconv(u, k, form="fft"))


def test_inputs_in_other_dtypes():
    u, k = make(2, 3, 50, 20, dtype=torch.float32)
    y = fftconv(u.bfloat16(), k)
    assert y.dtype == torch.float64 and y.device == u.device
    assert rel(y, fftconv(u.bfloat16().double(), k.double())) == 0.0


def test_spectrum_layout():
    h, n, nk = 2, 5, 3
    _, k = make(1, h, n, nk)
    spec = fftconv_spectrum(k, n)
    assert spec.shape == (h, n + 1) and spec.dtype == torch.complex128
    j = torch.arange(n + 1, dtype=torch.float64)[:, None]
    m = torch.arange(nk, dtype=torch.float64)[None, :]
    basis = torch.polar(torch.ones(n + 1, nk, dtype=torch.float64), -2 * math.pi * j * m / (2 * n))
    assert rel(spec, k.to(torch.complex128) @ basis.T) < 1e-13


@pytest.mark.parametrize("n,nk", [(1, 1), (7, 7), (1000, 333), (2048, 2048)])
@pytest.mark.parametrize("which", ["none", "both"])
def test_spectrum_path_equals_plain_path(n, nk, which):
    u, k = make(2, 3, n, nk, seed=4)
    pre, post = gates(2, 3, n, which)
    k_f = fftconv_spectrum(k, n)
    plain = fftconv(u, k, pre, post)
    assert rel(fftconv(u, None, pre, post, k_f=k_f), plain) < 1e-10
    assert rel(fftconv(u, k, pre, post, k_f=k_f), plain) < 1e-10


def test_linearity():
    u1, k1 = make(2, 3, 300, 100, seed=5)
    u2, k2 = make(2, 3, 300, 100, seed=6)
    for form in ("direct", "fft"):
        y = fftconv(2.5 * u1 - 0.5 * u2, k1, form=form)
        assert rel(y, 2.5 * fftconv(u1, k1, form=form) - 0.5 * fftconv(u2, k1, form=form)) < 1e-12
        y = fftconv(u1, 3 * k1 + k2, form=form)
        assert rel(y, 3 * fftconv(u1, k1, form=form) + fftconv(u1, k2, form=form)) < 1e-12


@pytest.mark.parametrize("form", ["direct", "fft"])
def test_causal(form):
    n, n0 = 200, 120
    u, k = make(2, 3, n, n)
    y = fftconv(u, k, form=form)
    u2 = u.clone()
    u2[..., n0] += 10.0
    y2 = fftconv(u2, k, form=form)
    past = (y2[..., :n0] - y[..., :n0]).abs().max().item()
    assert past == 0.0 if form == "direct" else past < 1e-12 * y.abs().max().item()
    # From n0 on, the change is exactly 10 * k shifted to n0 (and zero past the filter's end).
    delta = y2[..., n0:] - y[..., n0:]
    expected = 10.0 * k[None, :, : n - n0].expand(2, -1, -1)
    assert rel(delta, expected) < 1e-10


@pytest.mark.parametrize("form", ["direct", "fft"])
def test_gradcheck(form):
    u, k = make(2, 2, 6, 4, seed=7)
    pre, post = gates(2, 2, 6, "both")
    inputs = tuple(t.clone().requires_grad_() for t in (u, k, pre, post))
    assert torch.autograd.gradcheck(lambda a, b, c, d: fftconv(a, b, c, d, form=form), inputs)


def test_gradcheck_spectrum_path():
    u, k = make(1, 2, 5, 5, seed=8)
    k = k.requires_grad_()
    assert torch.autograd.gradcheck(lambda kk: fftconv(u, None, k_f=fftconv_spectrum(kk, 5)), (k,))


def test_errors():
    u, k = make(2, 3, 8, 4)
    with pytest.raises(ValueError, match="between 1 and N"):
        fftconv(u, torch.zeros(3, 9))
    with pytest.raises(ValueError, match="H = 3"):
        fftconv(u, torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"\(B, H, N\)"):
        fftconv(u[0], k)
    with pytest.raises(ValueError, match="pregate"):
        fftconv(u, k, pregate=u[:, :, :4])
    with pytest.raises(ValueError, match="N \\+ 1"):
        fftconv(u, None, k_f=fftconv_spectrum(k, 4))
    with pytest.raises(ValueError, match="form"):
        fftconv(u, None, k_f=fftconv_spectrum(k, 8), form="direct")
    with pytest.raises(ValueError, match="k_f"):
        fftconv(u, None)
    with pytest.raises(ValueError, match="multiply"):
        monarch_fft(torch.zeros(12), [3, 5])


@pytest.mark.parametrize("factors", [(16, 16), (16, 16, 16), (32, 16), (16, 32), (8, 4, 2), (7,)])
@pytest.mark.parametrize("inverse", [False, True])
def test_monarch_fft_equals_torch(factors, inverse):
    n = math.prod(factors)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(3, 2, n, dtype=torch.complex128, generator=g)
    expected = torch.fft.ifft(x) if inverse else torch.fft.fft(x)
    assert rel(monarch_fft(x, factors, inverse=inverse), expected) < 1e-12


def test_monarch_fft_of_real_input():
    x = torch.randn(4, 256, dtype=torch.float64)
    y = monarch_fft(x, (16, 16))
    assert y.dtype == torch.complex128 and rel(y, torch.fft.fft(x)) < 1e-12


def test_dft_matrix():
    f = dft_matrix(12)
    assert rel(f, torch.fft.fft(torch.eye(12, dtype=torch.complex128), dim=0)) < 1e-14
    assert rel(f @ dft_matrix(12, inverse=True) / 12, torch.eye(12, dtype=torch.complex128)) < 1e-14


def test_conv_through_monarch_with_packed_real_inputs():
    """The convolution the way the kernels plan it: two real sequences of one channel become the real and
    imaginary parts of one complex sequence (the filter is real, so the two results come back in the real and
    imaginary parts), zero-padded to 2N, transformed by the Monarch FFT, multiplied by the filter's full 2N-point
    spectrum, transformed back, truncated to N."""
    b, h, n, nk = 4, 3, 128, 100
    u, k = make(b, h, n, nk, seed=10)
    z = torch.complex(u[0::2], u[1::2])                      # (B / 2, H, N)
    z = torch.nn.functional.pad(z, (0, n))                   # (B / 2, H, 2N)
    k_full = monarch_fft(torch.nn.functional.pad(k, (0, 2 * n - nk)), (16, 16))
    w = monarch_fft(monarch_fft(z, (16, 16)) * k_full, (16, 16), inverse=True)[..., :n]
    y = torch.stack((w.real, w.imag), dim=1).reshape(b, h, n)  # interleave the pairs back into the batch
    assert rel(y, fftconv(u, k, form="direct")) < 1e-12


def test_backward_in_spectral_form():
    """The gradients as the backward kernels plan to compute them, against autograd on the direct form. With
    v = u * pregate, K = rfft(k, 2N) and g = dy * postgate: dv = irfft(rfft(g, 2N) * conj(K))[:N] (a correlation,
    the adjoint of the causal convolution), du = dv * pregate, dpregate = dv * u, dpostgate = dy * conv(v, k),
    dk = sum over the batch of irfft(rfft(g, 2N) * conj(rfft(v, 2N)))[:Nk]."""
    b, h, n, nk = 3, 2, 40, 25
    u, k = make(b, h, n, nk, seed=11)
    pre, post = gates(b, h, n, "both")
    dy = torch.randn(b, h, n, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    leaves = [t.clone().requires_grad_() for t in (u, k, pre, post)]
    fftconv(*leaves, form="direct").backward(dy)

    spec = lambda t: torch.fft.rfft(t, n=2 * n)  # noqa: E731
    back = lambda t, m: torch.fft.irfft(t, n=2 * n)[..., :m]  # noqa: E731
    v, g = u * pre, dy * post
    dv = back(spec(g) * spec(k).conj(), n)
    expected = (dv * pre, back(spec(g) * spec(v).conj(), nk).sum(0), dv * u, dy * fftconv(v, k, form="fft"))
    for name, leaf, want in zip(("du", "dk", "dpregate", "dpostgate"), leaves, expected):
        assert rel(leaf.grad, want) < 1e-10, name
