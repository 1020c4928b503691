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
                      dt_limit: tuple[float, float] = (0.0, math.inf), return_final_states: bool = False
                      ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Mamba-2's state-space scan (SSD) over whole sequences, forward and backward, on Hopper: the argument order,
    shapes and results of mamba_ssm's ``mamba_chunk_scan_combined``.

    Per batch row, head and token t, with the (p x n) state h (h_0 = ``initial_states`` or zeros)::

        dt_t = clamp(softplus(dt_t + dt_bias) if dt_softplus else dt_t + dt_bias, *dt_limit)
        h_t  = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T          (head i reads group i // (h / g) of B and C)
        y_t  = h_t C_t + D x_t,  then  y_t * z_t * sigmoid(z_t)  when z is given

    computed in fp32 in chunks of ``chunk_size`` tokens (the chunking never changes the result). The float64
    reference is ``tk_ops.reference.mamba2_chunk_scan``.

    Args:
        x: (b, l, h, p) bfloat16 or float16 CUDA tensor; p is 64 or 128; any l >= 1.
        dt: (b, l, h) float32, the step sizes before bias, softplus and clamp.
        A: (h,) float32, the (negative) decay rates.
        B: (b, l, g, n) in x's dtype, g dividing h; n is 64 or 128.
        C: (b, l, g, n), shaped like B.
        chunk_size: 64, 128 or 256; a speed choice only.
        D: None, or (h,) or (h, p) float32: the skip term ``D x_t``.
        z: None, or (b, l, h, p) in x's dtype: the output gate ``y * silu(z)``.
        dt_bias: None, or (h,) float32, added to dt before the softplus.
        initial_states: None (zeros) or (b, h, p, n) float32: the state before the first token.
        seq_idx: None, or (b, l) int32 ids packing several sequences into a row: the state restarts from zero where
            the id changes, and ``initial_states`` reach only a row that starts with id 0 (ids must form contiguous
            runs).
        dt_softplus: apply softplus to ``dt + dt_bias``.
        dt_limit: ``(low, high)`` clamp of the final dt; the default ``(0, inf)`` does not clamp a softplus output.
        return_final_states: also return the state after the last token.

    Returns:
        out (b, l, h, p) in x's dtype, or ``(out, final_states)`` with ``return_final_states``: final_states
        (b, h, p, n) float32, the state after the last token (after the last id's run with ``seq_idx``).

    Autograd:
        Differentiable in x, dt, A, B, C, D, z, dt_bias and initial_states, from out and from the final states,
        through a C++ autograd formula on the tk_ops backward kernels. The sums over heads and tokens (dB, dC, dD,
        dA, d dt_bias) are fp32 atomic additions, so they may differ in the last bits between runs; dx, dz and the
        state's gradient are deterministic. Traces under ``torch.compile(fullgraph=True)`` and captures into CUDA
        graphs.

    Raises:
        InputError: a shape disagrees with x's, p or n is not 64 or 128, g does not divide h, l is 0, chunk_size is
            not 64, 128 or 256 (or not an int), ``dt_limit`` is not a (low, high) pair with low <= high, or a flag is
            not a bool.
        DTypeError: x is not bfloat16 or float16, B, C or z is not in x's dtype, dt, A, D, dt_bias or initial_states
            is not float32, or seq_idx is not int32.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            mamba2 family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        b, l, h, p, g, n = 2, 4096, 32, 64, 1, 128
        kw = dict(device="cuda", dtype=torch.bfloat16)
        x = torch.randn(b, l, h, p, **kw, requires_grad=True)
        B, C = torch.randn(b, l, g, n, **kw), torch.randn(b, l, g, n, **kw)
        dt = torch.randn(b, l, h, device="cuda")
        A = -torch.rand(h, device="cuda") * 8
        dt_bias, D = torch.zeros(h, device="cuda"), torch.ones(h, device="cuda")
        y, state = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True,
                                            return_final_states=True)        # (2, 4096, 32, 64), (2, 32, 64, 128)
        y.float().square().mean().backward()

    Kernel design: docs/mamba2.md.
    """
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
    """One decoding step of Mamba-2: adds one token per sequence to ``state`` in place and returns its output,
    like mamba_ssm's ``selective_state_update`` for multi-head states.

    Per batch row and head, with the (p x n) state h::

        dt = softplus(dt + dt_bias) if dt_softplus else dt + dt_bias      # no dt_limit clamp, as in mamba_ssm
        h  = exp(dt A) h + dt x B^T                                       (head i reads group i // (h / g))
        y  = h C + D x,  then  y * z * sigmoid(z)  when z is given

    Prefill with ``mamba2_chunk_scan(..., return_final_states=True)``, then step: with the default ``dt_limit``
    the outputs equal one scan over the whole sequence. The float64 reference is ``tk_ops.reference.mamba2_step``.

    Args:
        state: (b, h, p, n) float32 CUDA tensor, as ``return_final_states`` gives it; n is 16, 32, 64, 128 or 256, any
            p. Updated in place.
        x: (b, h, p) bfloat16 or float16; any strides (slices of one projection are read in place).
        dt: (b, h) float32 or x's dtype.
        A: (h,) float32.
        B: (b, g, n) in x's dtype, g dividing h.
        C: (b, g, n), shaped like B.
        D: None, or (h,) or (h, p) float32.
        z: None, or (b, h, p) in x's dtype: the output gate.
        dt_bias: None, or (h,) float32.
        dt_softplus: apply softplus to ``dt + dt_bias``.

    Returns:
        y (b, h, p) in x's dtype.

    Autograd:
        No gradient: the step is for decoding; its output never requires grad. A state that requires grad while
        gradients are enabled is refused (changing it in place would corrupt that graph): pass it ``.detach()``-ed
        or step under ``torch.no_grad()``.

    Raises:
        InputError: a shape is not one of those above or disagrees with the state's, n is not a state dimension the
            step takes, g does not divide h, ``dt_softplus`` is not a bool, or the state requires grad.
        DTypeError: x is not bfloat16 or float16, B, C or z is not in x's dtype, dt is neither float32 nor x's dtype,
            or the state, A, D or dt_bias is not float32.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
            mamba2 family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        b, h, p, g, n = 2, 32, 64, 1, 128
        kw = dict(device="cuda", dtype=torch.bfloat16)
        A, D, dt_bias = -8 * torch.rand(h, device="cuda"), torch.ones(h, device="cuda"), torch.zeros(h, device="cuda")
        state = torch.zeros(b, h, p, n, device="cuda")     # or the final_states of a prefill by mamba2_chunk_scan
        x_t, z_t = torch.randn(b, h, p, **kw), torch.randn(b, h, p, **kw)
        B_t, C_t = torch.randn(b, g, n, **kw), torch.randn(b, g, n, **kw)
        dt_t = torch.randn(b, h, device="cuda")
        y_t = tk_ops.mamba2_step(state, x_t, dt_t, A, B_t, C_t, D=D, z=z_t, dt_bias=dt_bias, dt_softplus=True)
        # y_t (2, 32, 64) bfloat16; state now includes the token
    """
    if not isinstance(dt_softplus, bool):
        # The one thing the op cannot see: torch would take dt_softplus=1 for True.
        raise InputError(f"tk_ops.mamba2_step: dt_softplus must be a bool, got {type(dt_softplus).__name__}")
    return _ext.call("mamba2", "mamba2_step", "tk_ops.mamba2_step", state, x, dt, A, B, C, D, z, dt_bias, dt_softplus)


def _limits(dt_limit) -> tuple[float, float]:
    if (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in dt_limit)):
        return float(dt_limit[0]), float(dt_limit[1])
    raise InputError(f"tk_ops.mamba2_chunk_scan: dt_limit must be a (low, high) pair of numbers, got {dt_limit!r}")
