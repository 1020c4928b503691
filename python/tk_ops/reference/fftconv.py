"""float64 references of the FFT convolution: the gated causal long convolution in two independent forms (a
direct sum and a float64 FFT), the filter spectrum that inference may cache, and the Monarch factorisation of the
DFT into small dense DFT matrices and twiddle factors, the algorithm the kernels run on tensor cores."""
from __future__ import annotations

import math
from typing import Sequence

import torch

# Longest sequence the default form sums directly: its O(N * Nk) work stays small next to the tests' sizes, and
# beyond it the O(N log N) FFT form is the only practical one.
DIRECT_MAX_N = 1024


def fftconv(u: torch.Tensor, k: torch.Tensor | None, pregate: torch.Tensor | None = None,
            postgate: torch.Tensor | None = None, k_f: torch.Tensor | None = None,
            form: str | None = None) -> torch.Tensor:
    """y = postgate * causal_conv(u * pregate, k) in float64 on the inputs' device.

    u (B, H, N); k (H, Nk) with 1 <= Nk <= N; y[b, h, n] = sum_{m <= n, m < Nk} k[h, m] v[b, h, n - m] with
    v = u * pregate: each channel has its own filter and samples before 0 are zero. The gates are (B, H, N) and
    either may be None (no gating on that side).

    ``form`` "direct" evaluates the sum itself, "fft" takes irfft(rfft(v, 2N) * rfft(k, 2N))[:N]; None picks
    "direct" for N <= DIRECT_MAX_N and "fft" above. ``k_f`` (the layout of :func:`fftconv_spectrum`) replaces k,
    which may then be None; it implies the FFT form."""
    b, h, n = _check_u(u)
    for name, gate in (("pregate", pregate), ("postgate", postgate)):
        if gate is not None and tuple(gate.shape) != (b, h, n):
            raise ValueError(f"{name} must have u's shape {(b, h, n)}, got {tuple(gate.shape)}")
    if form not in (None, "direct", "fft"):
        raise ValueError(f'form must be "direct", "fft" or None, got {form!r}')
    if k_f is not None:
        if form == "direct":
            raise ValueError('k_f is a spectrum: it needs form="fft" (or None)')
        if tuple(k_f.shape) != (h, n + 1):
            raise ValueError(f"k_f must be (H, N + 1) = {(h, n + 1)} for u of shape {(b, h, n)}, "
                             f"got {tuple(k_f.shape)}")
        form = "fft"
    else:
        if k is None:
            raise ValueError("pass the filter k or its spectrum k_f")
        _check_k(k, h, n)
        form = form or ("direct" if n <= DIRECT_MAX_N else "fft")

    v = u.double() if pregate is None else u.double() * pregate.double()
    if form == "direct":
        y = _causal_sum(v, k.double())
    else:
        spectrum = fftconv_spectrum(k, n) if k_f is None else k_f.to(torch.complex128)
        y = torch.fft.irfft(torch.fft.rfft(v, n=2 * n) * spectrum, n=2 * n)[..., :n]
    return y if postgate is None else y * postgate.double()


def fftconv_spectrum(k: torch.Tensor, n: int) -> torch.Tensor:
    """The filter's spectrum for sequences of length n, as complex128 of shape (H, n + 1): the real FFT of each
    row of k (H, Nk <= n) zero-padded to 2n points, i.e. rfft(k, 2n). Entry j is sum_m k[h, m] e^{-2 pi i j m / 2n}
    for j = 0..n (the other n - 1 frequencies are the conjugates of these, k being real)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    _check_k(k, None, n)
    return torch.fft.rfft(k.double(), n=2 * n)


def _causal_sum(v: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The causal sum as a depthwise conv1d. conv1d correlates (out[n] = sum_j w[j] x[n + j]), so the filter is
    reversed and the input gets Nk - 1 leading zeros: out[n] = sum_m k[m] v[n - m] with v = 0 before 0."""
    h, nk = k.shape
    padded = torch.nn.functional.pad(v, (nk - 1, 0))
    return torch.nn.functional.conv1d(padded, k.flip(-1).unsqueeze(1), groups=h)


