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
          output_final_state: bool = False
          ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Causal Based linear attention over whole sequences, forward and backward, on Hopper: softmax attention
    with exp replaced by its second-order Taylor expansion, so that it runs as a linear recurrence.

    With the feature map phi(x) = [1, x, vec(x x^T) / sqrt(2)] (273 features for x of 16) and
    s_ij = scale * q_i . k_j, per batch and head::

        w_ij  = phi(scale q_i) . phi(k_j) = 1 + s_ij + s_ij^2 / 2
        num_i = kv0 phi(scale q_i) + sum_{j <= i} w_ij v_j
        den_i = k_sum0 . phi(scale q_i) + sum_{j <= i} w_ij
        o_i   = num_i / (den_i + eps) if normalize else num_i

    computed in fp32: flash-linear-attention's ``parallel_based`` / ``fused_chunk_based``, whose float64
    reference is ``tk_ops.reference.based``. A sequence processed in pieces, each continuing from the previous
    piece's final state, gives the outputs of one pass.

    Args:
        q: (B, H, N, 16) bfloat16 or float16 CUDA tensor, any N >= 0 (N = 0 gives an empty output and the initial, or
            zero, state). (B, N, H, 16) tensors viewed with ``.transpose(1, 2)``, as a fused projection gives them,
            are read in place; other layouts are copied.
        k: (B, H, N, 16) in q's dtype.
        v: (B, H, N, Dv) in q's dtype, Dv a multiple of 16 up to 128 (``value_dims()`` in the module ``tk_ops.based``
            lists the build's).
        scale: multiplies the queries only; None means ``16 ** -0.5``. Must be finite.
        normalize: divide the numerator by the running denominator (True), or return the numerator alone.
        eps: added to the denominator; finite and >= 0.
        initial_state: None (a zero state) or ``(kv0, k_sum0)``: kv0 (B, H, Dv, 273) and k_sum0 (B, H, 273), float32,
            contiguous, as ``output_final_state=True`` returns them.
        output_final_state: also return the state after the last token.

    Returns:
        o (B, H, N, Dv) in v's dtype and memory order; with ``output_final_state``, ``(o, (kv, k_sum))``:
        kv (B, H, Dv, 273) = kv0 + sum_j v_j phi(k_j)^T and k_sum (B, H, 273) = k_sum0 + sum_j phi(k_j), float32,
        contiguous (phi of the unscaled keys, so the state does not depend on ``scale``).

    Autograd:
        Differentiable in q, k, v and ``initial_state``, from o and from the final state, through a C++ autograd
        formula on the tk_ops backward kernels. Traces under ``torch.compile(fullgraph=True)`` and captures into
        CUDA graphs.

    Raises:
        InputError: q or k is not (B, H, N, 16), the shapes disagree, Dv is not a value dimension the build takes,
            ``normalize`` or ``output_final_state`` is not a bool, ``scale`` or ``eps`` is out of range (or a bool),
            or ``initial_state`` is not a pair of tensors of the shapes above, contiguous.
        DTypeError: q, k and v are not all bfloat16 or all float16, or the initial state is not float32.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the based
            family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        q = torch.randn(4, 16, 2048, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(4, 16, 2048, 16, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(4, 16, 2048, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        o = tk_ops.based(q, k, v)                                                # (4, 16, 2048, 64) bfloat16
        o.float().square().mean().backward()
        o1, state = tk_ops.based(q[:, :, :1024], k[:, :, :1024], v[:, :, :1024], output_final_state=True)
        o2 = tk_ops.based(q[:, :, 1024:], k[:, :, 1024:], v[:, :, 1024:], initial_state=state)
        # torch.cat([o1, o2], dim=2) equals o up to rounding

    Kernel design: docs/based.md.
    """
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
    """One decoding step of Based linear attention: adds one new token per sequence to the recurrent state, in
    place, and returns that token's output.

    With phi and the state ``(kv, k_sum)`` of :func:`based`, per batch and head::

        kv    += v phi(k)^T
        k_sum += phi(k)
        o      = kv phi(scale q) / (k_sum . phi(scale q) + eps)     # kv phi(scale q) alone if not normalize

    so the output sees the token itself, as in ``based``: prefill with ``based(..., output_final_state=True)``,
    then step, and the outputs equal one pass over the whole sequence.

    Args:
        q: (B, H, 16) bfloat16 or float16 CUDA tensor, or (B, H, 1, 16); any strides (slices of one projection are
            read in place).
        k: shaped like q, in q's dtype.
        v: (B, H, Dv), or (B, H, 1, Dv) with 4-D q, in q's dtype; Dv a value dimension the build takes (a multiple of
            16 up to 128).
        state: ``(kv, k_sum)``, kv (B, H, Dv, 273) and k_sum (B, H, 273), float32, contiguous, updated in place.
        scale: multiplies the query only; None means ``16 ** -0.5``.
        normalize: divide by the running denominator (True), or return the numerator alone.
        eps: added to the denominator; finite and >= 0.

    Returns:
        o (B, H, Dv), or (B, H, 1, Dv) for 4-D inputs, in v's dtype.

    Autograd:
        No gradient: the step is for decoding (run it under ``torch.no_grad()`` or not; its output never requires
        grad). A state that requires grad (the final state of a forward that had gradients) is refused, since
        changing it in place would corrupt that graph: pass it ``.detach()``-ed.

    Raises:
        InputError: the shapes disagree or are not those above, ``state`` is not a pair of tensors of the state's
            shapes (contiguous), ``normalize`` is not a bool, ``scale`` or ``eps`` is out of range, or the state
            requires grad while gradients are enabled.
        DTypeError: q, k and v are not all bfloat16 or all float16, or the state is not float32.
        DeviceMismatchError: a tensor is on the CPU, or the tensors are on different GPUs.
        ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the based
            family, or the GPU is not sm_90 (tk_ops.errors).

    Example::

        b, h, dv = 4, 16, 64
        kv = torch.zeros(b, h, dv, 273, device="cuda")      # or the final state of a prefill by tk_ops.based
        k_sum = torch.zeros(b, h, 273, device="cuda")
        q_t = torch.randn(b, h, 16, device="cuda", dtype=torch.bfloat16)
        k_t = torch.randn(b, h, 16, device="cuda", dtype=torch.bfloat16)
        v_t = torch.randn(b, h, dv, device="cuda", dtype=torch.bfloat16)
        o_t = tk_ops.based_step(q_t, k_t, v_t, (kv, k_sum))   # (4, 16, 64) bfloat16; kv and k_sum updated
    """
    if not isinstance(normalize, bool) or isinstance(scale, bool) or isinstance(eps, bool):
        raise _python_type_error("tk_ops.based_step", scale, eps, normalize=normalize)
    kv, k_sum = _state_pair("tk_ops.based_step", "state", state, optional=False)
    return _ext.call("based", "based_step", "tk_ops.based_step", q, k, v, kv, k_sum, scale, normalize, eps)


def value_dims() -> list[int]:
    """The value dimensions (v's last extent, Dv) this build's Based kernels take.

    Returns:
        A list of ints: the multiples of 16 from 16 to 128 in a full build. Loading the extension is all
        it costs; nothing here has a gradient.

    Raises:
        ExtensionNotBuiltError, FamilyNotBuiltError: the extension is not built or lacks the based kernels.

    Example::

        from tk_ops.based import value_dims
        assert d_model // num_heads in value_dims()
    """
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
