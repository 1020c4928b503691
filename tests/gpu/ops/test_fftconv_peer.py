"""tk_ops.fftconv against convolutions computed without tk_ops.reference, on the same inputs: the torch.fft
formulation users write, irfft(rfft(u * pregate, 2N) * rfft(k, 2N), 2N)[:N] * postgate in float32 (always there), the
output and every gradient (autograd through it) on each path (on chip, the block path, cuFFT up to the longest
sequence); and FlashFFTConv (HazyResearch/flash-fft-conv at FFT size 2N, its causal setting), the output and the
gradients, where `from flashfftconv import FlashFFTConv` works: it is not on PyPI (tools/device/flashfftconv.sh builds
it), and where it does not import its tests skip with the import error. A peer that agrees on the same inputs confirms
the semantics (the causal padding, the gates, which taps meet which samples) independently of the float64 reference
that the other fftconv tests hold the op to. Every comparison is per channel and per position (test_fftconv's
assert_rows_close). Skipped unless the 'fftconv' family is in the build."""
import pytest
import torch

import tk_ops

from ...util import requires_families
from .test_fftconv import TOL, assert_rows_close, bound, filter_taps, max_len

LEAVES = ("u", "k", "pregate", "postgate")
DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
# FlashFFTConv's own error against the float32 torch.fft formulation, measured on an H100 in bf16 (B = 16, H = 1024,
# docs/bench/fftconv_h100.json and fftconv_backward_h100.json): 6.3e-3 .. 7.6e-3 forward for N = 256 .. 65536, and over
# all the gradients together 6.2e-3 .. 6.7e-3 for N >= 4096 but 1.8e-2 at 1024 and 3.2e-2 at 256, where that sum is
# its filter gradient's (the largest by norm). Ours against it may differ by our bound plus twice the peer's error; a
# difference in semantics (a shifted tap, a gate on the wrong side, a wrapped sample) is of order 1.
PEER_TOL = TOL[torch.bfloat16] + 1.5e-2
# Its filter gradient is held to that only where its error was measured small.
PEER_DK_FROM = 4096

pytestmark = requires_families("fftconv")


def inputs(b, h, n, nk, dtype, gated, seed=0):
    """u, k (every block of taps weighing in y, test_fftconv.filter_taps), both gates around 1 when `gated` (else
    None) and an output gradient dy, by name."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = {"u": torch.randn(b, h, n, device="cuda", generator=gen).to(dtype), "k": filter_taps(h, nk, gen),
         "pregate": None, "postgate": None}
    if gated:
        for g in ("pregate", "postgate"):
            x[g] = (1 + 0.5 * torch.randn(b, h, n, device="cuda", generator=gen)).to(dtype)
    x["dy"] = torch.randn(b, h, n, device="cuda", generator=gen).to(dtype)
    return x


def torch_fft_conv(u, k, pregate=None, postgate=None):
    """The torch.fft formulation in float32 on float32 operands: cuFFT's fp32 transforms, an error near 3e-7."""
    n = u.shape[-1]
    v = u if pregate is None else u * pregate
    y = torch.fft.irfft(torch.fft.rfft(v, n=2 * n) * torch.fft.rfft(k, n=2 * n), n=2 * n)[..., :n]
    return y if postgate is None else y * postgate


def grads_of(conv, x, names, leaf_dtype=None):
    """The gradients of `names` by autograd through conv(u, k, pregate, postgate) with x["dy"]; the leaves in their
    own dtype, or copied to `leaf_dtype` (then dy too)."""
    def cast(t):
        return t if leaf_dtype is None or t is None else t.to(leaf_dtype)
    leaves = {name: cast(x[name]).detach().requires_grad_() for name in names}
    y = conv(*(leaves[name] if name in leaves else cast(x[name]) for name in LEAVES))
    grads = torch.autograd.grad(y, [leaves[name] for name in names], cast(x["dy"]))
    torch.cuda.synchronize()
    return dict(zip(names, grads))


def ours(u, k, pregate=None, postgate=None):
    return tk_ops.fftconv(u, k, pregate, postgate)


