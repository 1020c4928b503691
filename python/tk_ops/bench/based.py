"""Based linear-attention benchmark: the tk_ops forward kernel (torch.ops.tk_ops.based_fwd) against
flash-linear-attention's Triton kernels, `fla.ops.based.fused_chunk_based` and `parallel_based`, when the `fla`
package imports (it is pure Triton: install the fla-core wheel). B = 16, H = 16, feature dim 16, value dim 64,
bf16, normalised (use_norm=True), N from 1024 to 16384.

FLOPs follow the peers' convention: 2 B N H E + 4 B N H Dv E with E = 1 + 16 + 16 * 16 = 273 features (the
recurrent form's state update and read-out, plus the normaliser); the intra-chunk products are not counted.
Both sides read the same (B, N, H, D) tensors, FLA's layout: tk_ops takes them as (B, H, N, D) views, in place.
"""
from __future__ import annotations

import importlib.util

import torch

from .core import Case, Impl

TITLE = "Based linear attention (16 heads, feature dim 16, value dim 64, bf16)"
BATCH, HEADS, FEATURE_DIM, VALUE_DIM = 16, 16, 16, 64
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)
FEATURES = 1 + FEATURE_DIM + FEATURE_DIM * FEATURE_DIM


def flops(b: int, n: int, h: int, dv: int) -> float:
    return 2.0 * b * n * h * FEATURES + 4.0 * b * n * h * dv * FEATURES


def _ours(q, k, v):
    return torch.ops.tk_ops.based_fwd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, True, 1e-6)


def _fla(name: str):
    def fn(q, k, v):
        import fla.ops.based as based_ops
        out = getattr(based_ops, name)(q, k, v, scale=None, use_norm=True)
        out = out[0] if isinstance(out, tuple) else out
        return out.transpose(1, 2)  # (B, N, H, Dv) -> the (B, H, N, Dv) view ours returns
    return fn


def fla_available() -> bool:
    return importlib.util.find_spec("fla") is not None


def based_case(n: int) -> Case:
    def make_inputs():
        import tk_ops
        tk_ops._ext.require("based")  # loads the extension, or says that the family was left out of the build
        q, k = (torch.randn(BATCH, n, HEADS, FEATURE_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(BATCH, n, HEADS, VALUE_DIM, device="cuda", dtype=torch.bfloat16)
        return q, k, v

    impls = [Impl("tk_ops", _ours, ours=True)]
    if fla_available():
        impls += [Impl("fla fused_chunk", _fla("fused_chunk_based")), Impl("fla parallel", _fla("parallel_based"))]
    return Case(f"Dv={VALUE_DIM}", f"N={n}", (BATCH, HEADS, n, VALUE_DIM), flops(BATCH, n, HEADS, VALUE_DIM),
                make_inputs, impls)


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    if backward:
        raise SystemExit("error: the Based family has no backward kernel yet; `python -m tk_ops.bench based` times "
                         "the forward")
    return [based_case(n) for n in (QUICK_SEQ_LENS if quick else SEQ_LENS)]
