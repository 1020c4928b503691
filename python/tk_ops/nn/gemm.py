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
    """``torch.nn.Linear`` on the tk_ops bfloat16 GEMM, forward and backward: ``y = x @ weight.T + bias``.

    Same constructor, parameters and state_dict as ``torch.nn.Linear``: ``weight`` (out_features, in_features)
    and ``bias`` (out_features,), initialised as torch initialises them, so a checkpoint of one loads into the
    other. The kernels compute in bfloat16 with fp32 accumulation, the bias added in fp32 before the one rounding.

    Args:
        in_features: size of each input's last dimension; a multiple of 8.
        out_features: size of each output's last dimension; a multiple of 8 (both then meet TMA's 16-byte row rule in
            the forward and the backward for any number of tokens).
        bias: learn an additive bias (True) or not.
        device: where the parameters are created (None: torch's default device).
        dtype: the parameters' dtype, bfloat16 by default; the module must be bfloat16 when it runs.

    ``forward(x)`` returns ``y`` (..., out_features) bfloat16 for x (..., in_features) bfloat16, leading dimensions
    kept (:meth:`forward`).

    Autograd:
        Every parameter and x train: the backward runs two more tk_ops GEMMs (dX = dY @ weight, dW = dY^T @ x,
        dW in the weight's own layout) and sums dY for the bias, from a C++ autograd formula.

    Raises:
        InputError: in_features or out_features is not a multiple of 8 (at construction).

    Example::

        layer = tk_ops.nn.Linear(4096, 11008, device="cuda")          # bfloat16 parameters
        x = torch.randn(8, 2048, 4096, device="cuda", dtype=torch.bfloat16)
        y = layer(x)                                                   # (8, 2048, 11008) bfloat16
        y.float().square().mean().backward()                           # layer.weight.grad, layer.bias.grad
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.bfloat16) -> None:
        # The module's own promise (every token count works, forward and backward), checked once here; the op
        # checks each call's tensors.
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if v % 8:
                raise InputError(f"tk_ops.nn.Linear: {name}={v} must be a multiple of 8")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> "Linear":
        """A new tk_ops Linear with a bfloat16 copy of an existing ``torch.nn.Linear``'s parameters.

        Args:
            linear: the module to copy; its in_features and out_features must be multiples of 8. Its weight and bias
                may have any floating dtype: they are converted to bfloat16.

        Returns:
            A :class:`Linear` on the weight's device, with new parameters (bfloat16 copies, not shared: the
            original is left as it is). They are new leaves: gradients and optimizer state do not carry over.

        Raises:
            InputError: in_features or out_features is not a multiple of 8.

        Example::

            dense = torch.nn.Linear(1024, 4096, device="cuda")
            layer = tk_ops.nn.Linear.from_linear(dense)                 # bfloat16 copy, on the GPU
            y = layer(torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16))   # (16, 4096)
        """
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  device=linear.weight.device)
        with torch.no_grad():
            new.weight.copy_(linear.weight)
            if linear.bias is not None:
                new.bias.copy_(linear.bias)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``y = x @ weight.T + bias`` on the tk_ops GEMM.

        Args:
            x: (..., in_features) bfloat16 CUDA tensor on the parameters' device, any number of leading dimensions and
                tokens.

        Returns:
            y (..., out_features) bfloat16, x's leading dimensions kept.

        Autograd:
            Differentiable in x, weight and bias through the op's C++ autograd formula (two more GEMMs).

        Raises:
            DTypeError: x or a parameter is not bfloat16 (convert the module with ``.bfloat16()``).
            InputError: x's last dimension is not in_features.
            DeviceMismatchError: x is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                gemm family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            layer = tk_ops.nn.Linear(1024, 4096, bias=False, device="cuda")
            y = layer(torch.randn(4, 512, 1024, device="cuda", dtype=torch.bfloat16))   # (4, 512, 4096)
        """
        return _linear(x, self.weight, self.bias)
