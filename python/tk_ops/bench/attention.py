"""Attention forward benchmark: tk_ops.attention against SDPA's FlashAttention and cuDNN backends
(torch.nn.attention.sdpa_kernel) in bf16, (B, 16, N, D) with B = 16384 / N, D in {64, 128}, causal or
not. FLOPs = 4 * B * H * N^2 * D (two matrix products), halved when causal.
"""
from __future__ import annotations

import torch

from .core import Case, Impl

TITLE = "Attention forward (B x 16 heads x N x D, bf16)"
HEADS = 16
TOKENS = 16384  # batch = TOKENS / N
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def fn(q, k, v, causal):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def attention_case(n: int, d: int, causal: bool) -> Case:
    import tk_ops
    from torch.nn.attention import SDPBackend

    b = max(1, TOKENS // n)

    def make_inputs():
        q, k, v = (torch.randn(b, HEADS, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        return q, k, v, causal

    def ours(q, k, v, causal):
        return tk_ops.attention(q, k, v, causal=causal)

    flops = 4.0 * b * HEADS * n * n * d / (2 if causal else 1)
    return Case(f"D={d}{' causal' if causal else ''}", f"N={n}", (b, HEADS, n, d), flops, make_inputs,
                [Impl("tk_ops", ours, ours=True), Impl("sdpa cudnn", _sdpa(SDPBackend.CUDNN_ATTENTION)),
                 Impl("sdpa flash", _sdpa(SDPBackend.FLASH_ATTENTION))])


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    if backward:
        raise SystemExit("the attention backward is not available yet: benchmark the forward")
    lens = QUICK_SEQ_LENS if quick else SEQ_LENS
    return [attention_case(n, d, causal) for d in (64, 128) for causal in (False, True) for n in lens]
