"""Based linear-attention benchmark: tk_ops.based against flash-linear-attention's Triton kernels,
`fla.ops.based.fused_chunk_based` and `parallel_based`, when the `fla` package imports (it is pure Triton: install
the fla-core wheel). B = 16, H = 16, feature dim 16, value dim 64, bf16, normalised (use_norm=True), N from 1024 to
16384; then value dim 128 (two value blocks per head on our side) at three of those lengths.

FLOPs follow the peers' convention: 2 B N H E + 4 B N H Dv E with E = 1 + 16 + 16 * 16 = 273 features (the
recurrent form's state update and read-out, plus the normaliser); the intra-chunk products are not counted.
Both sides read the same (B, N, H, D) tensors, FLA's layout: tk_ops takes them as (B, H, N, D) views, in place.

--backward times a training step of the op: the forward and the backward together (autograd.grad of the output
for q, k and v, with the same output gradient on every side), counted as 3x the forward's FLOPs (the backward is
twice the forward, the peers' convention). FLA's ops differentiate through their own Triton backward kernels.
"""
from __future__ import annotations

import importlib.util

import torch

from .core import Case, Impl

TITLE = "Based linear attention (16 heads, feature dim 16, value dim 64, bf16)"
BATCH, HEADS, FEATURE_DIM, VALUE_DIM = 16, 16, 16, 64
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)
WIDE_VALUE_DIM, WIDE_SEQ_LENS = 128, (1024, 4096, 16384)
FEATURES = 1 + FEATURE_DIM + FEATURE_DIM * FEATURE_DIM


def flops(b: int, n: int, h: int, dv: int) -> float:
    return 2.0 * b * n * h * FEATURES + 4.0 * b * n * h * dv * FEATURES


BACKWARD_FLOPS = 3.0  # forward + backward, over the forward


def _ours(q, k, v):
    import tk_ops
    return tk_ops.based(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))


def _fla(name: str):
    def fn(q, k, v):
        import fla.ops.based as based_ops
        out = getattr(based_ops, name)(q, k, v, scale=None, use_norm=True)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)  # (B, N, H, Dv) -> the (B, H, N, Dv) view ours returns
    return fn


def _training_step(forward):
    """fn(q, k, v, d_o) -> (dq, dk, dv): the forward, then its gradients for the (B, N, H, D) leaves given d_o; the
    forward returns the (B, H, N, Dv) view, so d_o is handed over as one too."""
    def fn(q, k, v, d_o):
        return torch.autograd.grad(forward(q, k, v), (q, k, v), d_o.transpose(1, 2))
    return fn


def fla_available() -> bool:
    return importlib.util.find_spec("fla") is not None


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

    named = [("tk_ops", _ours, True)]
    if fla_available():
        named += [("fla fused_chunk", _fla("fused_chunk_based"), False), ("fla parallel", _fla("parallel_based"), False)]
    forward_flops = flops(BATCH, n, HEADS, value_dim)
    shape = (BATCH, HEADS, n, value_dim)
    if backward:
        impls = [Impl(name, _training_step(fn), ours=ours) for name, fn, ours in named]
        return Case(f"Dv={value_dim} fwd+bwd", f"N={n}", shape, BACKWARD_FLOPS * forward_flops, make_inputs, impls)
    return Case(f"Dv={value_dim}", f"N={n}", shape, forward_flops, make_inputs,
                [Impl(name, fn, ours=ours) for name, fn, ours in named])


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    main = [based_case(n, backward) for n in (QUICK_SEQ_LENS if quick else SEQ_LENS)]
    wide = [based_case(n, backward, WIDE_VALUE_DIM) for n in (QUICK_SEQ_LENS[:1] if quick else WIDE_SEQ_LENS)]
    return main + wide
