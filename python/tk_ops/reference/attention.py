"""float64 references of attention: the forward (O and the log-sum-exp) and its gradients, with the causal
mask, sliding windows and softcap of tk_ops.attention."""
from __future__ import annotations

import torch


def attention_visible(nq: int, nk: int, causal: bool = False, window: tuple[int, int] = (-1, -1),
            device=None) -> torch.Tensor:
    """(nq, nk) bool: which keys each query row sees. Bottom-right aligned as in FlashAttention: query i sees
    key j when i + nk - nq - left <= j <= i + nk - nq + right, a side of -1 being unlimited; causal sets
    right = 0."""
    left, right = window
    if causal:
        right = 0
    rows = torch.arange(nq, device=device)[:, None] + (nk - nq)
    cols = torch.arange(nk, device=device)[None, :]
    seen = torch.ones(nq, nk, dtype=torch.bool, device=device)
    if right >= 0:
        seen &= cols <= rows + right
    if left >= 0:
        seen &= cols >= rows - left
    return seen


def _scores(q, k64, scale, causal, window, softcap):
    """(S, dS/dS_raw): the scores the softmax sees, masked with -inf, and the softcap's derivative (None without
    one), in float64; S_raw = scale * q.k."""
    raw = (q.double() @ k64.transpose(-1, -2)) * scale
    cap_grad = None
    if softcap:
        t = torch.tanh(raw / softcap)
        raw, cap_grad = softcap * t, 1 - t * t
    seen = attention_visible(q.shape[-2], k64.shape[-2], causal, window, q.device)
    return raw.masked_fill(~seen, float("-inf")), cap_grad


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None, window: tuple[int, int] = (-1, -1),
              softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) of softmax attention in float64 for (B, H, N, D) tensors. K/V may have fewer heads (GQA:
    query head h uses kv head h // (Hq // Hk)). The mask is :func:`attention_visible`'s; ``softcap > 0`` turns
    the scaled scores s into softcap * tanh(s / softcap). A row that sees no key gets O = 0 and LSE = -inf. LSE is the
    natural log."""
    hq, hk = q.shape[1], k.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k64 = k.double().repeat_interleave(hq // hk, dim=1)
    v64 = v.double().repeat_interleave(hq // hk, dim=1)
    s, _ = _scores(q, k64, scale, causal, window, softcap)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None].clamp_min(torch.finfo(torch.float64).min))
    return p @ v64, lse


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, causal: bool = False,
                       scale: float | None = None, dlse: torch.Tensor | None = None,
                       window: tuple[int, int] = (-1, -1), softcap: float = 0.0
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) in float64 of :func:`attention`'s O for the output gradient ``dout``, plus, when ``dlse``
    (B, Hq, Nq) is given, the gradient of sum(dlse * LSE). dK and dV have K's shape: for GQA they are summed
    over the query heads that share each key/value head. Rows that see no key contribute nothing (their dQ is 0).

    Written out rather than through autograd: P = exp(S - LSE), dV = P^T dO, dP = dO V^T,
    delta_i = sum_j P_ij dP_ij, dS = P * (dP - delta + dlse) (times the softcap's derivative 1 - tanh^2),
    dQ = scale * dS K, dK = scale * dS^T Q."""
    b, hq, nq, d = q.shape
    hk, nk = k.shape[1], k.shape[2]
    group = hq // hk
    scale = d ** -0.5 if scale is None else scale
    q64, do64 = q.double(), dout.double()
    k64 = k.double().repeat_interleave(group, dim=1)
    v64 = v.double().repeat_interleave(group, dim=1)
    s, cap_grad = _scores(q, k64, scale, causal, window, softcap)
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    # A row that sees no key has S = LSE = -inf; its P must be 0, not exp(-inf + inf) = NaN.
    p = torch.exp(s - lse.clamp_min(torch.finfo(torch.float64).min))
    dv = p.transpose(-1, -2) @ do64
    dp = do64 @ v64.transpose(-1, -2)
    delta = (p * dp).sum(-1, keepdim=True)
    if dlse is not None:
        delta = delta - dlse.double()[..., None]
    ds = p * (dp - delta)
    if cap_grad is not None:
        ds = ds * cap_grad
    dq = (ds @ k64) * scale
    dk = (ds.transpose(-1, -2) @ q64) * scale
    fold = lambda t: t.view(b, hk, group, nk, d).sum(2)  # noqa: E731 - sum each GQA group's query heads
    return dq, fold(dk), fold(dv)


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, causal: bool = False, scale: float | None = None,
                     window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(O (total_q, Hq, D), LSE (Hq, total_q)) in float64 of packed documents: :func:`attention` on each document
    (rows cu_seqlens[i] .. cu_seqlens[i + 1]) on its own. Query rows past the last offset see no key (O = 0,
    LSE = -inf)."""
    tq, hq, d = q.shape
    out = torch.zeros(tq, hq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((hq, tq), float("-inf"), dtype=torch.float64, device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(cq) - 1):
        (q0, q1), (k0, k1) = (cq[i], cq[i + 1]), (ck[i], ck[i + 1])
        if q1 <= q0:
            continue
        as_bhnd = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731 - (rows, H, D) -> (1, H, rows, D)
        o_i, lse_i = attention(as_bhnd(q[q0:q1]), as_bhnd(k[k0:k1]), as_bhnd(v[k0:k1]), causal, scale, window, softcap)
        out[q0:q1] = o_i[0].transpose(0, 1)
        lse[:, q0:q1] = lse_i[0]
    return out, lse
