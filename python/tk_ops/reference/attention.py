"""float64 references of attention: the forward (O and the log-sum-exp) and its gradients."""
from __future__ import annotations

import torch


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of softmax attention in float64 for (B, H, N, D) tensors. K/V may have fewer heads (GQA:
    query head h uses kv head h // (Hq // Hk)). Causal is bottom-right aligned: query i sees keys
    j <= i + Nk - Nq; a row that sees no key gets O = 0 and LSE = -inf. LSE is the natural log."""
    hq, hk, nq, nk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k64 = k.double().repeat_interleave(hq // hk, dim=1)
    v64 = v.double().repeat_interleave(hq // hk, dim=1)
    s = (q.double() @ k64.transpose(-1, -2)) * scale
    if causal:
        rows = torch.arange(nq, device=q.device)[:, None]
        cols = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(cols > rows + (nk - nq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None].clamp_min(torch.finfo(torch.float64).min))
    return p @ v64, lse


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, causal: bool = False,
                       scale: float | None = None, dlse: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) in float64 of :func:`attention`'s O for the output gradient ``dout``, plus, when ``dlse``
    (B, Hq, Nq) is given, the gradient of sum(dlse * LSE). dK and dV have K's shape: for GQA they are summed
    over the query heads that share each key/value head. Rows that see no key contribute nothing (their dQ is 0).

    Written out rather than through autograd: P = exp(S - LSE), dV = P^T dO, dP = dO V^T,
    delta_i = sum_j P_ij dP_ij, dS = P * (dP - delta + dlse), dQ = scale * dS K, dK = scale * dS^T Q."""
    b, hq, nq, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    group = hq // hk
    scale = d ** -0.5 if scale is None else scale
    q64, do64 = q.double(), dout.double()
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    s = (q64 @ k64.transpose(-1, -2)) * scale
    if causal:
        rows = torch.arange(nq, device=q.device)[:, None]
        cols = torch.arange(nk, device=q.device)[None, :]
        s = s.masked_fill(cols > rows + (nk - nq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    # A row that sees no key has S = LSE = -inf; its P must be 0, not exp(-inf + inf) = NaN.
    p = torch.exp(s - lse.clamp_min(torch.finfo(torch.float64).min))
    dv = p.transpose(-1, -2) @ do64
    dp = do64 @ v64.transpose(-1, -2)
    delta = (p * dp).sum(-1, keepdim=True)
    if dlse is not None:
        delta = delta - dlse.double()[..., None]
    ds = p * (dp - delta)
    dq = (ds @ k64) * scale
    dk = (ds.transpose(-1, -2) @ q64) * scale
    fold = lambda t: t.view(b, hk, group, nk, d).sum(2)  # noqa: E731 - sum each GQA group's query heads
    return dq, fold(dk), fold(dv)
