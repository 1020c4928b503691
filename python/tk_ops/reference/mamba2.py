"""float64 references of the Mamba-2 state-space scan (SSD) and its decoding step.

Semantics are those of mamba_ssm's ``mamba_chunk_scan_combined`` and ``selective_state_update`` (multi-head).
Per batch row, head and token t, with the state h of shape (p, n):

    dt_t = clamp(softplus(dt_t + dt_bias) if dt_softplus else dt_t + dt_bias, *dt_limit)
    h_t  = exp(dt_t * A) * h_{t-1} + dt_t * x_t (outer) B_t
    y_t  = C_t . h_t (contracting n) + D * x_t,   then  y_t * silu(z_t)  when z is given.

Head ``i`` reads group ``i // (heads / groups)`` of B and C. The clamp always applies, so with the default
limits (0, inf) and no softplus a negative dt counts as 0. ``seq_idx`` packs several sequences into one row:
the state restarts from zero at every token whose seq_idx differs from the previous token's, and the token
before the first one counts as sequence 0, so ``initial_states`` feed the row only when it starts with
seq_idx 0. Each sequence id must form one contiguous run (ids may not come back after another id).

Two independent forms compute the scan: ``form="recurrent"`` walks the tokens one by one; ``form="chunked"``
is the SSD decomposition the kernels use (intra-chunk products, chunk states, state passing, output from the
passed states), so that the tests can prove the decomposition right on any length and chunk size.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_SOFTPLUS_THRESHOLD = 20.0  # above it mamba_ssm's softplus is the identity, as F.softplus's default


def mamba2_dt(dt: torch.Tensor, dt_bias: torch.Tensor | None = None, dt_softplus: bool = False,
              dt_limit: tuple[float, float] | None = (0.0, math.inf)) -> torch.Tensor:
    """The step size the scan uses, in float64: bias added, then softplus when asked, then the clamp to
    ``dt_limit`` (None skips the clamp, as the decoding step does). dt (..., h), dt_bias (h,)."""
    dt = dt.double()
    if dt_bias is not None:
        dt = dt + dt_bias.double()
    if dt_softplus:
        dt = F.softplus(dt, threshold=_SOFTPLUS_THRESHOLD)
    if dt_limit is not None:
        dt = dt.clamp(dt_limit[0], dt_limit[1])
    return dt


def mamba2_chunk_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                      chunk_size: int = 256, D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                      dt_bias: torch.Tensor | None = None, initial_states: torch.Tensor | None = None,
                      seq_idx: torch.Tensor | None = None, dt_softplus: bool = False,
                      dt_limit: tuple[float, float] = (0.0, math.inf), return_final_states: bool = False,
                      *, form: str = "recurrent"):
    """Mamba-2 scan in float64 on the inputs' device. x, z (b, l, h, p); dt (b, l, h); A (h,);
    B, C (b, l, g, n); D (h, p) or (h,); dt_bias (h,); initial_states (b, h, p, n); seq_idx (b, l) integer.
    Returns out (b, l, h, p), and also the final states (b, h, p, n) when ``return_final_states``.
    ``chunk_size`` only matters to ``form="chunked"``, and never changes the result."""
    _check_scan_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    dt64 = mamba2_dt(dt, dt_bias, dt_softplus, dt_limit)
    x64, A64 = x.double(), A.double()
    Bh, Ch = _per_head(B, x.shape[2]), _per_head(C, x.shape[2])
    state = _start_state(x, B, initial_states)
    if form == "recurrent":
        y, state = _scan_recurrent(x64, dt64, A64, Bh, Ch, state, seq_idx)
    elif form == "chunked":
        y, state = _scan_chunked(x64, dt64, A64, Bh, Ch, state, seq_idx, chunk_size)
    else:
        raise ValueError(f"form must be 'recurrent' or 'chunked', got {form!r}")
    out = _finish_output(y, x64, D, z)
    return (out, state) if return_final_states else out


def mamba2_step(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, D: torch.Tensor | None = None, z: torch.Tensor | None = None,
                dt_bias: torch.Tensor | None = None, dt_softplus: bool = False) -> torch.Tensor:
    """One decoding token, like mamba_ssm's ``selective_state_update`` for heads: state (b, h, p, n) is
    updated in place (computed in float64, stored in its own dtype); x, z (b, h, p); dt (b, h); A (h,);
    B, C (b, g, n); D (h, p) or (h,); dt_bias (h,). Returns y (b, h, p) in float64.
    No dt_limit clamp here: selective_state_update applies none, so a negative dt without softplus is used
    as it is."""
    b, h, p, n = state.shape
    if x.shape != (b, h, p) or dt.shape != (b, h) or A.shape != (h,):
        raise ValueError(f"mamba2_step: state {tuple(state.shape)} needs x (b, h, p), dt (b, h), A (h,); got "
                         f"x {tuple(x.shape)}, dt {tuple(dt.shape)}, A {tuple(A.shape)}")
    if B.dim() != 3 or B.shape[0] != b or B.shape[2] != n or h % B.shape[1] != 0 or C.shape != B.shape:
        raise ValueError(f"mamba2_step: B and C must be (b, g, n) with g dividing h; got B {tuple(B.shape)}, "
                         f"C {tuple(C.shape)}")
    _check_per_head("D", D, h, p)
    _check_optional_shape("z", z, x.shape)
    _check_optional_shape("dt_bias", dt_bias, (h,))
    dt64 = mamba2_dt(dt, dt_bias, dt_softplus, dt_limit=None)
    x64 = x.double()
    Bh = B.double().repeat_interleave(h // B.shape[1], dim=1)
    Ch = C.double().repeat_interleave(h // C.shape[1], dim=1)
    decay = torch.exp(dt64 * A.double())
    new_state = decay[..., None, None] * state.double() + (dt64[..., None] * x64)[..., None] * Bh[:, :, None, :]
    state.copy_(new_state)
    y = torch.einsum("bhpn,bhn->bhp", new_state, Ch)
    return _finish_output(y, x64, D, z)


# ---------------------------------------------------------------------------------------------------------
# The two forms. Both take float64 tensors: x (b, l, h, p), dt (b, l, h), A (h,), Bh and Ch (b, l, h, n)
# already expanded from groups to heads, the state (b, h, p, n) before the first token; they return the
# scan output before D and z, and the state after the last token.

def _scan_recurrent(x, dt, A, Bh, Ch, state, seq_idx):
    b, l, h, p = x.shape
    prev_seq = torch.zeros(b, dtype=torch.long, device=x.device)  # the token before the row is sequence 0
    ys = []
    for t in range(l):
        carried = torch.exp(dt[:, t] * A)[..., None, None] * state  # (b, h, p, n)
        if seq_idx is not None:
            cur_seq = seq_idx[:, t].long()
            # A new sequence starts from a zero state: select zeros rather than multiply by 0, which would turn
            # an overflowing decay into NaN.
            same = (cur_seq == prev_seq)[:, None, None, None]
            carried = torch.where(same, carried, torch.zeros_like(carried))
            prev_seq = cur_seq
        update = (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]  # dt x (outer) B: (b, h, p, n)
        state = carried + update
        ys.append(torch.einsum("bhpn,bhn->bhp", state, Ch[:, t]))
    return torch.stack(ys, dim=1), state


def _scan_chunked(x, dt, A, Bh, Ch, state, seq_idx, chunk_size):
    """The SSD decomposition, chunk after chunk (the last one may be shorter). Within a chunk of T tokens with
    cum_i = sum_{k <= i} dt_k A (a running log-decay from the chunk start):
      intra-chunk: y_i += sum_{j <= i} exp(cum_i - cum_j) (C_i . B_j) dt_j x_j   -- (L o C B^T)(x dt)
      from states: y_i += exp(cum_i) C_i . H_prev                                  -- H_prev: state before chunk
      chunk state: S   = sum_j exp(cum_last - cum_j) dt_j x_j (outer) B_j
      passing:     H   = exp(cum_last) H_prev + S
    With seq_idx the terms whose two ends lie in different sequences are dropped, exactly where mamba_ssm's
    kernels drop them: pairs (i, j) of different ids, tokens i not in the sequence of the token before the
    chunk, tokens j not in the sequence of the chunk's last token, and the carried state when the chunk's last
    token is in another sequence than the token before the chunk."""
    b, l, h, p = x.shape
    prev_seq = torch.zeros(b, dtype=torch.long, device=x.device)
    ys = []
    for start in range(0, l, chunk_size):
        stop = min(start + chunk_size, l)
        xc, dtc, Bc, Cc = x[:, start:stop], dt[:, start:stop], Bh[:, start:stop], Ch[:, start:stop]
        t_len = stop - start
        cum = torch.cumsum(dtc * A, dim=1).transpose(1, 2)  # (b, h, T)
        causal = torch.ones(t_len, t_len, dtype=torch.bool, device=x.device).tril()
        pair_ok = causal.expand(b, t_len, t_len)
        from_prev_ok = torch.ones(b, t_len, dtype=torch.bool, device=x.device)
        to_last_ok = torch.ones(b, t_len, dtype=torch.bool, device=x.device)
        carry_ok = torch.ones(b, dtype=torch.bool, device=x.device)
        if seq_idx is not None:
            seq = seq_idx[:, start:stop].long()
            pair_ok = pair_ok & (seq[:, :, None] == seq[:, None, :])
            from_prev_ok = seq == prev_seq[:, None]
            to_last_ok = seq == seq[:, -1:]
            carry_ok = seq[:, -1] == prev_seq
            prev_seq = seq[:, -1]
        # Segment sums cum_i - cum_j; masked to -inf before exp so that the dropped entries are exact zeros.
        seg = cum[:, :, :, None] - cum[:, :, None, :]  # (b, h, T, T)
        decay_pairs = torch.exp(seg.masked_fill(~pair_ok[:, None], -math.inf))
        scores = torch.einsum("bihn,bjhn->bhij", Cc, Bc) * decay_pairs  # L o C B^T
        y_intra = torch.einsum("bhij,bjhp->bihp", scores, xc * dtc[..., None])

        cum_last = cum[:, :, -1:]  # (b, h, 1)
        decay_from_start = torch.exp(cum.masked_fill(~from_prev_ok[:, None], -math.inf))  # (b, h, T)
        y_states = torch.einsum("bihn,bhpn->bihp", Cc, state) * decay_from_start.transpose(1, 2)[..., None]

        decay_to_end = torch.exp((cum_last - cum).masked_fill(~to_last_ok[:, None], -math.inf))  # (b, h, T)
        weights = decay_to_end.transpose(1, 2) * dtc  # (b, T, h)
        chunk_state = torch.einsum("bjh,bjhp,bjhn->bhpn", weights, xc, Bc)
        carry = torch.exp(cum_last[..., 0].masked_fill(~carry_ok[:, None], -math.inf))  # (b, h)
        state = carry[..., None, None] * state + chunk_state

        ys.append(y_intra + y_states)
    return torch.cat(ys, dim=1), state


# ---------------------------------------------------------------------------------------------------------

def _per_head(groups: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, l, g, n) -> (b, l, h, n) in float64: head i reads group i // (h / g)."""
    return groups.double().repeat_interleave(heads // groups.shape[2], dim=2)


def _start_state(x, B, initial_states):
    b, _, h, p = x.shape
    if initial_states is not None:
        return initial_states.double()
    return torch.zeros(b, h, p, B.shape[-1], dtype=torch.float64, device=x.device)


def _finish_output(y, x64, D, z):
    """The skip connection D * x (D per head or per channel) and the gate silu(z) = z * sigmoid(z)."""
    if D is not None:
        D64 = D.double()
        y = y + x64 * (D64 if D64.dim() == 2 else D64[:, None])
    if z is not None:
        y = y * F.silu(z.double())
    return y


def _check_scan_shapes(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx):
    if x.dim() != 4:
        raise ValueError(f"x must be (b, l, h, p), got {tuple(x.shape)}")
    b, l, h, p = x.shape
    if l < 1:
        raise ValueError(f"the sequence length must be at least 1, got x {tuple(x.shape)}")
    if B.dim() != 4 or B.shape[:2] != (b, l) or h % B.shape[2] != 0:
        raise ValueError(f"B must be (b, l, g, n) with g dividing h = {h}, got {tuple(B.shape)} for x "
                         f"{tuple(x.shape)}")
    n = B.shape[3]
    _check_optional_shape("dt", dt, (b, l, h))
    _check_optional_shape("A", A, (h,))
    _check_optional_shape("C", C, tuple(B.shape))
    _check_per_head("D", D, h, p)
    _check_optional_shape("z", z, (b, l, h, p))
    _check_optional_shape("dt_bias", dt_bias, (h,))
    _check_optional_shape("initial_states", initial_states, (b, h, p, n))
    _check_optional_shape("seq_idx", seq_idx, (b, l))


def _check_optional_shape(name, t, shape):
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _check_per_head(name, t, h, p):
    if t is not None and tuple(t.shape) not in ((h,), (h, p)):
        raise ValueError(f"{name} must be ({h},) or ({h}, {p}), got {tuple(t.shape)}")
