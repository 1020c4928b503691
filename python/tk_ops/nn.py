"""Drop-in ``torch.nn`` modules whose compute runs on tk_ops kernels."""
from __future__ import annotations

import torch

from .errors import DTypeError, InputError
from .gemm import matmul


class Linear(torch.nn.Linear):
    """``nn.Linear`` computing ``x @ weight.T + bias`` with the tk_ops bf16 GEMM, forward and backward.

    Same constructor, parameters and state_dict as ``torch.nn.Linear``; parameters are created in bfloat16
    unless ``dtype`` says otherwise (the kernels compute in bfloat16, so the module must be bfloat16 when it
    runs). ``in_features`` and ``out_features`` must be multiples of 8 (TMA's 16-byte row rule).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=torch.bfloat16):
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if v % 8:
                raise InputError(f"tk_ops.nn.Linear: {name}={v} must be a multiple of 8")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Linear":
        """A tk_ops Linear holding (a bfloat16 copy of) an existing nn.Linear's parameters."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  device=linear.weight.device)
        with torch.no_grad():
            new.weight.copy_(linear.weight)
            if linear.bias is not None:
                new.bias.copy_(linear.bias)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype != torch.bfloat16 or x.dtype != torch.bfloat16:
            raise DTypeError(f"tk_ops.nn.Linear computes in bfloat16: got input {x.dtype} and weight "
                            f"{self.weight.dtype}; convert with .to(torch.bfloat16)")
        if x.shape[-1] != self.in_features:
            raise InputError(f"tk_ops.nn.Linear: input has {x.shape[-1]} features, expected {self.in_features}")
        y = matmul(x.reshape(-1, self.in_features), self.weight.t())
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)
