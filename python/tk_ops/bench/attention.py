"""Attention benchmark: tk_ops.attention against SDPA's FlashAttention and cuDNN backends
(torch.nn.attention.sdpa_kernel) in bf16, (B, 16, N, D) with B = 16384 / N, D in {64, 128} (and 96, 256 from
N = 2048), causal or not. Forward FLOPs = 4 * B * H * N^2 * D (two matrix products), halved when causal.

--backward times the backward pass only, 2.5x the forward's FLOPs (five matrix products: S again, dP, dV,
dQ, dK). The forward runs once per input set, untimed; the timed call is then, for tk_ops, the backward op
itself (torch.ops.tk_ops.attention_bwd on the saved O and LSE) and, for the SDPA backends, autograd from the
saved graph (torch.autograd.grad with retain_graph=True, which runs only that backend's backward kernel).

--masks compares the masked cases against FlexAttention (torch.compile'd flex_attention with the equivalent
block mask and score_mod; the reference the other outputs are checked against) and, where they import, FlashAttention-4
(`flash_attn.cute`) and flash-attn 2 (`flash_attn`) with the same causal window, softcap or packed documents (a note
says which did not import), 16 heads, D 64 and 128, 16384 tokens: packed documents (lengths drawn from 128..4096,
causal inside each; tk_ops.attention_varlen), causal sliding windows of 256, 1024 and 4096 keys (one
16384-token sequence; query i sees keys i - W .. i), softcap 30 on causal attention (4 x 4096), and plain causal on
the same 16384-token sequence and on 8 x 2048 (our dense kernel's rates, which the masked cases are held to; SDPA
cuDNN there too).
FLOPs count only the visible (query, key) pairs: 4 * H * pairs * D. FlashAttention reads (B, N, H, D) (packed:
(total, H, D)): its inputs are copied into that layout untimed, in its set-up, and its outputs are compared through
(B, H, N, D) views.

Checks: every output against the first peer's within FORWARD_TOL (O) or BACKWARD_TOL (dQ, dK, dV each on its own).
"""
from __future__ import annotations

import importlib
from typing import Any

import torch

from .core import Case, Impl, _short, allow_recompiles, grad_like

TITLE = "Attention (B x 16 heads x N x D, bf16)"
MASKS_TITLE = "Masked attention (16 heads, 16384 tokens, bf16; TFLOP/s of visible pairs)"
HEADS = 16
TOKENS = 16384  # batch = TOKENS / N
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096)
BACKWARD_FLOPS = 2.5  # backward / forward
# bf16 outputs of two implementations of the same attention; measured 1e-3 .. 3.1e-3 apart on an H100.
FORWARD_TOL = {torch.bfloat16: 1e-2}
BACKWARD_TOL = {torch.bfloat16: 2e-2}
FORWARD_OUTPUTS, BACKWARD_OUTPUTS = ("O",), ("dQ", "dK", "dV")


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def fn(q, k, v, causal):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def _sdpa_backward(backend):
    """(setup, fn): setup runs the forward with gradients on the chosen backend (which fixes the backward
    kernel autograd will call) and draws dO; fn computes (dQ, dK, dV) from the kept graph."""
    forward = _sdpa(backend)

    def setup(q, k, v, causal):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = forward(q, k, v, causal)
        return out, (q, k, v), grad_like(out)

    def fn(out, wrt, grad):
        return torch.autograd.grad(out, wrt, grad, retain_graph=True)
    return setup, fn


def _ours_backward():
    import tk_ops

    def setup(q, k, v, causal):
        scale = q.shape[-1] ** -0.5
        with torch.no_grad():
            o, lse = tk_ops.attention_with_lse(q, k, v, causal=causal, scale=scale)
        return q, k, v, o, grad_like(o), lse, causal, scale

    def fn(q, k, v, o, dout, lse, causal, scale):
        return torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, causal, scale)
    return setup, fn


