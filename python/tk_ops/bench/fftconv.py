"""FFT convolution benchmark: tk_ops.fftconv against the torch.fft formulation users write (cuFFT), in the same run,
and FlashFFTConv (HazyResearch/flash-fft-conv, not on PyPI) when `from flashfftconv import FlashFFTConv` works. u is
(B, H, N) bf16, k is (H, N) fp32 (randn / sqrt(N), so that y stays of unit scale), H = 1024 channels, B = 16, N from
256 to 65536 (B = 4 at 65536, as in the peers' published numbers), then one sequence at 2^18 (H = 1024) and 2^20
(H = 256), past the block path; one extra row at N = 4096 with both gates,
y = postgate * conv(u * pregate, k).

The torch.fft formulation: y = irfft(rfft(u, 2N) * rfft(k, 2N), 2N)[..., :N], gates included, computed in float32
and cast to u's dtype. It is the first peer, the reference every output is checked against. The same function
compiled with torch.compile (dynamic=False, so once per shape, on the first call, before the warm-up and the timing)
is the second peer, "torch.fft compiled": Inductor fuses the casts, gates and spectrum product around cuFFT's
calls. FlashFFTConv gets the FFT size 2N, its causal setting.

FLOPs follow the ThunderKittens paper's convention, whatever work each side really does: 2 * 10 * N log2(N) * H * B
for a forward. The comparison is the time; the ratio is ours over the best peer.

Sizes tk_ops.fftconv refuses (past N = 2^20) would raise its InputError, which the table records as tk_ops's result
for that size (the peers are still timed) and which makes the command exit 1, as any row where ours did not run does.

--backward times a training step: the forward and the gradients of u, k and the gates (autograd.grad with the same
output gradient on every side), counted as 3x the forward's FLOPs as in the other families. tk_ops's backward runs
the forward kernel once more for u and pregate and once for postgate, and its filter-gradient kernels for k
(docs/fftconv.md, "Backward").

Checks: y, or each gradient on its own (du, dk, and dpregate, dpostgate when gated), against torch.fft's within
FORWARD_TOL or BACKWARD_TOL of its dtype.
"""
from __future__ import annotations

import math

import torch

from .core import Case, Impl, allow_recompiles

TITLE = "FFT convolution (H = 1024, bf16 u, fp32 k)"
HEADS = 1024
# (N, B): the batch shrinks at 65536 to keep the peers' intermediates (float32, 2N points) within memory.
SIZES = ((256, 16), (1024, 16), (4096, 16), (16384, 16), (65536, 4))
# (N, B, H) past the block path, where tk_ops convolves with cuFFT as well: one sequence, fewer channels at 2^20.
LONG_SIZES = ((262144, 1, 1024), (1048576, 1, 256))
QUICK_SIZES = ((1024, 16), (4096, 16))
GATED_SIZE = (4096, 16)
BACKWARD_FLOPS = 3.0  # forward + backward, over the forward
DTYPE = torch.bfloat16
# The reference is float32 (exact to ~1e-6 before the cast to bf16): the tolerance is each side's own error, measured
# 5e-3 .. 7.6e-3 for tk_ops (all outputs together) on an H100.
FORWARD_TOL = {torch.bfloat16: 2e-2, torch.float32: 2e-2}
BACKWARD_TOL = {torch.bfloat16: 5e-2, torch.float32: 5e-2}


def flops(n: int, batch: int, heads: int = HEADS) -> float:
    return 2.0 * 10 * n * math.log2(n) * heads * batch


def torch_fft(u, k, pregate=None, postgate=None):
    """The torch.fft formulation, gates included: in float32 for 16-bit inputs, as users write it, and in float64
    for float64 ones, so that the formulation itself can be held to the float64 reference."""
    n = u.shape[-1]
    compute = torch.promote_types(u.dtype, torch.float32)
    v = u.to(compute) if pregate is None else u.to(compute) * pregate.to(compute)
    y = torch.fft.irfft(torch.fft.rfft(v, n=2 * n) * torch.fft.rfft(k.to(compute), n=2 * n), n=2 * n)[..., :n]
    if postgate is not None:
        y = y * postgate.to(compute)
    return y.to(u.dtype)


