"""Based linear attention on Hopper: the causal forward and backward over whole sequences, and the decoding step.

``based(q, k, v, scale=None, normalize=True, eps=1e-6, initial_state=None, output_final_state=False)`` takes
q, k (B, H, N, 16) and v (B, H, N, Dv), Dv a multiple of 16 up to 128, all bf16 or all fp16; any N (N = 0 gives an
empty output and the initial, or zero, state). With the Taylor feature map phi(x) = [1, x, vec(x x^T) / sqrt(2)]
(273 features) and s_ij = scale * q_i . k_j (scale defaults to 16^-1/2 and multiplies the queries only)::

    w_ij  = phi(scale q_i) . phi(k_j) = 1 + s_ij + s_ij^2 / 2
    num_i = kv0 phi(scale q_i) + sum_{j <= i} w_ij v_j
    den_i = k_sum0 . phi(scale q_i) + sum_{j <= i} w_ij
    o_i   = num_i / (den_i + eps) if normalize else num_i

computed in fp32 and returned in v's dtype and memory order. The recurrent state is the pair (kv, k_sum): kv
(B, H, Dv, 273) = sum_j v_j phi(k_j)^T and k_sum (B, H, 273) = sum_j phi(k_j), float32, contiguous (phi of the
unscaled keys, so the state does not depend on ``scale``). ``output_final_state=True`` returns ``(o, (kv, k_sum))``;
``initial_state=(kv0, k_sum0)`` continues from such a state, so a sequence processed in pieces gives the outputs of
one pass. The semantics are flash-linear-attention's ``parallel_based`` / ``fused_chunk_based`` (docs/based.md), and
``tk_ops.reference.based`` is the float64 reference.

``based_step(q, k, v, state, scale=None, normalize=True, eps=1e-6)`` decodes one token per sequence: q, k (B, H, 16)
and v (B, H, Dv) (or (B, H, 1, 16) and (B, H, 1, Dv), with the output shaped likewise). It adds the token to
``state = (kv, k_sum)`` in place and returns its output (B, H, Dv), which sees the token itself as in ``based``.
Prefill with ``based(..., output_final_state=True)``, then step: the outputs equal one pass over the whole sequence.

Strided inputs are fine: (B, N, H, D) tensors viewed with ``.transpose(1, 2)`` (what a fused projection gives) are
read in place, other layouts copied; the step reads any strides. Gradients reach q, k, v and the initial state, from
o and from the final state; the autograd formula is C++ (kernels/based/autograd.cpp). The ops
(kernels/based/binding.cpp, which also holds every argument rule) trace under ``torch.compile(fullgraph=True)`` and
capture into CUDA graphs:

- ``torch.ops.tk_ops.based_fwd(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den)
  -> (o, kv, k_sum, den)``
- ``torch.ops.tk_ops.based_bwd(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum,
  initial_state_grad) -> (dq, dk, dv, d_kv0, d_k_sum0)``
- ``torch.ops.tk_ops.based_step(q, k, v, kv!, k_sum!, scale, normalize, eps) -> o``

An output not asked for (the state without ``output_final_state``, ...) is an empty (0,) float32 tensor.
``based_step`` has no gradient: it is for decoding.
"""
from __future__ import annotations

import torch

from . import _ext
from .errors import InputError


def based(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None, normalize: bool = True,
          eps: float = 1e-6, initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
          output_final_state: bool = False):
    """Causal Based linear attention of q, k (B, H, N, 16) and v (B, H, N, Dv) (module docstring). Returns o
    (B, H, N, Dv) in v's dtype, or ``(o, (kv, k_sum))`` when ``output_final_state``. Differentiable in q, k, v and
    ``initial_state``."""
    if not (isinstance(normalize, bool) and isinstance(output_final_state, bool)) or isinstance(scale, bool) or \
            isinstance(eps, bool):
        raise _python_type_error("tk_ops.based", scale, eps, normalize=normalize,
                                 output_final_state=output_final_state)
    kv0, k_sum0 = _state_pair("tk_ops.based", "initial_state", initial_state, optional=True)
    o, kv, k_sum, _ = _ext.call("based", "based_fwd", "tk_ops.based", q, k, v, scale, normalize, eps, kv0, k_sum0,
                                output_final_state, False)
    return (o, (kv, k_sum)) if output_final_state else o


def based_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
               scale: float | None = None, normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """One new token per sequence (module docstring): adds it to ``state = (kv, k_sum)`` in place and returns its
    output o, (B, H, Dv) (or (B, H, 1, Dv) for 4-D inputs), in v's dtype."""
    if not isinstance(normalize, bool) or isinstance(scale, bool) or isinstance(eps, bool):
        raise _python_type_error("tk_ops.based_step", scale, eps, normalize=normalize)
    kv, k_sum = _state_pair("tk_ops.based_step", "state", state, optional=False)
    return _ext.call("based", "based_step", "tk_ops.based_step", q, k, v, kv, k_sum, scale, normalize, eps)


def value_dims() -> list[int]:
    """The value dimensions (v's last) this build's Based kernels take."""
    return list(_ext.require("based").based_value_dims())


def _python_type_error(name: str, scale, eps, **flags) -> InputError:
    # Python types are the one thing the ops cannot see: torch would take normalize=1 for True and scale=True for 1.0.
    # Only a failed check builds the message, so a call costs the isinstance tests alone.
    for flag, value in flags.items():
        if not isinstance(value, bool):
            return InputError(f"{name}: {flag} must be a bool, got {type(value).__name__}")
    if isinstance(scale, bool):
        return InputError(f"{name}: scale must be a finite number or None, got {scale!r}")
    return InputError(f"{name}: eps must be a finite number >= 0, got {eps!r}")


def _state_pair(name: str, what: str, state, optional: bool):
    """(kv, k_sum) from a state argument; (None, None) for an absent optional one. The op checks the tensors."""
    if state is None and optional:
        return None, None
    if isinstance(state, (tuple, list)) and len(state) == 2 and all(isinstance(x, torch.Tensor) for x in state):
        return state[0], state[1]
    got = type(state).__name__
    if isinstance(state, (tuple, list)):
        got += " of " + ", ".join(type(x).__name__ for x in state)
    raise InputError(f"{name}: {what} must be a (kv, k_sum) pair of tensors, kv (B, H, Dv, 273) and k_sum "
                     f"(B, H, 273) float32, as tk_ops.based(..., output_final_state=True) returns it"
                     + (" (or None)" if optional else "") + f"; got {got}")
