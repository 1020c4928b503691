"""The algorithms of the FFT convolution kernels (docs/fftconv.md), in float64 on the CPU, against torch.fft: the
engine's transform (outer radix-R step on the first half of the samples, radix-16 levels in place, frequencies in
digit-reversed positions, the inverse back to natural order), the pair of rows as one complex sequence, the block
path's overlap-add over blocks of L / 2 samples, and the filter gradient's identities (the real part of the inverse
of sum conj(Zv) Zg over pairs; the lag blocks). These are the index maps and formulas the CUDA code implements
(kernels/fftconv/fftconv_engine_kernel.cuh: frequency_at and the twiddle tables; fftconv_io_kernel.cuh: the outer
steps; fftconv_long_kernel.cuh; fftconv_dk_kernel.cuh), held to the definitions without a GPU."""
import math

import pytest
import torch

def randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def zeros(*shape, dtype=torch.float64):
    return torch.zeros(*shape, dtype=dtype)


def root(n, e):
    """e^(-2 pi i e / n)."""
    return torch.exp(-2j * math.pi * torch.as_tensor(e, dtype=torch.float64) / n)


def split(size):
    """(R, A) with size = R * 16^A, A >= 2, R the smallest power of two (outer_radix)."""
    r = 1
    while True:
        m, a = size // r, 0
        while m % 16 == 0:
            m, a = m // 16, a + 1
        if m == 1 and a >= 2:
            return r, a
        r *= 2


