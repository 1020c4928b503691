"""The GEMM's seams (torch.ops.tk_ops_testing, kernels/gemm/binding.cpp): tk_ops.matmul, tk_ops.nn.Linear's product
and tk_ops.scaled_mm in a kernel configuration the caller names, and the configuration a problem picks.

Each op checks its arguments with the public op's rules plus the configuration's, and raises the op's own errors
(ValueError, TypeError). "auto" runs what the public op runs; a named configuration runs unsplit (no split-K). They
have no autograd: forward products only.
"""
from __future__ import annotations

import torch

from .. import _ext

# The shipped configurations a call can name (kernels/gemm/gemm_configs.cuh, docs/gemm.md). Every one runs the
# 16-bit products (resident only contractions its B panel holds); the fp8 kernel comes in FP8_CONFIGS.
CONFIGS = ("big", "hinted", "resident", "small", "tiny")
FP8_CONFIGS = ("big", "small", "tiny")


def _ops():
    _ext.require("gemm")  # loads the extension, which defines torch.ops.tk_ops_testing
    return torch.ops.tk_ops_testing


def matmul(a: torch.Tensor, b: torch.Tensor, config: str) -> torch.Tensor:
    """tk_ops.matmul(a, b) in `config` ("auto" or one of CONFIGS)."""
    return _ops().matmul(a, b, config)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: str) -> torch.Tensor:
    """tk_ops.nn.Linear's product x @ weight.T (+ bias) in `config` ("auto" or one of CONFIGS)."""
    return _ops().linear(x, weight, bias, config)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype, config: str) -> torch.Tensor:
    """tk_ops.scaled_mm(a, b, scale_a, scale_b, out_dtype) in `config` ("auto" or one of FP8_CONFIGS)."""
    return _ops().scaled_mm(a, b, scale_a, scale_b, out_dtype, config)


def gemm_config(m: int, n: int, k: int, in_dtype: torch.dtype = torch.bfloat16, out_dtype: torch.dtype = torch.bfloat16,
                bias: bool = False) -> str:
    """The configuration the public op runs an m x n x k product in now, on the current GPU: one of CONFIGS, or "split"
    where tk_ops.matmul cuts the contraction (split-K; never with a bias, nor under
    torch.use_deterministic_algorithms). in_dtype bfloat16: tk_ops.matmul, or tk_ops.nn.Linear with `bias`;
    float8_e4m3fn: tk_ops.scaled_mm with `out_dtype`."""
    return _ops().gemm_config(m, n, k, in_dtype, out_dtype, bias)


def cannot_run(config: str, m: int, n: int, k: int, fp8: bool = False) -> str | None:
    """Why `config` cannot run an m x n x k product (bf16, or fp8 e4m3 with per-tensor scales), in the words of the
    testing op's rules, asked on meta tensors; None where it can."""
    def meta(*shape, dtype):
        return torch.empty(*shape, device="meta", dtype=dtype)

    try:
        if fp8:
            one = meta(1, dtype=torch.float32)
            e4m3 = torch.float8_e4m3fn
            scaled_mm(meta(m, k, dtype=e4m3), meta(n, k, dtype=e4m3).t(), one, one, torch.bfloat16, config)
        else:
            matmul(meta(m, k, dtype=torch.bfloat16), meta(k, n, dtype=torch.bfloat16), config)
    except ValueError as e:
        return str(e)
    return None
