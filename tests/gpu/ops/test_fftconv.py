"""tk_ops.fftconv (causal FFT convolution, forward) and tk_ops.fftconv_spectrum against the float64 reference on the
GPU: lengths 1 .. 4096 (every built FFT size), the block path past them up to 65536 and cuFFT up to the longest
sequence the op takes (fftconv_max_len), filters shorter than and as long as the sequence whose every block of taps
weighs in the output, gating before, after and on both sides, bf16 and fp16 inputs, float32, bf16 and fp16 filters,
odd batches (a pair with one sequence), blocks that run several pairs, the cached spectrum (k_f) on every path,
strided inputs, and outputs poisoned before the run (the argument rules themselves are tested on the CPU,
tests/cpu/test_fftconv_api.py). Every output is compared per channel (a row of assert_close is one sequence) and per
position (a row is one sample of every sequence), so that an error confined to a block of samples or to the tail
cannot hide in the whole tensor's norm. Skipped unless the 'fftconv' family is in the build."""
import pytest
import torch

import tk_ops
from tk_ops.reference.fftconv import fftconv as conv_ref

from ...util import requires_families
from ..util import TOL as ROUNDED_ONCE, assert_close, fresh_pool_with_nan

# 16-bit DFT operands and intermediates, fp32 accumulation: a CPU emulation of the kernels' rounding gives at most
# 4.9e-3 (bf16) and 5.5e-4 (fp16) at these sizes (docs/fftconv.md). These hold up to BLOCKS_LEN, where our kernels run.
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# The paths by length (kernels/fftconv/fftconv_configs.cuh): one on-chip transform up to ONCHIP_LEN, blocks of
# BLOCK_LEN samples (and filter taps) up to BLOCKS_LEN, cuFFT in fp32 past it.
ONCHIP_LEN = BLOCK_LEN = 4096
BLOCKS_LEN = 16 * BLOCK_LEN
# Past BLOCKS_LEN every result is fp32 arithmetic rounded once to its dtype: the once-rounded bound of that dtype
# (tests/gpu/util.py), and for float32 results the fp32 FFT convolution's own error, 3e-7 as a whole and 1.3e-6 in the
# worst position (torch.fft's float32 convolution against float64 on the CPU, N = 65537 .. 2^20), with room for
# cuFFT's.
FP32_FFT = 1e-5


pytestmark = requires_families("fftconv")


def bound(n, dtype, compute=None):
    """The relative error a result of `dtype` may have at length n, from 16-bit arithmetic in `compute` (the input's
    dtype; default `dtype`) on our kernels, or from fp32 arithmetic past BLOCKS_LEN."""
    if n > BLOCKS_LEN:
        return FP32_FFT if dtype == torch.float32 else ROUNDED_ONCE[dtype]
    return max(TOL[compute or dtype], TOL.get(dtype, 0.0))


def max_len():
    """The longest sequence the op takes, as the extension reports it."""
    return tk_ops._ext.require("fftconv").fftconv_max_len()


