"""Attention benchmark: tk_ops.attention against SDPA's FlashAttention and cuDNN backends
(torch.nn.attention.sdpa_kernel) in bf16, (B, 16, N, D) with B = 16384 / N, D in {64, 128}, causal or
not. Forward FLOPs = 4 * B * H * N^2 * D (two matrix products), halved when causal.

--backward times the backward pass only, 2.5x the forward's FLOPs (five matrix products: S again, dP, dV,
dQ, dK). The forward runs once per input set, untimed; the timed call is then, for tk_ops, the backward op
itself (torch.ops.tk_ops.attention_bwd on the saved O and LSE) and, for the SDPA backends, autograd from the
saved graph (torch.autograd.grad with retain_graph=True, which runs only that backend's backward kernel).
"""
from __future__ import annotations

import torch

from .core import Case, Impl

TITLE = "Attention (B x 16 heads x N x D, bf16)"
HEADS = 16
TOKENS = 16384  # batch = TOKENS / N
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)
BACKWARD_FLOPS = 2.5  # backward / forward


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def fn(q, k, v, causal):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _sdpa_backward(backend):
    """(setup, fn): setup runs the forward with gradients on the chosen backend (which fixes the backward
    kernel autograd will call) and draws dO; fn computes (dQ, dK, dV) from the kept graph."""
    forward = _sdpa(backend)

    def setup(q, k, v, causal):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = forward(q, k, v, causal)
        return out, (q, k, v), _grad_like(out)

    def fn(out, wrt, grad):
        return torch.autograd.grad(out, wrt, grad, retain_graph=True)
    return setup, fn


def _grad_like(out: torch.Tensor) -> torch.Tensor:
    # Seeded by the output's shape, so every implementation of a case gets the same dO for the same inputs
    # (their results are compared).
    gen = torch.Generator(device=out.device).manual_seed(out.numel())
    return torch.randn(out.shape, device=out.device, dtype=out.dtype, generator=gen)


def _ours_backward():
    import tk_ops

    def setup(q, k, v, causal):
        scale = q.shape[-1] ** -0.5
        with torch.no_grad():
            o, lse = tk_ops.attention_with_lse(q, k, v, causal=causal, scale=scale)
        return q, k, v, o, _grad_like(o), lse, causal, scale

    def fn(q, k, v, o, dout, lse, causal, scale):
        return torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, causal, scale)
    return setup, fn


def attention_case(n: int, d: int, causal: bool, backward: bool = False) -> Case:
    import tk_ops
    from torch.nn.attention import SDPBackend

    b = max(1, TOKENS // n)

    def make_inputs():
        q, k, v = (torch.randn(b, HEADS, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        return q, k, v, causal

    def ours(q, k, v, causal):
        return tk_ops.attention(q, k, v, causal=causal)

    flops = 4.0 * b * HEADS * n * n * d / (2 if causal else 1)
    group = f"D={d}{' causal' if causal else ''}"
    peers = [("sdpa cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa flash", SDPBackend.FLASH_ATTENTION)]
    if backward:
        setup, fn = _ours_backward()
        impls = [Impl("tk_ops", fn, ours=True, setup=setup)]
        for name, backend in peers:
            peer_setup, peer_fn = _sdpa_backward(backend)
            impls.append(Impl(name, peer_fn, setup=peer_setup))
        return Case(group + " backward", f"N={n}", (b, HEADS, n, d), BACKWARD_FLOPS * flops, make_inputs, impls)
    return Case(group, f"N={n}", (b, HEADS, n, d), flops, make_inputs,
                [Impl("tk_ops", ours, ours=True)] + [Impl(name, _sdpa(backend)) for name, backend in peers])


def cases(quick: bool = False, backward: bool = False) -> list[Case]:
    lens = QUICK_SEQ_LENS if quick else SEQ_LENS
    return [attention_case(n, d, causal, backward) for d in (64, 128) for causal in (False, True) for n in lens]
