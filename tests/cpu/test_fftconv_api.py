"""FFT convolution API checks that need no GPU: the ops' argument rules (kernels/fftconv/binding.cpp, run by their CPU
and Meta kernels as by the CUDA ones), the Meta kernels' output shapes, and the Python wrapper's own checks (argument
types). The backward's are in test_fftconv_bwd_api.py."""
import pytest
import torch

import tk_ops
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError

from ..util import empty as t, skip_unless_built


@pytest.fixture
def built():
    """The ops and their rules are C++, registered when the extension loads (no GPU needed)."""
    skip_unless_built("the FFT convolution ops", "fftconv")


def conv_args(b=2, h=4, n=100, nk=100, dtype=torch.bfloat16, k_dtype=torch.float32, device="cpu"):
    """u, k of a valid problem."""
    return t(b, h, n, dtype=dtype, device=device), t(h, nk, dtype=k_dtype, device=device)


# ---------------------------------------------------------------- argument rules (through the CPU kernel)

@pytest.mark.parametrize("make, kind, match", [
    (lambda: conv_args(dtype=torch.float32), DTypeError, "u must be bfloat16 or float16, got torch.float32"),
    (lambda: conv_args(k_dtype=torch.float64), DTypeError, r"k must be float32 \(or bfloat16 / float16\), got torch.float64"),
    (lambda: (t(4, 100), t(4, 100, dtype=torch.float32)), InputError, r"u must be 3-D \(batch, channels, seq_len\)"),
    (lambda: (t(2, 4, 0), t(4, 1, dtype=torch.float32)), InputError, "sequence length N .* must be at least 1, got 0"),
    (lambda: conv_args(b=1, h=1, n=(1 << 20) + 1, nk=10), InputError,
     r"N \(u's last dimension\) = 1048577 is longer than the longest sequence supported, 1048576"),
    (lambda: conv_args(nk=101), InputError, "k's length Nk = 101 must be between 1 and the sequence length N = 100"),
    (lambda: conv_args(nk=0), InputError, "k's length Nk = 0 must be between 1"),
    (lambda: (t(2, 4, 100), t(3, 100, dtype=torch.float32)), InputError,
     r"k must be \(H, Nk\) with u's H = 4 channels, got shape \(3, 100\)"),
    (lambda: (t(2, 4, 100), t(4, 1, 100, dtype=torch.float32)), InputError, r"k must be \(H, Nk\)"),
    (lambda: (t(2, 4, 100), None), InputError, "pass exactly one of the filter k and its spectrum k_f, got neither"),
])
def test_rejects_inputs(make, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.fftconv(*make())


@pytest.mark.parametrize("kwargs, kind, match", [
    (dict(pregate=t(2, 4, 99)), InputError, r"pregate must have u's shape \(2, 4, 100\), got \(2, 4, 99\)"),
    (dict(postgate=t(2, 4, 100, dtype=torch.float16)), DTypeError,
     "postgate must have u's dtype torch.bfloat16, got torch.float16"),
    (dict(k_f=t(4, 129, dtype=torch.complex64)), InputError, "pass exactly one of the filter k and its spectrum k_f, got both"),
])
def test_rejects_options(kwargs, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.fftconv(*conv_args(), **kwargs)


@pytest.mark.parametrize("k_f, kind, match", [
    (t(4, 129, dtype=torch.complex128), DTypeError, "k_f must be complex64, as tk_ops.fftconv_spectrum returns it"),
    (t(4, 101, dtype=torch.complex64), InputError,
     r"k_f must be \(H, L / 2 \+ 1\) = \(4, 129\) for sequences of length N = 100 \(FFT size L = 256\)"),
    (t(3, 129, dtype=torch.complex64), InputError, r"k_f must be \(H, L / 2 \+ 1\) = \(4, 129\)"),
])
def test_rejects_spectra(k_f, kind, match, built):
    u, _ = conv_args()
    with pytest.raises(kind, match=match):
        tk_ops.fftconv(u, None, k_f=k_f)


@pytest.mark.parametrize("k, n, kind, match", [
    (t(4, 10, dtype=torch.float32), 0, InputError, "sequence length n must be at least 1, got 0"),
    (t(4, 10, dtype=torch.float32), (1 << 20) + 1, InputError, "sequence length n = 1048577 is longer than the longest sequence supported"),
    (t(4, 10, dtype=torch.float32), 9, InputError, "k's length Nk = 10 must be between 1 and the sequence length N = 9"),
    (t(4, 10, 1, dtype=torch.float32), 10, InputError, r"k must be 2-D \(H, Nk\)"),
    (t(4, 10, dtype=torch.int32), 10, DTypeError, "k must be float32"),
])
def test_spectrum_rejects(k, n, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.fftconv_spectrum(k, n)


def test_rejects_cpu_tensors(built):
    """The CPU kernels (common/cpu_refusal.h) name the op's schema and the first CPU tensor by its argument's name."""
    with pytest.raises(DeviceMismatchError, match=r"^tk_ops.fftconv_fwd: tk_ops kernels run on CUDA tensors, but u is "
                                                  r"on cpu; move it with .cuda\(\)$"):
        tk_ops.fftconv(*conv_args())
    with pytest.raises(DeviceMismatchError, match="tk_ops.fftconv_fwd: tk_ops kernels run on CUDA tensors, but u is on"):
        tk_ops.fftconv(*conv_args(), pregate=t(2, 4, 100), postgate=t(2, 4, 100))
    with pytest.raises(DeviceMismatchError, match=r"^tk_ops.fftconv_spectrum: tk_ops kernels run on CUDA tensors, but k "
                                                  r"is on cpu; move it with .cuda\(\)$"):
        tk_ops.fftconv_spectrum(t(4, 10, dtype=torch.float32), 10)


# ---------------------------------------------------------------- the wrapper's own checks (no extension needed)

def test_python_types_need_no_extension():
    with pytest.raises(InputError, match="N must be an int, got float"):
        tk_ops.fftconv_spectrum(t(4, 10, dtype=torch.float32), 10.0)
    with pytest.raises(InputError, match="N must be an int, got bool"):
        tk_ops.fftconv_spectrum(t(4, 10, dtype=torch.float32), True)


@pytest.mark.parametrize("no_grad", [False, True], ids=["grad", "no_grad"])
def test_inputs_that_require_grad_meet_the_same_rules(no_grad, built):
    """With or without autograd in the way (the backward's own tests are in test_fftconv_bwd_api.py), the forward's
    rules and the device rule answer first."""
    u, k = conv_args()
    with torch.set_grad_enabled(not no_grad):
        with pytest.raises(DeviceMismatchError):
            tk_ops.fftconv(u.requires_grad_(), k.requires_grad_())
        with pytest.raises(InputError, match="k's length Nk = 101 must be between 1"):
            tk_ops.fftconv(u, t(4, 101, dtype=torch.float32).requires_grad_())


# ---------------------------------------------------------------- Meta kernels

# (N, the spectrum's shape for Nk = N // 2 taps): rfft(k, L) up to N = 4096, per filter block of 4096 taps up to
# 65536 (the block path), rfft(k, L) again past it, L the smallest power of two >= 2N (cuFFT).
@pytest.mark.parametrize("n, spectrum", [(1, (6, 129)), (128, (6, 129)), (129, (6, 257)), (1000, (6, 1025)),
                                         (4096, (6, 4097)), (4097, (6, 1, 4097)), (10000, (6, 2, 4097)),
                                         (20000, (6, 3, 4097)), (65536, (6, 8, 4097)), (65537, (6, 131073)),
                                         (1 << 20, (6, (1 << 20) + 1))])
def test_meta_shapes(n, spectrum, built):
    u, k = conv_args(3, 6, n, max(1, n // 2), dtype=torch.float16, device="meta")
    y = torch.ops.tk_ops.fftconv_fwd(u, k, None, t(3, 6, n, dtype=torch.float16, device="meta"), None)
    assert y.shape == (3, 6, n) and y.dtype == torch.float16 and y.is_contiguous()
    k_f = torch.ops.tk_ops.fftconv_spectrum(k, n)
    assert k_f.shape == spectrum and k_f.dtype == torch.complex64
    y = torch.ops.tk_ops.fftconv_fwd(u, None, None, None, k_f)
    assert y.shape == (3, 6, n)


def test_meta_runs_the_rules(built):
    u, k = conv_args(n=100, nk=200, device="meta")
    with pytest.raises(ValueError, match="k's length Nk = 200 must be between 1"):
        torch.ops.tk_ops.fftconv_fwd(u, k, None, None, None)


def test_max_len(built):
    assert torch.ops.tk_ops.fftconv_max_len() == 1 << 20
