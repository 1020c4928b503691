"""Based linear-attention benchmark: tk_ops.based against flash-linear-attention's Triton kernels,
`fla.ops.based.fused_chunk_based` and `parallel_based`, when the `fla` package imports (it is pure Triton: install
the fla-core wheel). B = 16, H = 16, feature dim 16, value dim 64, bf16, normalised (use_norm=True), N from 1024 to
16384; then value dim 128 (two value blocks per head on our side) at three of those lengths.

FLOPs follow the peers' convention: 2 B N H E + 4 B N H Dv E with E = 1 + 16 + 16 * 16 = 273 features (the
recurrent form's state update and read-out, plus the normaliser); the intra-chunk products are not counted.

Layouts: the inputs are (B, N, H, D) tensors; tk_ops takes them as (B, H, N, D) views, in place. FLA's public
functions take (B, T, H, K) too, but transpose them to the (B, H, T, K) its kernels read and copy them there (its
`input_guard` makes every argument contiguous) on every call. So that the copy is not timed as FLA's work, FLA is
called one level down, at the autograd Functions its public functions call (FusedChunkBasedFunction,
ParallelBasedFunction), on (B, H, T, K) contiguous copies made untimed in its set-up, followed by the same
normalisation o / (z + 1e-6) its public functions apply. Where those Functions are not found (another FLA version),
the public functions are timed on the (B, T, H, K) tensors, copy included, and the peer's name says "(API)".

Checks: every output against the first FLA op's within FORWARD_TOL (o) or BACKWARD_TOL (dq, dk, dv each on its own).

--backward times a training step of the op: the forward and the backward together (autograd.grad of the output
for q, k and v, with the same output gradient on every side), counted as 3x the forward's FLOPs (the backward is
twice the forward, the peers' convention). FLA's ops differentiate through their own Triton backward kernels.
"""
from __future__ import annotations

import importlib
import importlib.util

import torch

from .core import Case, Impl, _short

TITLE = "Based linear attention (16 heads, feature dim 16, value dim 64, bf16)"
BATCH, HEADS, FEATURE_DIM, VALUE_DIM = 16, 16, 16, 64
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)
WIDE_VALUE_DIM, WIDE_SEQ_LENS = 128, (1024, 4096, 16384)
FEATURES = 1 + FEATURE_DIM + FEATURE_DIM * FEATURE_DIM


def flops(b: int, n: int, h: int, dv: int) -> float:
    return 2.0 * b * n * h * FEATURES + 4.0 * b * n * h * dv * FEATURES


BACKWARD_FLOPS = 3.0  # forward + backward, over the forward
# Two bf16 implementations, each within 1e-2 (forward) and 2e-2 (gradients) of float64; measured 3.6e-3 and 4.4e-3
# apart (all outputs together) on an H100.
FORWARD_TOL = {torch.bfloat16: 2e-2, torch.float32: 2e-2}
BACKWARD_TOL = {torch.bfloat16: 5e-2, torch.float32: 5e-2}
FLA_OPS = (("fla fused_chunk", "fused_chunk_based", "fused_chunk", "FusedChunkBasedFunction"),
           ("fla parallel", "parallel_based", "parallel", "ParallelBasedFunction"))


def _ours(q, k, v):
    import tk_ops
    return tk_ops.based(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))


def _fla(name: str):
    """FLA's public function on (B, T, H, K) tensors (its layout copy included)."""
    def fn(q, k, v):
        import fla.ops.based as based_ops
        out = getattr(based_ops, name)(q, k, v, scale=None, use_norm=True)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)  # (B, N, H, Dv) -> the (B, H, N, Dv) view ours returns
    return fn


def _fla_kernel(function):
    """FLA's autograd Function on (B, H, T, K) contiguous tensors, normalised as its public functions do:
    o / (z + 1e-6) with scale K^-0.5. Returns (B, H, T, Dv), the shape of ours."""
    def fn(q, k, v):
        o, z = function.apply(q, k, v, q.shape[-1] ** -0.5)
        return (o / (z[..., None] + 1e-6)).to(q.dtype)
    return fn


def _head_first(*tensors, grad: bool = False):
    """(B, N, H, D) -> (B, H, N, D) contiguous copies, new leaves when ``grad``."""
    return tuple(t.detach().transpose(1, 2).contiguous().requires_grad_(grad) for t in tensors)