def attention_case(n: int, d: int, causal: bool, backward: bool = False) -> Case:
    import tk_ops
    from torch.nn.attention import SDPBackend

    b = max(1, TOKENS // n)

    def make_inputs():
        q, k, v = (torch.randn(b, HEADS, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        return q, k, v, causal

    def ours(q, k, v, causal):
        return tk_ops.attention(q, k, v, causal=causal)

    flops = 4.0 * b * HEADS * n * n * d / (2 if causal else 1)
    group = f"D={d}{' causal' if causal else ''}"
    peers = [("sdpa cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa flash", SDPBackend.FLASH_ATTENTION)]
    if backward:
        setup, fn = _ours_backward()
        impls = [Impl("tk_ops", fn, ours=True, setup=setup)]
        for name, backend in peers:
            peer_setup, peer_fn = _sdpa_backward(backend)
            impls.append(Impl(name, peer_fn, setup=peer_setup))
        return Case(group + " backward", f"N={n}", (b, HEADS, n, d), BACKWARD_FLOPS * flops, make_inputs, impls,
                    tol=dict(BACKWARD_TOL), outputs=BACKWARD_OUTPUTS)
    return Case(group, f"N={n}", (b, HEADS, n, d), flops, make_inputs,
                [Impl("tk_ops", ours, ours=True)] + [Impl(name, _sdpa(backend)) for name, backend in peers],
                tol=dict(FORWARD_TOL), outputs=FORWARD_OUTPUTS)


def cases(quick: bool = False, backward: bool = False, masks: bool = False) -> list[Case]:
    if masks:
        return mask_cases(quick, backward)
    lens = QUICK_SEQ_LENS if quick else SEQ_LENS
    # D = 96 and 256 (FlashAttention's and cuDNN's other sizes) from N = 2048 on, where their targets are set.
    sizes = [(d, n) for d in (64, 96, 128, 256) for n in lens if d in (64, 128) or n >= 2048]
    return [attention_case(n, d, causal, backward) for d, n in sizes for causal in (False, True)]


# ---------------------------------------------------------------- --masks: FlexAttention's cases

WINDOWS = (256, 1024, 4096)
QUICK_WINDOWS = (1024,)
SOFTCAP = 30.0


def visible_pairs(n: int, left: int) -> int:
    """(query, key) pairs of a causal n x n problem where each query sees at most `left` keys before itself."""
    if left < 0 or left >= n - 1:
        return n * (n + 1) // 2
    full = n - left  # rows i >= left see left + 1 keys
    return full * (left + 1) + left * (left + 1) // 2


def _flex(mask_mod, score_mod, b: int, n: int):
    """(forward fn, its backward (setup, fn)) of compiled flex_attention with a block mask built once for the
    shape (as a training loop builds it once per batch layout)."""
    made = {}  # compiled once, on the first call (building the block mask needs the GPU)

    def forward(q, k, v, *_):
        if not made:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            # Compiled for this shape alone (dynamic=False); eager flex_attention would materialise the scores.
            allow_recompiles()
            made["fn"] = torch.compile(flex_attention, dynamic=False)
            made["mask"] = create_block_mask(mask_mod, b, None, n, n, device=q.device)
        return made["fn"](q, k, v, score_mod=score_mod, block_mask=made["mask"])

    def setup(q, k, v, *_):
        # The timed backward runs again from one kept graph (retain_graph), which a compiled backward that donates
        # its saved buffers refuses.
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        out = forward(q, k, v)
        return out, (q, k, v), grad_like(out)

    def backward(out, wrt, grad):
        return torch.autograd.grad(out, wrt, grad, retain_graph=True)
    return forward, (setup, backward)


def _ours_masked(window: tuple[int, int], softcap: float):
    import tk_ops

    def forward(q, k, v, *_):
        return tk_ops.attention(q, k, v, causal=True, window=window, softcap=softcap)

    def setup(q, k, v, *_):
        scale = q.shape[-1] ** -0.5
        with torch.no_grad():
            o, lse = tk_ops.attention_with_lse(q, k, v, causal=True, scale=scale, window=window, softcap=softcap)
        return q, k, v, o, grad_like(o), lse, scale

    def backward(q, k, v, o, dout, lse, scale):
        return torch.ops.tk_ops.attention_bwd(q, k, v, o, dout, lse, True, scale, window[0], window[1], softcap)
    return forward, (setup, backward)


# FlashAttention's flavours: (name, module). FA4's window is (None, None) when absent, flash-attn 2's (-1, -1).
FLASH_PEERS = (("FA4", "flash_attn.cute"), ("flash-attn", "flash_attn"))


def flash_peers() -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """([(name, flash_attn_func, flash_attn_varlen_func)] of the FlashAttention flavours that import here, [a note
    for each that does not])."""
    found, notes = [], []
    for name, module in FLASH_PEERS:
        try:
            mod = importlib.import_module(module)
            found.append((name, mod.flash_attn_func, mod.flash_attn_varlen_func))
        except Exception as e:  # not installed, or its compiled parts missing: that peer is left out
            notes.append(f"{name} (from {module} import flash_attn_func) left out: {_short(e)}")
    return found, notes


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out  # FA4 returns (out, lse)


def _flash_window(name: str, left: int) -> tuple:
    if left >= 0:
        return (left, 0)  # query i sees keys i - left .. i, as ours with window (left, -1) and causal
    return (None, None) if name == "FA4" else (-1, -1)


def _flash_dense(name: str, func, left: int, softcap: float):
    """(forward, (setup, backward)) of flash_attn_func on (B, N, H, D) copies made in the set-up; the outputs and
    gradients come back as (B, H, N, D) views, and dO is the one every implementation draws, in that layout."""
    window = _flash_window(name, left)

    def run(q, k, v):
        return _first(func(q, k, v, causal=True, window_size=window, softcap=softcap))

    def forward_setup(q, k, v, *_):
        return tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))

    def forward(q, k, v):
        return run(q, k, v).transpose(1, 2)

    def setup(q, k, v, *_):
        q, k, v = (t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
        out = run(q, k, v)
        return out, (q, k, v), grad_like(out.transpose(1, 2)).transpose(1, 2).contiguous()

    def backward(out, wrt, grad):
        return tuple(g.transpose(1, 2) for g in torch.autograd.grad(out, wrt, grad, retain_graph=True))
    return (forward_setup, forward), (setup, backward)


def _flash_impls(backward: bool, make) -> tuple[list[Impl], list[str]]:
    """One Impl per FlashAttention flavour that imports, from make(name, flash_attn_func, flash_attn_varlen_func) ->
    ((forward setup, forward), (backward setup, backward)); and the notes of those that do not."""
    found, notes = flash_peers()
    impls = []
    for name, func, varlen in found:
        (fwd_setup, fwd), (bwd_setup, bwd) = make(name, func, varlen)
        impls.append(Impl(name, bwd, setup=bwd_setup) if backward else Impl(name, fwd, setup=fwd_setup))
    return impls, notes


def mask_case(label: str, b: int, n: int, d: int, left: int, softcap: float, backward: bool,
              with_cudnn: bool = False, device="cuda") -> Case:
    def make_inputs():
        return tuple(torch.randn(b, HEADS, n, d, device=device, dtype=torch.bfloat16) for _ in range(3))

    def mask_mod(b_, h, q_idx, kv_idx):
        inside = q_idx >= kv_idx
        return inside & (q_idx - kv_idx <= left) if left >= 0 else inside

    score_mod = None
    if softcap:
        def score_mod(score, b_, h, q_idx, kv_idx):
            return softcap * torch.tanh(score / softcap)

    ours_fwd, ours_bwd = _ours_masked((left, -1), softcap)
    flex_fwd, flex_bwd = _flex(mask_mod, score_mod, b, n)
    flops = 4.0 * b * HEADS * visible_pairs(n, left) * d * (BACKWARD_FLOPS if backward else 1)
    if backward:
        impls = [Impl("tk_ops", ours_bwd[1], ours=True, setup=ours_bwd[0]),
                 Impl("flex", flex_bwd[1], setup=flex_bwd[0])]
    else:
        impls = [Impl("tk_ops", ours_fwd, ours=True), Impl("flex", flex_fwd)]
    if with_cudnn:
        from torch.nn.attention import SDPBackend
        if backward:
            setup, fn = _sdpa_backward(SDPBackend.CUDNN_ATTENTION)
            impls.append(Impl("sdpa cudnn", fn, setup=lambda q, k, v: setup(q, k, v, True)))
        else:
            sdpa = _sdpa(SDPBackend.CUDNN_ATTENTION)
            impls.append(Impl("sdpa cudnn", lambda q, k, v: sdpa(q, k, v, True)))
    flash, notes = _flash_impls(backward, lambda name, func, _: _flash_dense(name, func, left, softcap))
    group = f"D={d}{' backward' if backward else ''}"
    return Case(group, label, (b, HEADS, n, d), flops, make_inputs, impls + flash, notes=notes,
                **_checks(backward))


def document_lengths(total: int = TOKENS, shortest: int = 128, longest: int = 4096, seed: int = 0) -> list[int]:
    """Lengths drawn uniformly from shortest..longest until `total` tokens, the last one cut to fit."""
    gen = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < total:
        n = int(torch.randint(shortest, longest + 1, (1,), generator=gen))
        lengths.append(min(n, total - sum(lengths)))
    return lengths


def packed_case(d: int, backward: bool = False, lengths: list[int] | None = None, device="cuda") -> Case:
    """Causal attention inside each of the packed documents (default: document_lengths()): tk_ops.attention_varlen
    against FlexAttention with a document mask on the same (1, H, total, D) tensors (ours reads them as (total, H, D)
    views), and FlashAttention's varlen call on (total, H, D) copies."""
    import tk_ops
    lengths = document_lengths() if lengths is None else lengths
    total = sum(lengths)
    starts = torch.tensor([0] + lengths).cumsum(0)
    doc_ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    made = {}

    def make_inputs():
        if not made:
            made["cu"] = starts.to(device=device, dtype=torch.int32)
            made["ids"] = doc_ids.to(device)
        return tuple(torch.randn(1, HEADS, total, d, device=device, dtype=torch.bfloat16) for _ in range(3))

    rows = lambda t: t[0].transpose(0, 1)  # noqa: E731 - (1, H, total, D) -> (total, H, D) view
    longest = max(lengths)

    def ours(q, k, v):
        cu = made["cu"]
        o = tk_ops.attention_varlen(rows(q), rows(k), rows(v), cu, cu, longest, longest, causal=True)
        return o.transpose(0, 1)[None]

    def ours_setup(q, k, v):
        cu = made["cu"]
        with torch.no_grad():
            o, lse = tk_ops.attention_varlen_with_lse(rows(q), rows(k), rows(v), cu, cu, longest, longest, causal=True)
        dout = rows(grad_like(o.transpose(0, 1)[None]))  # the peer's dO: drawn in its (1, H, total, D) layout
        return rows(q), rows(k), rows(v), o, dout, lse, cu

    def ours_backward(q, k, v, o, dout, lse, cu):
        grads = torch.ops.tk_ops.attention_varlen_bwd(q, k, v, o, dout, lse, cu, cu, longest, longest, True)
        return tuple(g.transpose(0, 1)[None] for g in grads)  # views in the peer's layout, for the comparison

    def mask_mod(b_, h, q_idx, kv_idx):
        ids = made["ids"]
        return (ids[q_idx] == ids[kv_idx]) & (q_idx >= kv_idx)

    def flash(name, _, varlen):
        """FlashAttention's varlen call on (total, H, D) copies; outputs as (1, H, total, D) views."""
        def run(q, k, v):
            cu = made["cu"]
            return _first(varlen(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                 max_seqlen_k=longest, causal=True))

        def forward_setup(q, k, v):
            return tuple(rows(t).contiguous() for t in (q, k, v))

        def forward(q, k, v):
            return run(q, k, v).transpose(0, 1)[None]

        def setup(q, k, v):
            q, k, v = (rows(t).contiguous().requires_grad_() for t in (q, k, v))
            out = run(q, k, v)
            return out, (q, k, v), rows(grad_like(out.transpose(0, 1)[None])).contiguous()

        def backward(out, wrt, grad):
            return tuple(g.transpose(0, 1)[None] for g in torch.autograd.grad(out, wrt, grad, retain_graph=True))
        return (forward_setup, forward), (setup, backward)

    flex_fwd, flex_bwd = _flex(mask_mod, None, 1, total)
    pairs = sum(n * (n + 1) // 2 for n in lengths)
    flops = 4.0 * HEADS * pairs * d * (BACKWARD_FLOPS if backward else 1)
    impls = ([Impl("tk_ops", ours_backward, ours=True, setup=ours_setup), Impl("flex", flex_bwd[1], setup=flex_bwd[0])]
             if backward else [Impl("tk_ops", ours, ours=True), Impl("flex", flex_fwd)])
    flash_impls, notes = _flash_impls(backward, flash)
    return Case(f"D={d}{' backward' if backward else ''}", f"packed ({len(lengths)} docs)", (1, HEADS, total, d), flops,
                make_inputs, impls + flash_impls, notes=notes, **_checks(backward))


def _checks(backward: bool) -> dict:
    return ({"tol": dict(BACKWARD_TOL), "outputs": BACKWARD_OUTPUTS} if backward
            else {"tol": dict(FORWARD_TOL), "outputs": FORWARD_OUTPUTS})


def mask_cases(quick: bool = False, backward: bool = False) -> list[Case]:
    windows = QUICK_WINDOWS if quick else WINDOWS
    out = []
    for d in (64, 128):
        out.append(mask_case("causal (dense)", 1, TOKENS, d, -1, 0.0, backward, with_cudnn=True))
        # The packed documents' dense counterpart: the same tokens as equal documents of about their mean length.
        out.append(mask_case("causal (dense 8x2048)", 8, 2048, d, -1, 0.0, backward, with_cudnn=True))
        out.append(packed_case(d, backward))
        out += [mask_case(f"window {w}", 1, TOKENS, d, w, 0.0, backward) for w in windows]
        out.append(mask_case(f"softcap {SOFTCAP:g}", TOKENS // 4096, 4096, d, -1, SOFTCAP, backward))
    return out
