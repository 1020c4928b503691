"""``tk_ops.nn.Linear``: ``torch.nn.Linear`` on the tk_ops GEMM."""
from __future__ import annotations

import torch

from .. import _ext
from ..errors import InputError


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # One op, forward and backward in C++ (kernels/gemm/autograd.cpp), its checks included: a Python autograd
    # formula would cost more host time per call than the GEMM itself at small sizes, and dW comes out in the
    # weight's own layout, so nothing is copied between the GEMMs and the optimizer.
    return _ext.call("gemm", "linear", "tk_ops.nn.Linear", x, weight, bias)


class Linear(torch.nn.Linear):
    """``nn.Linear`` computing ``x @ weight.T + bias`` with the tk_ops bf16 GEMM, forward and backward.

    Same constructor, parameters and state_dict as ``torch.nn.Linear``; parameters are created in bfloat16
    unless ``dtype`` says otherwise (the kernels compute in bfloat16, so the module must be bfloat16 when it
    runs). ``in_features`` and ``out_features`` must be multiples of 8: the products of the forward and the
    backward then meet TMA's 16-byte row rule for any number of tokens.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=torch.bfloat16):
        # The module's own promise (every token count works, forward and backward), checked once here; the op
        # checks each call's tensors.
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
        return _linear(x, self.weight, self.bias)