def compiled_torch_fft():
    """torch_fft through torch.compile(dynamic=False), compiled on the first call (run_case makes it untimed)."""
    made = {}

    def fn(u, k, pregate=None, postgate=None):
        if not made:
            # One compilation per shape and gating.
            allow_recompiles()
            made["fn"] = torch.compile(torch_fft, dynamic=False)
        return made["fn"](u, k, pregate, postgate)
    return fn


def _ours(u, k, pregate=None, postgate=None):
    import tk_ops
    return tk_ops.fftconv(u, k, pregate=pregate, postgate=postgate)


def _flash_class():
    """FlashFFTConv, or None when it does not import here (its CUDA extension monarch_cuda is built from source)."""
    try:
        from flashfftconv import FlashFFTConv
    except Exception:
        return None
    return FlashFFTConv


def _flash(cls, fft_size: int, dtype: torch.dtype):
    """FlashFFTConv as a forward(u, k, pregate, postgate). The module (its DFT matrices and twiddles on the GPU) is
    built at the first call, which run_case makes untimed before the warm-up, and reused for every timed call."""
    modules = []

    def forward(u, k, pregate=None, postgate=None):
        if not modules:
            modules.append(cls(fft_size, dtype).to(u.device))
        return modules[0](u, k, pregate, postgate)
    return forward


def _training_step(forward):
    """fn(u, k, pregate, postgate, d_y) -> the gradients of u, k and of the gates that are given."""
    def fn(u, k, pregate, postgate, d_y):
        leaves = tuple(t for t in (u, k, pregate, postgate) if t is not None)
        return torch.autograd.grad(forward(u, k, pregate, postgate), leaves, d_y)
    return fn


def make_inputs(n: int, batch: int, heads: int = HEADS, gated: bool = False, backward: bool = False,
                device="cuda"):
    """u, k, pregate, postgate (the gates None unless ``gated``), then d_y when ``backward``."""
    u = torch.randn(batch, heads, n, device=device, dtype=DTYPE, requires_grad=backward)
    k = (torch.randn(heads, n, device=device) / math.sqrt(n)).requires_grad_(backward)
    pregate = postgate = None
    if gated:
        pregate, postgate = (torch.randn(batch, heads, n, device=device, dtype=DTYPE, requires_grad=backward)
                             for _ in range(2))
    inputs = (u, k, pregate, postgate)
    if backward:
        inputs += (torch.randn(batch, heads, n, device=device, dtype=DTYPE),)
    return inputs


def fftconv_case(n: int, batch: int, gated: bool = False, backward: bool = False, heads: int = HEADS,
                 device="cuda") -> Case:
    def make():
        import tk_ops
        tk_ops._ext.require("fftconv")  # loads the extension, or says that the family was left out of the build
        return make_inputs(n, batch, heads, gated, backward, device)

    named = [("tk_ops", _ours, True), ("torch.fft", torch_fft, False),
             ("torch.fft compiled", compiled_torch_fft(), False)]
    notes = []
    flash = _flash_class()
    if flash is not None:
        named.append(("FlashFFTConv", _flash(flash, 2 * n, DTYPE), False))
    else:
        notes.append("FlashFFTConv left out: `from flashfftconv import FlashFFTConv` fails here "
                     "(tools/device/flashfftconv.sh builds it)")
    group = "bf16" + (", pregate + postgate" if gated else "") + (" fwd+bwd" if backward else "")
    forward_flops = flops(n, batch, heads)
    name = f"N={n} B={batch}" + ("" if heads == HEADS else f" H={heads}")
    if backward:
        impls = [Impl(name, _training_step(fn), ours=ours) for name, fn, ours in named]
        grads = ("du", "dk") + (("dpregate", "dpostgate") if gated else ())
        return Case(group, name, (batch, heads, n), BACKWARD_FLOPS * forward_flops, make, impls,
                    tol=dict(BACKWARD_TOL), outputs=grads, notes=notes)
    return Case(group, name, (batch, heads, n), forward_flops, make,
                [Impl(name, fn, ours=ours) for name, fn, ours in named], tol=dict(FORWARD_TOL), outputs=("y",),
                notes=notes)


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    plain = [fftconv_case(n, b, backward=backward) for n, b in (QUICK_SIZES if quick else SIZES)]
    long = [] if quick else [fftconv_case(n, b, backward=backward, heads=h) for n, b, h in LONG_SIZES]
    return plain + long + [fftconv_case(*GATED_SIZE, gated=True, backward=backward)]