def frequency_at(p, size):
    """The frequency at plane position p after the forward levels (fftconv_engine_kernel.cuh's frequency_at)."""
    r, a = split(size)
    m = size // r
    f, scale, p = p // m, r, p % m
    stride = m // 16
    while stride >= 1:
        f, p, scale, stride = f + (p // stride) * scale, p % stride, scale * 16, stride // 16
    return f


F16 = torch.stack([root(16, j * torch.arange(16)) for j in range(16)]) / 4  # unitary, as the A fragments


def forward(x, size):
    """The engine's forward transform of x (first size / 2 samples only), in place: digit-reversed spectrum / sqrt(L)."""
    r, a = split(size)
    m = size // r
    z = zeros(size, dtype=torch.complex128)
    t = torch.arange(m)
    for j in range(r):  # outer radix-R step (load_input): inputs k < R / 2 exist
        z[j * m:(j + 1) * m] = sum(x[k * m:(k + 1) * m] * root(r, j * k) for k in range(max(1, r // 2))) * root(size, j * t) / math.sqrt(r)
    level = m
    while level >= 16:  # radix-16 steps: columns of 16 digits at stride level / 16, twiddles e^(-2 pi i j t / level)
        s = level // 16
        v = z.view(size // level, 16, s)
        z = (torch.einsum("jk,okt->ojt", F16, v) * root(level, torch.outer(torch.arange(16), torch.arange(s)))).reshape(size)
        level //= 16
    return z


def inverse(z, size):
    """The engine's inverse: levels 16 .. M with conjugates, then the outer step keeping samples < size / 2."""
    r, a = split(size)
    m = size // r
    level = 16
    while level <= m:
        s = level // 16
        v = z.view(size // level, 16, s) * root(level, torch.outer(torch.arange(16), torch.arange(s))).conj()
        z = torch.einsum("jk,ojt->okt", F16.conj(), v).reshape(size)
        level *= 16
    if r == 1:  # the top radix-16 step kept only digits 0..7: the first half
        return z[:size // 2]
    t = torch.arange(m)
    out = zeros(size // 2, dtype=torch.complex128)
    for k in range(r // 2):
        out[k * m:(k + 1) * m] = sum(z[j * m:(j + 1) * m] * root(size, j * t).conj() * root(r, j * k).conj()
                                     for j in range(r)) / math.sqrt(r)
    return out


def conv(u, k, n_out):
    """y[n] = sum_m k[m] u[n - m], n < n_out (float64, direct)."""
    y = zeros(n_out)
    for m in range(len(k)):
        y[m:] += k[m] * u[:n_out - m]
    return y


@pytest.mark.parametrize("size", [256, 512, 1024, 2048, 4096, 8192])
def test_engine_transform_is_the_dft_in_digit_reversed_order(size):
    x = zeros(size, dtype=torch.complex128)
    x[:size // 2] = randn(size // 2) + 1j * randn(size // 2)
    order = torch.tensor([frequency_at(p, size) for p in range(size)])
    assert sorted(order.tolist()) == list(range(size))
    want = torch.fft.fft(x) / math.sqrt(size)
    assert torch.allclose(forward(x, size), want[order], atol=1e-10)


@pytest.mark.parametrize("size", [256, 512, 1024, 2048, 4096, 8192])
def test_pair_of_rows_convolves_both(size):
    """Rows b and b + 1 as one complex sequence, times the real filter's spectrum in the same order, back: the real
    and imaginary parts are the two rows' causal convolutions."""
    n = size // 2
    u0, u1, k = randn(n), randn(n), randn(n) / math.sqrt(n)
    x = zeros(size, dtype=torch.complex128)
    x[:n] = u0 + 1j * u1
    order = torch.tensor([frequency_at(p, size) for p in range(size)])
    spectrum = torch.fft.fft(k, size)[order]
    y = inverse(forward(x, size) * spectrum, size)
    assert torch.allclose(y.real, conv(u0, k, n), atol=1e-9) and torch.allclose(y.imag, conv(u1, k, n), atol=1e-9)


def test_block_path_overlap_add():
    """Blocks of B samples transformed at 2B points: y_i = first half of IFFT(sum_j X_(i-j) K_j) + second half of the
    previous block's sum (fftconv_long_kernel.cuh)."""
    b, n, nk = 64, 64 * 5 + 17, 64 * 3 + 5
    u, k = randn(n), randn(nk)
    blocks, kblocks = -(-n // b), -(-nk // b)
    x = [torch.fft.fft(torch.nn.functional.pad(u[i * b:(i + 1) * b], (0, 2 * b - len(u[i * b:(i + 1) * b]))))
         for i in range(blocks)]
    kf = [torch.fft.fft(k[j * b:(j + 1) * b], 2 * b) for j in range(kblocks)]
    y, tail = zeros(blocks * b), zeros(b)
    for i in range(blocks):
        z = torch.fft.ifft(sum(x[i - j] * kf[j] for j in range(min(i + 1, kblocks)))).real
        y[i * b:(i + 1) * b] = z[:b] + tail
        tail = z[b:]
    assert torch.allclose(y[:n], conv(u, k, n), atol=1e-9)


def test_filter_gradient_identities():
    """dk[m] = sum_b sum_n g_b[n] v_b[n - m]: (1) rows paired as complex sequences, Re(IFFT(sum conj(Zv) Zg)) is the
    sum over both rows (fftconv_dk_kernel.cuh); (2) on blocks of B samples, dk's block d is the first half of
    IFFT(C_d) plus the second half of IFFT(C_(d+1)), C_d = sum_i conj(X_i) G_(i+d) (the block path)."""
    n, nk, size = 96, 70, 256
    v, g = randn(4, n), randn(4, n)
    want = torch.stack([sum(g[r, m:] @ v[r, :n - m] for r in range(4)) for m in range(nk)])
    zv = [torch.fft.fft(v[2 * p] + 1j * v[2 * p + 1], size) for p in range(2)]
    zg = [torch.fft.fft(g[2 * p] + 1j * g[2 * p + 1], size) for p in range(2)]
    paired = torch.fft.ifft(sum(zv[p].conj() * zg[p] for p in range(2))).real[:nk]
    assert torch.allclose(paired, want, atol=1e-9)
    b = 32
    blocks, kblocks = -(-n // b), -(-nk // b)
    xs = [[torch.fft.fft(v[r, i * b:(i + 1) * b], 2 * b) for i in range(blocks)] for r in range(4)]
    gs = [[torch.fft.fft(g[r, i * b:(i + 1) * b], 2 * b) for i in range(blocks)] for r in range(4)]
    c = [sum(xs[r][i].conj() * gs[r][i + d] for r in range(4) for i in range(blocks - d)) if d < blocks else
         zeros(2 * b, dtype=torch.complex128) for d in range(kblocks + 1)]
    back = [torch.fft.ifft(cd).real for cd in c]
    dk = torch.cat([back[d][:b] + back[d + 1][b:] for d in range(kblocks)])[:nk]
    assert torch.allclose(dk, want, atol=1e-9)
