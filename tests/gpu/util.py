"""Helpers shared by the GPU tests: comparisons, tolerances and output buffers that cannot pass unwritten."""
from __future__ import annotations

import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere in out gives inf so it can never pass."""
    out64, ref64 = out.detach().double(), ref.detach().double()
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = ref64.norm().item()
    return (out64 - ref64).norm().item() / (denom if denom > 0 else 1.0)


def worst_row(out: torch.Tensor, ref: torch.Tensor) -> tuple[int, float]:
    """The row (a vector along the last dimension, leading dimensions flattened) with the largest error, and that
    error: ||out_r - ref_r|| over the larger of ||ref_r|| and the root-mean-square row norm, so that a row of small
    values is measured against the tensor's scale rather than its own (which rounding alone could exceed)."""
    width = out.shape[-1] if out.dim() > 0 else 1
    out64, ref64 = out.detach().double().reshape(-1, width), ref.detach().double().reshape(-1, width)
    if out64.numel() == 0:
        return 0, 0.0
    ref_norms = ref64.norm(dim=1)
    scale = ref_norms.square().mean().sqrt().clamp_min(1e-300)
    err = (out64 - ref64).norm(dim=1) / torch.maximum(ref_norms, scale)
    err = torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))
    row = int(err.argmax())
    return row, float(err[row])


# A row may be this many times worse than the whole tensor's bound: one row's rounding error is a sum over fewer
# terms than the whole tensor's, so it fluctuates more, but a row that is wrong (unwritten, from another head, a
# dropped tile) is off by order 1.
ROW_SLACK = 4.0


def assert_close(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "", row_tol: float | None = None) -> None:
    """out matches ref within `tol` as a whole (relative Frobenius norm) and within `row_tol` (default
    ROW_SLACK * tol) in every row, so an error confined to a few rows cannot hide behind the rest."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    err = rel_err(out, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"
    row_tol = ROW_SLACK * tol if row_tol is None else row_tol
    row, row_err = worst_row(out, ref)
    assert row_err <= row_tol, (f"{what}: row {row} (of the last dimension, leading dimensions flattened) has "
                                f"relative error {row_err:.3e} > {row_tol:.1e} (whole tensor: {err:.3e})")


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