def _check_u(u: torch.Tensor) -> tuple[int, int, int]:
    if u.dim() != 3 or u.shape[-1] < 1:
        raise ValueError(f"u must be (B, H, N) with N >= 1, got shape {tuple(u.shape)}")
    return tuple(u.shape)


def _check_k(k: torch.Tensor, h: int | None, n: int) -> None:
    """k is (H, Nk), 1 <= Nk <= n, and has u's H channels when h is given."""
    if k.dim() != 2 or (h is not None and k.shape[0] != h):
        channels = "" if h is None else f" with u's H = {h} channels"
        raise ValueError(f"k must be (H, Nk){channels}, got shape {tuple(k.shape)}")
    if not 1 <= k.shape[1] <= n:
        raise ValueError(f"k's length Nk = {k.shape[1]} must be between 1 and N = {n}")


def dft_matrix(n: int, inverse: bool = False, device: torch.device | str | None = None) -> torch.Tensor:
    """The n x n DFT matrix F[j, m] = e^{-2 pi i j m / n} (e^{+...} when inverse, unscaled) in complex128. The
    exponent is reduced mod n in integers first, so large products j * m lose no precision in the angle."""
    idx = torch.arange(n, device=device)
    return _roots(torch.outer(idx, idx) % n, n, inverse)


def twiddle_factors(n1: int, n2: int, inverse: bool = False,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """T[k1, m2] = e^{-2 pi i k1 m2 / (n1 n2)} (n1 x n2, complex128): the phase that joins an n1-point DFT over
    the rows and an n2-point DFT over the columns into one (n1 n2)-point DFT."""
    return _roots(torch.outer(torch.arange(n1, device=device), torch.arange(n2, device=device)) % (n1 * n2),
                  n1 * n2, inverse)


def _roots(exponent: torch.Tensor, n: int, inverse: bool) -> torch.Tensor:
    angle = exponent.double() * ((2 if inverse else -2) * math.pi / n)
    return torch.polar(torch.ones_like(angle), angle)


def monarch_fft(x: torch.Tensor, factors: Sequence[int], inverse: bool = False) -> torch.Tensor:
    """The N-point DFT along x's last axis (N = prod(factors)) computed only with matrix products by small dense
    DFT matrices and elementwise twiddles, in complex128; equal to torch.fft.fft (torch.fft.ifft when inverse,
    including the 1/N).

    With N = N1 * M, write the input index n = M n1 + m and the output index j = j1 + N1 j2. Then
        X[j1 + N1 j2] = sum_m e^{-2 pi i m j2 / M} e^{-2 pi i m j1 / N} sum_{n1} e^{-2 pi i n1 j1 / N1} x[M n1 + m]
    so: view x as an (N1, M) matrix (row-major), multiply by the N1 x N1 DFT matrix on the left (a DFT down each
    column), multiply elementwise by the twiddles e^{-2 pi i j1 m / N}, take the M-point DFT of each row (the
    same construction on factors[1:], ending in one dense matrix product), and read the (N1, M) result out
    column-major. Two factors are two matrix products; three are three."""
    factors = [int(f) for f in factors]
    n = x.shape[-1]
    if not factors or any(f < 1 for f in factors) or math.prod(factors) != n:
        raise ValueError(f"factors {factors} must be positive and multiply to the last dimension {n}")
    y = _monarch(x.to(torch.complex128), factors, inverse)
    return y / n if inverse else y


def _monarch(x: torch.Tensor, factors: list[int], inverse: bool) -> torch.Tensor:
    n1, n = factors[0], x.shape[-1]
    if len(factors) == 1:
        # One dense DFT: F is symmetric, so x @ F transforms each row.
        return x @ dft_matrix(n1, inverse, x.device)
    m = n // n1
    rows = x.reshape(*x.shape[:-1], n1, m)
    rows = dft_matrix(n1, inverse, x.device) @ rows           # DFT along n1: (N1 x N1) @ (N1 x M)
    rows = rows * twiddle_factors(n1, m, inverse, x.device)   # phase e^{-2 pi i j1 m / N}
    rows = _monarch(rows, factors[1:], inverse)               # M-point DFT of each row: index j2
    return rows.transpose(-1, -2).reshape(*x.shape[:-1], n)   # output j1 + N1 j2 is element (j1, j2)