def filter_taps(h, nk, gen):
    """(H, Nk) float32 taps that do not decay: each block of BLOCK_LEN taps (the block path's unit; a filter of up to
    BLOCK_LEN taps is one block) carries an equal share of unit energy, spread evenly over its taps, so that dropping
    any block (the last eighth of the taps of a single block), the last one included even when it is a single tap,
    moves the samples it reaches by 0.4 or more of their norm and the whole output by 1e-2 or more (float64, the
    shapes of these tests), against bounds of 1e-2 as a whole and 4e-2 per position. Unit energy keeps y at the scale
    of u whatever Nk."""
    blocks = -(-nk // BLOCK_LEN)
    sizes = torch.full((blocks,), BLOCK_LEN)
    sizes[-1] = nk - (blocks - 1) * BLOCK_LEN
    std = (sizes * blocks).double().rsqrt().repeat_interleave(sizes).float().to("cuda")
    return torch.randn(h, nk, device="cuda", generator=gen) * std


def problem(b, h, n, nk, dtype=torch.bfloat16, k_dtype=torch.float32, seed=0):
    """u, a filter whose every block of taps matters (filter_taps), and gates around 1."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    u = torch.randn(b, h, n, device="cuda", generator=gen).to(dtype)
    k = filter_taps(h, nk, gen).to(k_dtype)
    gate = lambda: (1 + 0.5 * torch.randn(b, h, n, device="cuda", generator=gen)).to(dtype)
    return u, k, gate(), gate()


def positions(t):
    """t (..., N) with one row per position along the last dimension instead (N, prod(...)), for assert_close's
    per-row check: an error confined to some samples of every sequence (a block, the tail) is then a whole row."""
    return t.reshape(-1, t.shape[-1]).t()


def assert_rows_close(out, ref, tol, what):
    """out within tol of ref as a whole, in every row (one sequence, or one filter's taps) and at every position."""
    assert_close(out, ref, tol, what)
    assert_close(positions(out), positions(ref), tol, f"{what} (rows: positions)")


def check(u, k, pregate=None, postgate=None, what="", k_f=None):
    fresh_pool_with_nan(2 * u.numel(), u.dtype)  # y's dtype: float32 NaN read as 16-bit is 0, NaN, 0, NaN, ..
    y = tk_ops.fftconv(u, None if k_f is not None else k, pregate, postgate, k_f=k_f)
    torch.cuda.synchronize()
    ref = conv_ref(u, k, pregate, postgate)
    assert y.shape == u.shape and y.dtype == u.dtype and y.is_contiguous(), what
    assert_rows_close(y, ref, bound(u.shape[-1], u.dtype), what)
    return y


def bins(k_f):
    """A spectrum's bins as real numbers, one row per filter (and filter block): (re, im) pairs along the last axis."""
    return torch.view_as_real(k_f).flatten(-2)


def expected_spectrum(k, n):
    """The float64 spectrum in the op's layout: rfft(k, L) with L the FFT size of N (the smallest of 256, 512, .. at
    least 2N on chip; the smallest power of two at least 2N past BLOCKS_LEN), or on the block path the rfft of each
    block of BLOCK_LEN taps at 2 BLOCK_LEN points, (H, blocks, BLOCK_LEN + 1)."""
    if n <= ONCHIP_LEN or n > BLOCKS_LEN:
        return torch.fft.rfft(k.double(), n=max(256, 1 << (2 * n - 1).bit_length()))
    h, nk = k.shape
    blocks = -(-nk // BLOCK_LEN)
    padded = torch.nn.functional.pad(k.double(), (0, blocks * BLOCK_LEN - nk)).view(h, blocks, BLOCK_LEN)
    return torch.fft.rfft(padded, n=2 * BLOCK_LEN)


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
    assert_close(bins(k_f), bins(torch.fft.rfft(k.double(), n=fft)), 1e-5, f"spectrum N={n}")
    if fft == 2 * n:  # then it is the reference's layout as well
        assert_close(bins(k_f), bins(tk_ops.reference.fftconv_spectrum(k, n)), 1e-5, f"reference layout N={n}")


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
    ref = expected_spectrum(k, n)  # one rfft(k, L), L >= 2N (cuFFT's own past the block path), or one per block
    for name, view in filter_views(k).items():
        fresh_pool_with_nan(2 * ref.numel())  # where our kernel's spectrum is allocated next
        k_f = tk_ops.fftconv_spectrum(view, n)
        torch.cuda.synchronize()
        assert k_f.shape == ref.shape, name
        assert_close(bins(k_f), bins(ref), 1e-5, f"{name} k {k_dtype} N={n} Nk={nk}")  # rows: filters (blocks)


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
        u, k, _, _ = problem(3, 4, n, nk, dtype)
        check(u, k, what=f"N={n} Nk={nk} {dtype}")


@pytest.mark.parametrize("n", [5000, 20000])
@pytest.mark.parametrize("gates", ["pre", "post", "both"])
def test_long_gating(n, gates):
    u, k, pre, post = problem(3, 2, n, n)
    check(u, k, pre if gates != "post" else None, post if gates != "pre" else None, what=f"{gates} N={n}")


@pytest.mark.parametrize("n", [65537, 2 ** 17, "max"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_very_long(n, dtype):
    """Past the block path (N > 65536) the op convolves with cuFFT in fp32, up to the longest sequence it takes."""
    n = max_len() if n == "max" else n
    for nk in (n, n // 3):
        u, k, pre, post = problem(1, 2, n, nk, dtype)
        check(u, k, pre, post, what=f"N={n} Nk={nk} {dtype}")


@pytest.mark.parametrize("n", [4097, 10000, 65536, 65537, "max"])
def test_long_cached_spectrum(n):
    """The spectrum on the block path (per block of taps, the last one a single tap) and past it (one rfft at the
    power-of-two FFT size), and the op with it, gated, as with k itself."""
    n = max_len() if n == "max" else n
    b, h = (2, 3) if n <= BLOCKS_LEN else (1, 2)
    u, k, pre, post = problem(b, h, n, n // 2 + 1)
    with torch.no_grad():
        k_f = tk_ops.fftconv_spectrum(k, n)
    ref = expected_spectrum(k, n)
    assert k_f.dtype == torch.complex64 and k_f.shape == ref.shape, f"N={n}: {tuple(k_f.shape)}"
    assert_close(bins(k_f), bins(ref), 1e-5, f"spectrum N={n}")
    y_f = check(u, k, pre, post, what=f"k_f N={n}", k_f=k_f)
    assert torch.equal(tk_ops.fftconv(u, k, pre, post), y_f), f"N={n}: k and its cached spectrum differ"


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