def _fla_kernel_impl(name: str, function, backward: bool) -> Impl:
    """The Impl of an FLA Function: its set-up copies the inputs (and d_o) into (B, H, T, K); the training step's
    gradients come back as (B, N, H, D) views, the layout of ours."""
    forward = _fla_kernel(function)
    if not backward:
        return Impl(name, forward, setup=lambda q, k, v: _head_first(q, k, v))

    def setup(q, k, v, d_o):
        return (*_head_first(q, k, v, grad=True), *_head_first(d_o))

    def step(q, k, v, d_o):
        return tuple(g.transpose(1, 2) for g in torch.autograd.grad(forward(q, k, v), (q, k, v), d_o))
    return Impl(name, step, setup=setup)


def _training_step(forward):
    """fn(q, k, v, d_o) -> (dq, dk, dv): the forward, then its gradients for the (B, N, H, D) leaves given d_o; the
    forward returns the (B, H, N, Dv) view, so d_o is handed over as one too."""
    def fn(q, k, v, d_o):
        return torch.autograd.grad(forward(q, k, v), (q, k, v), d_o.transpose(1, 2))
    return fn


def fla_available() -> bool:
    return importlib.util.find_spec("fla") is not None


def fla_functions() -> tuple[dict, list[str]]:
    """({peer name: FLA's autograd Function} for those found, [notes on those not found])."""
    found, notes = {}, []
    for name, _, module, attr in FLA_OPS:
        try:
            found[name] = getattr(importlib.import_module(f"fla.ops.based.{module}"), attr)
        except Exception as e:  # another FLA version, or it does not import: its public function is timed instead
            notes.append(f"{name}: fla.ops.based.{module}.{attr} not found ({_short(e)}); its public function is "
                         "timed instead, with its layout copy")
    return found, notes


def fla_impls(backward: bool) -> tuple[list[Impl], list[str]]:
    """The FLA peers (none, with a note, when fla does not import)."""
    if not fla_available():
        return [], ["FLA left out: the fla package does not import here (install fla-core)"]
    functions, notes = fla_functions()
    impls = []
    for name, public, _, _ in FLA_OPS:
        if name in functions:
            impls.append(_fla_kernel_impl(name, functions[name], backward))
        else:
            fn = _fla(public)
            impls.append(Impl(f"{name} (API)", _training_step(fn) if backward else fn))
    return impls, notes


def based_case(n: int, backward: bool = False, value_dim: int = VALUE_DIM) -> Case:
    def make_inputs():
        import tk_ops
        tk_ops._ext.require("based")  # loads the extension, or says that the family was left out of the build
        q, k = (torch.randn(BATCH, n, HEADS, FEATURE_DIM, device="cuda", dtype=torch.bfloat16,
                            requires_grad=backward) for _ in range(2))
        v = torch.randn(BATCH, n, HEADS, value_dim, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
        if not backward:
            return q, k, v
        return q, k, v, torch.randn(BATCH, n, HEADS, value_dim, device="cuda", dtype=torch.bfloat16)  # d_o

    peers, notes = fla_impls(backward)
    forward_flops = flops(BATCH, n, HEADS, value_dim)
    shape = (BATCH, HEADS, n, value_dim)
    if backward:
        impls = [Impl("tk_ops", _training_step(_ours), ours=True), *peers]
        return Case(f"Dv={value_dim} fwd+bwd", f"N={n}", shape, BACKWARD_FLOPS * forward_flops, make_inputs, impls,
                    tol=dict(BACKWARD_TOL), outputs=("dq", "dk", "dv"), notes=notes)
    return Case(f"Dv={value_dim}", f"N={n}", shape, forward_flops, make_inputs,
                [Impl("tk_ops", _ours, ours=True), *peers], tol=dict(FORWARD_TOL), outputs=("o",), notes=notes)


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    main = [based_case(n, backward) for n in (QUICK_SEQ_LENS if quick else SEQ_LENS)]
    wide = [based_case(n, backward, WIDE_VALUE_DIM) for n in (QUICK_SEQ_LENS[:1] if quick else WIDE_SEQ_LENS)]
    return main + wide
