"""float64 references of Based linear attention: the causal forward in two independent forms (quadratic and
recurrent), its recurrent state, and one decoding step.

Semantics (those of flash-linear-attention's ``parallel_based`` / ``fused_chunk_based``, which scale q only):

    phi(x)  = [1, x_a, x_a x_b / sqrt(2)]  for a, b in 0..Dk-1 (row-major a*Dk + b), F = 1 + Dk + Dk*Dk features
    s_ij    = scale * q_i . k_j                              (scale defaults to Dk ** -0.5)
    w_ij    = phi(scale * q_i) . phi(k_j) = 1 + s_ij + s_ij^2 / 2
    num_i   = kv0 phi(scale * q_i) + sum_{j <= i} w_ij v_j
    den_i   = k_sum0 . phi(scale * q_i) + sum_{j <= i} w_ij
    o_i     = num_i / (den_i + eps)  when normalize, else num_i

The state after the last token is kv = kv0 + sum_j v_j phi(k_j)^T (B, H, Dv, F) and k_sum = k_sum0 + sum_j phi(k_j)
(B, H, F); kv0 and k_sum0 are the initial state, zeros when none is given. The state holds phi of the unscaled
keys, so it does not depend on ``scale``: the scale is applied to each query as it reads the state.
Without an initial state den_i >= (i + 1) / 2, since 1 + s + s^2 / 2 = ((1 + s)^2 + 1) / 2.
"""
from __future__ import annotations

import math

import torch

FORMS = ("quadratic", "recurrent")


def feature_size(dk: int) -> int:
    """F, the width of phi for a feature dimension dk: 273 for dk = 16."""
    return 1 + dk + dk * dk


def feature_map(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """phi(scale * x) in float64 over the last dimension: (..., Dk) -> (..., 1 + Dk + Dk*Dk), ordered
    [1, x, vec(x outer x) / sqrt(2)] with the outer product row-major."""
    x = x.double() * scale
    square = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2.0)
    return torch.cat([torch.ones_like(x[..., :1]), x, square], dim=-1)


def based(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None, normalize: bool = True,
          eps: float = 1e-6, initial_state: tuple[torch.Tensor, torch.Tensor] | None = None,
          output_final_state: bool = False, form: str = "quadratic"):
    """Causal Based linear attention in float64 (module docstring for the formula) of q, k (B, H, N, Dk) and
    v (B, H, N, Dv), on the inputs' device; any strides. Returns o (B, H, N, Dv), and (o, (kv, k_sum)) when
    ``output_final_state``. ``initial_state=(kv0, k_sum0)`` continues from a state of that layout, so a sequence
    processed in pieces gives the outputs of one pass. ``form`` picks the computation: "quadratic" masks the
    (N x N) matrix of w_ij (as the kernels' intra-chunk products do), "recurrent" walks the tokens one at a time
    through the state (as decoding does); they are written independently so each checks the other."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    _check_inputs(q, k, v)
    b, h, n, dk = q.shape
    dv = v.shape[-1]
    scale = dk ** -0.5 if scale is None else scale
    kv0, k_sum0 = _start_state(initial_state, b, h, dk, dv, q.device)
    if form == "quadratic":
        o, kv, k_sum = _quadratic(q, k, v, scale, normalize, eps, kv0, k_sum0)
    else:
        o, kv, k_sum = _recurrent(q, k, v, scale, normalize, eps, kv0, k_sum0)
    return (o, (kv, k_sum)) if output_final_state else o


def based_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor],
               scale: float | None = None, normalize: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """One new token per sequence: q, k (B, H, Dk), v (B, H, Dv). Adds the token to ``state = (kv, k_sum)``
    in place (computed in float64, stored in the state's dtype), then returns its output o (B, H, Dv) in
    float64, which sees the token itself, as in :func:`based`."""
    if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"based_step takes q, k (B, H, Dk) and v (B, H, Dv); got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    b, h, dk = q.shape
    kv, k_sum = state
    _check_state(kv, k_sum, b, h, dk, v.shape[-1])
    scale = dk ** -0.5 if scale is None else scale
    new_kv, new_k_sum = _add_token(kv.double(), k_sum.double(), k, v)
    with torch.no_grad():
        kv.copy_(new_kv)
        k_sum.copy_(new_k_sum)
    return _read(new_kv, new_k_sum, feature_map(q, scale), normalize, eps)


def _quadratic(q, k, v, scale, normalize, eps, kv0, k_sum0):
    n = q.shape[2]
    q64, k64, v64 = q.double(), k.double(), v.double()
    s = scale * (q64 @ k64.transpose(-1, -2))
    w = 1.0 + s + 0.5 * s * s
    visible = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    w = w.masked_fill(~visible, 0.0)
    phi_q = feature_map(q64, scale)
    num = w @ v64 + phi_q @ kv0.transpose(-1, -2)
    den = w.sum(-1) + (phi_q @ k_sum0[..., :, None]).squeeze(-1)
    o = num / (den[..., None] + eps) if normalize else num
    phi_k = feature_map(k64)
    return o, kv0 + v64.transpose(-1, -2) @ phi_k, k_sum0 + phi_k.sum(-2)


def _recurrent(q, k, v, scale, normalize, eps, kv0, k_sum0):
    b, h, n, _ = q.shape
    kv, k_sum = kv0, k_sum0
    outputs = []
    for t in range(n):
        kv, k_sum = _add_token(kv, k_sum, k[:, :, t], v[:, :, t])
        outputs.append(_read(kv, k_sum, feature_map(q[:, :, t], scale), normalize, eps))
    if not outputs:
        return q.new_empty((b, h, 0, v.shape[-1]), dtype=torch.float64), kv, k_sum
    return torch.stack(outputs, dim=2), kv, k_sum


def _add_token(kv, k_sum, k_t, v_t):
    """The state after one more token per sequence (out of place, so autograd sees every step)."""
    phi_k = feature_map(k_t)
    return kv + v_t.double()[..., :, None] * phi_k[..., None, :], k_sum + phi_k


def _read(kv, k_sum, phi_q, normalize, eps):
    """A query's output from the state that holds every key it sees."""
    num = (kv @ phi_q[..., :, None]).squeeze(-1)
    if not normalize:
        return num
    den = (k_sum * phi_q).sum(-1)
    return num / (den[..., None] + eps)


def _start_state(initial_state, b, h, dk, dv, device):
    if initial_state is None:
        f = feature_size(dk)
        return (torch.zeros(b, h, dv, f, dtype=torch.float64, device=device),
                torch.zeros(b, h, f, dtype=torch.float64, device=device))
    kv0, k_sum0 = initial_state
    _check_state(kv0, k_sum0, b, h, dk, dv)
    return kv0.double(), k_sum0.double()


def _check_inputs(q, k, v):
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"based takes q, k (B, H, N, Dk) and v (B, H, N, Dv); got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")


def _check_state(kv, k_sum, b, h, dk, dv):
    f = feature_size(dk)
    if tuple(kv.shape) != (b, h, dv, f) or tuple(k_sum.shape) != (b, h, f):
        raise ValueError(f"the state must be kv {(b, h, dv, f)} and k_sum {(b, h, f)} (F = 1 + Dk + Dk*Dk); "
                         f"got kv {tuple(kv.shape)}, k_sum {tuple(k_sum.shape)}")
