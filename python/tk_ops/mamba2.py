"""Mamba-2's state-space scan (SSD) on Hopper: forward and backward over whole sequences, and the decoding step.

``mamba2_chunk_scan(x, dt, A, B, C, chunk_size=256, D=None, z=None, dt_bias=None, initial_states=None,
seq_idx=None, dt_softplus=False, dt_limit=(0.0, inf), return_final_states=False)`` has the argument order, shapes
and results of mamba_ssm's ``mamba_chunk_scan_combined``: x, z (b, l, h, p); dt (b, l, h) float32; A (h,) float32;
B, C (b, l, g, n) with g dividing h; D (h,) or (h, p) float32; dt_bias (h,) float32; initial_states (b, h, p, n)
float32; seq_idx (b, l) int32. x, B, C and z are all bfloat16 or all float16; p and n are 64 or 128; chunk_size is
64, 128 or 256 and never changes the result; any l >= 1. Per batch row, head and token, with the (p x n) state h::

    dt_t = clamp(softplus(dt_t + dt_bias) if dt_softplus else dt_t + dt_bias, *dt_limit)
    h_t  = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T          (head i reads group i // (h / g) of B and C)
    y_t  = h_t C_t + D x_t,  then  y_t * z_t * sigmoid(z_t)  when z is given

Returns out (b, l, h, p) in x's dtype, and ``(out, final_states)`` with the state after the last token, (b, h, p, n)
float32, when ``return_final_states``. ``seq_idx`` packs several sequences into a row: the state restarts from zero
where the id changes, and ``initial_states`` reach only a row that starts with id 0 (ids must form contiguous runs).
``tk_ops.reference.mamba2_chunk_scan`` is the float64 reference; docs/mamba2.md describes the kernels.

The op is ``torch.ops.tk_ops.mamba2_chunk_scan_fwd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
seq_idx, dt_softplus, dt_min, dt_max, return_final_states) -> (out, final_states)`` (kernels/mamba2/binding.cpp, which
holds every argument rule); final_states is an empty (0,) float32 tensor unless asked for.

Gradients flow to x, dt, A, B, C, D, z, dt_bias and initial_states, from out and from the final states, through
``torch.ops.tk_ops.mamba2_chunk_scan_bwd`` (registered as the op's autograd formula in C++; torch.compile and CUDA
graphs take it like any op). The sums over heads and tokens (dB, dC, dD, dA, dt_bias) are fp32 atomic additions, so
they may differ in the last bits from run to run; dx, dz and the states' gradient are deterministic.

Decoding: ``mamba2_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False)`` adds one token per
sequence to ``state`` in place, like mamba_ssm's ``selective_state_update`` for heads: state (b, h, p, n) float32 (as
``return_final_states`` gives it); x, z (b, h, p) bfloat16 or float16; dt (b, h) float32 or x's dtype; A (h,); B, C
(b, g, n) in x's dtype; D (h,) or (h, p), dt_bias (h,) float32; n one of 16, 32, 64, 128, 256, any p. The token may be a
strided view (slices of one projection). dt gets dt_bias and softplus but, as in mamba_ssm's step, no dt_limit clamp.
Returns y (b, h, p) in x's dtype; it has no gradient, and a state that requires one is refused. The op is
``torch.ops.tk_ops.mamba2_step`` (kernels/mamba2/binding.cpp, which holds its rules); the float64 reference is
``tk_ops.reference.mamba2_step``.
"""
from __future__ import annotations

import math

import torch

from . import _ext
from .errors import InputError


def mamba2_chunk_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                      chunk_size: int = 256, D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                      dt_bias: torch.Tensor | None = None, initial_states: torch.Tensor | None = None,
                      seq_idx: torch.Tensor | None = None, dt_softplus: bool = False,
                      dt_limit: tuple[float, float] = (0.0, math.inf), return_final_states: bool = False):
    """The Mamba-2 chunked scan (module docstring). Returns out (b, l, h, p) in x's dtype, or
    ``(out, final_states)`` when ``return_final_states``."""
    dt_min, dt_max = _limits(dt_limit)
    for flag, value in (("dt_softplus", dt_softplus), ("return_final_states", return_final_states)):
        if not isinstance(value, bool):
            raise InputError(f"tk_ops.mamba2_chunk_scan: {flag} must be a bool, got {type(value).__name__}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise InputError(f"tk_ops.mamba2_chunk_scan: chunk_size must be an int (64, 128 or 256), got "
                         f"{type(chunk_size).__name__}")
    out, final_states = _ext.call("mamba2", "mamba2_chunk_scan_fwd", "tk_ops.mamba2_chunk_scan", x, dt, A, B, C,
                                  chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_min, dt_max,
                                  return_final_states)
    return (out, final_states) if return_final_states else out


def mamba2_step(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                dt_bias: torch.Tensor | None = None, dt_softplus: bool = False) -> torch.Tensor:
    """One decoding token per sequence (module docstring): ``state`` (b, h, p, n) float32 is updated in place; returns
    y (b, h, p) in x's dtype."""
    if not isinstance(dt_softplus, bool):
        # The one thing the op cannot see: torch would take dt_softplus=1 for True.
        raise InputError(f"tk_ops.mamba2_step: dt_softplus must be a bool, got {type(dt_softplus).__name__}")
    return _ext.call("mamba2", "mamba2_step", "tk_ops.mamba2_step", state, x, dt, A, B, C, D, z, dt_bias, dt_softplus)


def _limits(dt_limit) -> tuple[float, float]:
    if (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in dt_limit)):
        return float(dt_limit[0]), float(dt_limit[1])
    raise InputError(f"tk_ops.mamba2_chunk_scan: dt_limit must be a (low, high) pair of numbers, got {dt_limit!r}")
