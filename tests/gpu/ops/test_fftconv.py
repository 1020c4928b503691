"""tk_ops.fftconv (causal FFT convolution, forward) and tk_ops.fftconv_spectrum against the float64 reference on the
GPU: lengths 1 .. 4096 (every built FFT size) and the block path past them up to 2^20, filters shorter than and as
long as the sequence, gating before, after
and on both sides, bf16 and fp16 inputs, float32 and bf16 filters, odd batches (a pair with one sequence), blocks that
run several pairs, the cached spectrum (k_f), strided inputs, and outputs poisoned before the run (the argument rules
themselves are tested on the CPU, tests/cpu/test_fftconv_api.py). Skipped unless the 'fftconv' family is in the
build."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.fftconv import fftconv as conv_ref

from ...util import requires_families
from ..util import fresh_pool_with_nan, rel_err

# 16-bit DFT operands and intermediates, fp32 accumulation: a CPU emulation of the kernels' rounding gives at most
# 4.9e-3 (bf16) and 5.5e-4 (fp16) at these sizes (docs/fftconv.md).
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


pytestmark = requires_families("fftconv")


def problem(b, h, n, nk, dtype=torch.bfloat16, k_dtype=torch.float32, seed=0):
    """u and a decaying filter (the shape of a trained long-convolution filter), and gates around 1."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    u = torch.randn(b, h, n, device="cuda", generator=gen).to(dtype)
    decay = torch.exp(-torch.arange(nk, device="cuda") / max(1.0, nk / 4))
    k = (torch.randn(h, nk, device="cuda", generator=gen) * decay / math.sqrt(nk)).to(k_dtype)
    gate = lambda: (1 + 0.5 * torch.randn(b, h, n, device="cuda", generator=gen)).to(dtype)
    return u, k, gate(), gate()


def check(u, k, pregate=None, postgate=None, what="", k_f=None):
    fresh_pool_with_nan(2 * u.numel(), u.dtype)  # y's dtype: float32 NaN read as 16-bit is 0, NaN, 0, NaN, ..
    y = tk_ops.fftconv(u, None if k_f is not None else k, pregate, postgate, k_f=k_f)
    torch.cuda.synchronize()
    ref = conv_ref(u, k, pregate, postgate)
    assert y.shape == u.shape and y.dtype == u.dtype and y.is_contiguous(), what
    err = rel_err(y, ref)
    assert err <= TOL[u.dtype], f"{what}: relative error {err:.3e}"
    return y


