"""float64 references of the GEMM ops: matmul, scaled_mm (fp8), linear."""
from __future__ import annotations

import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in float64 (on the inputs' device), returned as float64."""
    return a.double() @ b.double()


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b) of fp8 inputs in float64."""
    return (a.double() * scale_a.double()) @ (b.double() * scale_b.double())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    y = x.double() @ weight.double().t()
    return y + bias.double() if bias is not None else y
