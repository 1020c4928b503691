"""Mamba-2 chunked-scan (SSD) benchmark: tk_ops.mamba2_chunk_scan against mamba_ssm's Triton kernels,
`mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`, when that module imports (it needs only triton and
einops: docs/mamba2.md says how to carry its sources to a GPU machine). bf16 x, B, C; fp32 dt, A (and D, dt_bias);
one group; l from 1024 to 16384 on two shapes (b, h, p, n, chunk):

- 16, 16, 64, 64, 64: a small state and short chunks;
- 4, 64, 64, 128, 256: the Mamba2 module's defaults (d_model 2048), with its options: D per head, dt_bias and softplus.

Both sides read the same (b, l, h, p) tensors, mamba_ssm's layout, with the same arguments. The comparison is in
milliseconds (the table's ratio is ours over the best peer); the TFLOP/s beside them count the SSD's tensor-core work
at the requested chunk size T (docs/mamba2.md): 2 b h l (T n + T p + 2 p n).

--backward times a training step: the forward and the gradients of every input that takes one (autograd.grad with
the same output gradient on every side), counted as 3x the forward's FLOPs.

Checks: the output, and each gradient on its own (dx, ddt, dA, dB, dC, and dD, ddt_bias on the module shape), against
mamba_ssm's within FORWARD_TOL or BACKWARD_TOL of their dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .core import Case, Impl

TITLE = "Mamba-2 chunked scan (SSD, bf16)"
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)
BACKWARD_FLOPS = 3.0  # forward + backward, over the forward
# Two implementations, each within 1e-2 (output) and 2e-2 (gradients) of float64 in bf16, the summed gradients
# (dA, dD, ddt_bias: fp32) tighter; the tolerance covers both sides' errors.
FORWARD_TOL = {torch.bfloat16: 2e-2, torch.float32: 2e-2}
BACKWARD_TOL = {torch.bfloat16: 5e-2, torch.float32: 5e-2}
INPUT_NAMES = ("x", "dt", "A", "B", "C", "D", "dt_bias")


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    head_dim: int
    state_dim: int
    chunk_size: int
    module_options: bool  # D per head, dt_bias and dt_softplus, as the Mamba2 module calls the scan
    label: str


SHAPES = (
    Shape(16, 16, 64, 64, 64, False, "b16 h16 p64 n64 chunk64"),
    Shape(4, 64, 64, 128, 256, True, "Mamba2 module: b4 h64 p64 n128 chunk256, D dt_bias softplus"),
)
GROUPS = 1


def flops(s: Shape, l: int) -> float:
    t = s.chunk_size
    return 2.0 * s.batch * s.heads * l * (t * s.state_dim + t * s.head_dim + 2 * s.head_dim * s.state_dim)


PEER_NOTE = ("mamba_ssm left out: mamba_ssm.ops.triton.ssd_combined does not import here (docs/mamba2.md says how "
             "to carry its sources)")


def _peer():
    """mamba_ssm's mamba_chunk_scan_combined, or None when it does not import here."""
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception:  # not installed, or its triton / einops missing: the peer is left out
        return None
    return mamba_chunk_scan_combined


def _ours(x, dt, A, B, C, chunk_size, D=None, dt_bias=None, dt_softplus=False):
    import tk_ops
    return tk_ops.mamba2_chunk_scan(x, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias, dt_softplus=dt_softplus)


def _scan_call(scan, s: Shape):
    """fn(x, dt, A, B, C, D, dt_bias) -> out for one side, the shape's options passed the same way to both."""
    def fn(x, dt, A, B, C, D, dt_bias):
        return scan(x, dt, A, B, C, s.chunk_size, D=D, dt_bias=dt_bias, dt_softplus=s.module_options)
    return fn


def _training_step(forward):
    """fn(x, dt, A, B, C, D, dt_bias, d_out) -> the gradients of every input that requires one."""
    def fn(*args):
        inputs, d_out = args[:-1], args[-1]
        leaves = tuple(t for t in inputs if t is not None and t.requires_grad)
        return torch.autograd.grad(forward(*inputs), leaves, d_out)
    return fn


def make_inputs(s: Shape, l: int, backward: bool = False, device="cuda"):
    """x, dt, A, B, C, D, dt_bias (D and dt_bias None unless the shape uses them), then d_out when ``backward``: the
    scales of a trained layer, decays exp(dt A) between about 0.3 and 1."""
    b, h, p, n = s.batch, s.heads, s.head_dim, s.state_dim
    grad = dict(requires_grad=backward)
    x = torch.randn(b, l, h, p, device=device, dtype=torch.bfloat16, **grad)
    if s.module_options:  # raw dt before softplus: softplus(-3 .. -1) is 0.05 .. 0.3
        dt = (torch.randn(b, l, h, device=device) * 0.5 - 2.0).requires_grad_(backward)
    else:
        dt = (torch.rand(b, l, h, device=device) * 0.1).requires_grad_(backward)
    A = (-torch.exp(torch.rand(h, device=device) * math.log(16.0))).requires_grad_(backward)
    B, C = ((torch.randn(b, l, GROUPS, n, device=device) * (2 / math.sqrt(n))).bfloat16().requires_grad_(backward)
            for _ in range(2))
    D = dt_bias = None
    if s.module_options:
        D = torch.ones(h, device=device, requires_grad=backward)
        dt_bias = (torch.rand(h, device=device) - 2.0).requires_grad_(backward)
    inputs = (x, dt, A, B, C, D, dt_bias)
    if backward:
        inputs += (torch.randn(b, l, h, p, device=device, dtype=torch.bfloat16),)
    return inputs


def mamba2_case(s: Shape, l: int, backward: bool = False) -> Case:
    def make():
        import tk_ops
        tk_ops._ext.require("mamba2")  # loads the extension, or says that the family was left out of the build
        return make_inputs(s, l, backward)

    named = [("tk_ops", _scan_call(_ours, s), True)]
    peer = _peer()
    notes = []
    if peer is not None:
        named.append(("mamba_ssm", _scan_call(peer, s), False))
    else:
        notes.append(PEER_NOTE)
    shape = (s.batch, l, s.heads, s.head_dim)
    if backward:
        impls = [Impl(name, _training_step(fn), ours=ours) for name, fn, ours in named]
        grads = tuple(f"d{n}" for n in INPUT_NAMES[:7 if s.module_options else 5])
        return Case(f"{s.label} fwd+bwd", f"l={l}", shape, BACKWARD_FLOPS * flops(s, l), make, impls,
                    tol=dict(BACKWARD_TOL), outputs=grads, notes=notes)
    return Case(s.label, f"l={l}", shape, flops(s, l), make, [Impl(name, fn, ours=ours) for name, fn, ours in named],
                tol=dict(FORWARD_TOL), outputs=("out",), notes=notes)


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    return [mamba2_case(s, l, backward) for s in SHAPES for l in (QUICK_SEQ_LENS if quick else SEQ_LENS)]