@pytest.mark.parametrize("n", [1, 7, 64, 65, 100, 128, 129, 256, 257, 1000, 1024, 2048, 2049, 4095, 4096])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lengths(n, dtype):
    for nk in sorted({n, max(1, n // 3)}):
        u, k, _, _ = problem(3, 4, n, nk, dtype)
        check(u, k, what=f"N={n} Nk={nk} {dtype}")


@pytest.mark.parametrize("gates", ["pre", "post", "both"])
@pytest.mark.parametrize("n", [1, 7, 256, 1000, 4096])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gating(gates, n, dtype):
    u, k, pre, post = problem(2, 4, n, n, dtype)
    check(u, k, pre if gates != "post" else None, post if gates != "pre" else None, what=f"{gates} N={n} {dtype}")


@pytest.mark.parametrize("k_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [7, 1000, 4096])
def test_filter_dtypes(k_dtype, n):
    u, k, pre, post = problem(2, 4, n, n // 2 + 1, torch.bfloat16, k_dtype)
    check(u, k, pre, post, what=f"k {k_dtype} N={n}")


@pytest.mark.parametrize("b, h", [(1, 1), (1, 3), (5, 2), (16, 8)])
def test_batches_and_channels(b, h):
    u, k, pre, post = problem(b, h, 1000, 300)
    check(u, k, pre, post, what=f"B={b} H={h}")


@pytest.mark.parametrize("n", [100, 1000, 4096])
def test_pairs_per_block(n):
    """With at least two heads per SM the launch gives each block a head's whole batch, so one block runs several
    pairs back to back (shared planes reused between pairs, an odd last pair): the cases above all get one pair per
    block."""
    h = 2 * torch.cuda.get_device_properties(0).multi_processor_count
    u, k, pre, post = problem(5, h, n, max(1, n // 2))
    check(u, k, pre, post, what=f"B=5 H={h} N={n}")


@pytest.mark.parametrize("n", [1, 7, 256, 1000, 4096])
def test_spectrum(n):
    _, k, _, _ = problem(1, 4, n, max(1, n // 2))
    k_f = tk_ops.fftconv_spectrum(k, n)
    fft = 256
    while fft < 2 * n:
        fft *= 2
    assert k_f.dtype == torch.complex64 and k_f.shape == (4, fft // 2 + 1)
    ref = torch.fft.rfft(k.double(), n=fft)
    assert rel_err(torch.view_as_real(k_f), torch.view_as_real(ref)) <= 1e-5
    if fft == 2 * n:  # then it is the reference's layout as well
        ref_layout = tk_ops.reference.fftconv_spectrum(k, n)
        assert rel_err(torch.view_as_real(k_f), torch.view_as_real(ref_layout)) <= 1e-5


def filter_views(k):
    """k itself and views of the same values in other layouts: columns two apart, and a transposed (Nk, H) tensor."""
    return {"dense": k, "step 2": torch.stack([k, torch.full_like(k, float("nan"))], -1).flatten(1)[:, ::2],
            "transposed": k.t().contiguous().t()}


@pytest.mark.parametrize("k_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n, nk", [(1, 1), (100, 37), (1000, 1000), (4096, 4093), (4097, 4097), (12289, 9000),
                                   (65536, 65536), (70000, 65537)])
def test_spectrum_rows(k_dtype, n, nk):
    """The spectrum by the op's own kernel, from taps in any layout and filter dtype, written over memory that held
    NaN: the float64 rfft of the zero-padded rows (per block of 4096 taps past N = 4096), every bin."""
    _, k, _, _ = problem(1, 5, n, nk, k_dtype=k_dtype)
    if n <= 4096 or n > 65536:  # one rfft(k, L), L >= 2N (cuFFT's own past the block path)
        blocks, fft = 1, max(256, 1 << (2 * n - 1).bit_length())
        ref = torch.fft.rfft(k.double(), n=fft)
    else:
        blocks, fft = -(-nk // 4096), 8192
        padded = torch.nn.functional.pad(k.double(), (0, blocks * 4096 - nk)).view(5, blocks, 4096)
        ref = torch.fft.rfft(padded, n=fft)
    for name, view in filter_views(k).items():
        fresh_pool_with_nan(2 * 5 * blocks * (fft // 2 + 1))  # where our kernel's spectrum is allocated next
        k_f = tk_ops.fftconv_spectrum(view, n)
        torch.cuda.synchronize()
        assert k_f.shape == ref.shape, name
        err = rel_err(torch.view_as_real(k_f), torch.view_as_real(ref))
        assert err <= 1e-5, f"{name} k {k_dtype} N={n} Nk={nk}: relative error {err:.3e}"


@pytest.mark.parametrize("n", [1, 7, 256, 1000, 4096])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cached_spectrum(n, dtype):
    u, k, pre, post = problem(3, 4, n, n, dtype)
    k_f = tk_ops.fftconv_spectrum(k, n)
    y_f = check(u, k, pre, post, what=f"k_f N={n}", k_f=k_f)
    y = tk_ops.fftconv(u, k, pre, post)
    assert torch.equal(y, y_f), "k and its cached spectrum must give the same result"


def test_strided_inputs():
    u, k, pre, post = problem(4, 6, 500, 500)
    u_t = u.transpose(0, 1).contiguous().transpose(0, 1)  # (B, H, N) view of an (H, B, N) tensor
    k_t = torch.cat([k, k], 1)[:, ::2]                    # a non-contiguous filter
    pre_t = torch.cat([pre, pre], -1)[..., ::2]           # a gate with a sample stride of 2
    check(u_t, k_t, pre_t, post, what="strided")


# -- the block path (N > 4096: blocks of 4096 samples, each transformed at 8192 points) ----------------------------

@pytest.mark.parametrize("n", [4097, 8192, 10000, 12289, 65536])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_long_lengths(n, dtype):
    for nk in sorted({n, 100, n // 3, 4096, 4097}):
        u, k, _, _ = problem(3, 2, n, nk, dtype)
        check(u, k, what=f"N={n} Nk={nk} {dtype}")


@pytest.mark.parametrize("n", [5000, 20000])
@pytest.mark.parametrize("gates", ["pre", "post", "both"])
def test_long_gating(n, gates):
    u, k, pre, post = problem(3, 2, n, n)
    check(u, k, pre if gates != "post" else None, post if gates != "pre" else None, what=f"{gates} N={n}")


@pytest.mark.parametrize("n", [65537, 2 ** 17, 2 ** 20])
def test_very_long(n):
    """Past the block path (N > 65536) the op convolves with cuFFT in fp32."""
    u, k, pre, post = problem(1, 2, n, n)
    check(u, k, pre, post, what=f"N={n}")


@pytest.mark.parametrize("n", [4097, 10000])
def test_long_cached_spectrum(n):
    u, k, pre, post = problem(2, 3, n, n // 2)
    k_f = tk_ops.fftconv_spectrum(k, n)
    blocks = -(-(n // 2) // 4096)
    assert k_f.dtype == torch.complex64 and k_f.shape == (3, blocks, 4097)
    padded = torch.nn.functional.pad(k.double(), (0, blocks * 4096 - k.shape[1])).view(3, blocks, 4096)
    assert rel_err(torch.view_as_real(k_f), torch.view_as_real(torch.fft.rfft(padded, n=8192))) <= 1e-5
    y_f = check(u, k, pre, post, what=f"k_f N={n}", k_f=k_f)
    assert torch.equal(tk_ops.fftconv(u, k, pre, post), y_f)


def test_long_unaligned():
    """An odd length (scalar accesses) and an odd batch (a pair with one row), strided views."""
    u, k, pre, post = problem(5, 3, 9999, 7777)
    check(u[:, :, :], k, pre[..., :], post, what="odd N=9999")
    u2, k2, _, post2 = problem(3, 2, 10001, 10001)
    check(u2.transpose(0, 1).contiguous().transpose(0, 1), k2, None, post2, what="strided N=10001")


def test_empty_batch():
    u = torch.empty(0, 4, 100, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 100, device="cuda")
    assert tk_ops.fftconv(u, k).shape == (0, 4, 100)