# -- the torch.fft formulation in float32 ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 100, 1000, 4096, 4097, 12289, 65536, 65537, 100000, "max"])
@pytest.mark.parametrize("gates", ["none", "both"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_torch_fft(dtype, gates, n):
    """The op's output against the float32 torch.fft formulation, within the op's own bound there: on chip, on the
    block path (the last filter block a single tap at Nk = N / 2 + 1 past 8192) and on cuFFT."""
    n = max_len() if n == "max" else n
    b, h = (3, 4) if n <= 100000 else (1, 2)
    for nk in sorted({n, n // 2 + 1}):
        x = inputs(b, h, n, nk, dtype, gates == "both", seed=nk)
        with torch.no_grad():
            y = ours(x["u"], x["k"], x["pregate"], x["postgate"])
            peer = torch_fft_conv(*(None if x[name] is None else x[name].float() for name in LEAVES))
        assert y.dtype == dtype
        assert_rows_close(y, peer, bound(n, dtype), f"N={n} Nk={nk} {gates}")


@pytest.mark.parametrize("n", [7, 1000, 4096, 10000, 65536, 65537, 100000])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_match_torch_fft(dtype, n):
    """du, dk, dpregate and dpostgate against autograd through the float32 formulation (float32 leaves holding the
    same values), each within the op's bound for its dtype."""
    x = inputs(3, 4, n, n // 2 + 1, dtype, gated=True, seed=n)
    got = grads_of(ours, x, LEAVES)
    peer = grads_of(torch_fft_conv, x, LEAVES, torch.float32)
    for name in LEAVES:
        grad = got[name]
        assert grad.dtype == x[name].dtype and grad.shape == x[name].shape, f"d{name}: {grad.dtype} {grad.shape}"
        assert_rows_close(grad, peer[name], bound(n, grad.dtype, dtype), f"N={n} d{name}")


# -- FlashFFTConv --------------------------------------------------------------------------------------------------

def flash_fft_conv(n, dtype):
    """FlashFFTConv for sequences of n samples (FFT size 2N: causal), in its layout: u and the gates (B, H, N) in the
    module's dtype, k (H, Nk) float32, both gates or neither."""
    try:
        from flashfftconv import FlashFFTConv
    except ImportError as e:
        pytest.skip(f"FlashFFTConv does not import here ({type(e).__name__}: {e}); it is built from source by "
                    f"tools/device/flashfftconv.sh")
    return FlashFFTConv(2 * n, dtype).to("cuda")


@pytest.mark.parametrize("n", [256, 1024, 4096, 16384, 65536])
@pytest.mark.parametrize("gates", ["none", "both"])
def test_forward_matches_flashfftconv(gates, n):
    """bf16 (FlashFFTConv's error is measured in bf16 only) at its FFT sizes 512 .. 131072: the output, for filters
    as long as the sequence and a third of it."""
    peer_conv = flash_fft_conv(n, torch.bfloat16)
    for nk in (n, n // 3):
        x = inputs(4, 8, n, nk, torch.bfloat16, gates == "both", seed=nk)
        args = (x["u"], x["k"], x["pregate"], x["postgate"])
        with torch.no_grad():
            y = ours(*args)
            peer = peer_conv(*args)
        torch.cuda.synchronize()
        assert peer.shape == y.shape, f"FlashFFTConv gave {tuple(peer.shape)}"
        assert_rows_close(y, peer, PEER_TOL, f"N={n} Nk={nk} {gates}")


@pytest.mark.parametrize("n", [1024, 4096, 16384, 65536])
def test_gradients_match_flashfftconv(n):
    """With both gates, bf16: du, dpregate and dpostgate, and dk from N = PEER_DK_FROM (below, FlashFFTConv's own
    filter gradient is coarser than the bound)."""
    peer_conv = flash_fft_conv(n, torch.bfloat16)
    x = inputs(4, 8, n, n, torch.bfloat16, gated=True, seed=n)
    names = LEAVES if n >= PEER_DK_FROM else ("u", "pregate", "postgate")
    got = grads_of(ours, x, LEAVES)
    peer = grads_of(peer_conv, x, LEAVES)
    for name in names:
        assert peer[name].shape == got[name].shape, f"d{name}: FlashFFTConv gave {tuple(peer[name].shape)}"
        assert_rows_close(got[name], peer[name], PEER_TOL, f"N={n} d{name}")
