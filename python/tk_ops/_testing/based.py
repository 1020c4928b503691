"""tk_ops.based's forward and backward on an algorithm given per call, for tk_ops' tests and tools.

The public ops choose their kernels by shape (kernels/based/based_configs.cuh): the quadratic ones (the N x N pair
weights, as attention) for sequences up to the measured crossover without a state in or out, the chunked ones (the
160-feature state) otherwise. The internal ops ``torch.ops.tk_ops_testing.based_fwd`` and ``based_bwd`` are the
public ``based_fwd`` and ``based_bwd`` with one more argument, ``algorithm``: ``"auto"`` (the public choice),
``"chunked"`` or ``"quadratic"`` (which takes no state in or out). They have no autograd: a test runs the backward
itself (``gradients``).
"""
from __future__ import annotations

import torch

from .. import _ext

# The two algorithms a test can force; "auto" chooses between them by shape.
ALGORITHMS = ("quadratic", "chunked")


def _ops():
    _ext.require("based")  # loads the extension, which defines the tk_ops_testing ops with the public ones
    return torch.ops.tk_ops_testing


def based_fwd(q, k, v, scale=None, normalize=True, eps=1e-6, kv0=None, k_sum0=None, output_final_state=False,
              save_den=False, *, algorithm: str):
    """``torch.ops.tk_ops.based_fwd`` on `algorithm`: (o, kv, k_sum, den)."""
    return _ops().based_fwd(q, k, v, scale, normalize, eps, kv0, k_sum0, output_final_state, save_den, algorithm)


def based_bwd(q, k, v, o, d_o, den, scale=None, normalize=True, eps=1e-6, kv0=None, k_sum0=None, d_kv=None,
              d_k_sum=None, initial_state_grad=False, *, algorithm: str):
    """``torch.ops.tk_ops.based_bwd`` on `algorithm`: (dq, dk, dv, d_kv0, d_k_sum0)."""
    return _ops().based_bwd(q, k, v, o, d_o, den, scale, normalize, eps, kv0, k_sum0, d_kv, d_k_sum,
                            initial_state_grad, algorithm)


def gradients(q, k, v, d_o, scale=None, normalize=True, *, algorithm: str):
    """``tk_ops.based(q, k, v, scale, normalize)`` and the gradients of q, k, v for the output's gradient d_o, both
    directions on `algorithm`: (o, (dq, dk, dv)). What autograd through ``tk_ops.based`` computes for them."""
    o, _, _, den = based_fwd(q, k, v, scale, normalize, save_den=True, algorithm=algorithm)
    dq, dk, dv, _, _ = based_bwd(q, k, v, o, d_o, den, scale, normalize, algorithm=algorithm)
    return o, (dq, dk, dv)
