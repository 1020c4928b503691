"""Helpers shared by the GPU tests: comparisons, tolerances and output buffers that cannot pass unwritten."""
from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere in out gives inf so it can never pass."""
    out64, ref64 = out.double(), ref.double()
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = ref64.norm().item()
    return (out64 - ref64).norm().item() / (denom if denom > 0 else 1.0)


def assert_close(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "") -> None:
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    err = rel_err(out, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


# Tolerances by element type for results that went through rounding once.
TOL = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def randn(*shape, dtype=torch.float32, device="cuda"):
    return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill an output buffer with NaN (or a sentinel for integer/fp8 types) before a kernel runs,
    so an element the kernel never wrote cannot pass a comparison."""
    if t.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return t.fill_(float("nan"))
    if t.element_size() == 1:  # fp8: 0x7F is NaN in both e4m3 and e5m2; fill the bytes, return the tensor
        t.view(torch.uint8).fill_(0x7F)
        return t
    return t.fill_(-12345)


def fresh_pool_with_nan(numel: int, dtype=torch.float32) -> None:
    """Leave a poisoned (NaN) block of `numel` elements in the caching allocator, where an op's outputs will be
    allocated next, so an output element the kernel fails to write shows."""
    poison(torch.empty(numel, device="cuda", dtype=dtype))
    torch.cuda.synchronize()
