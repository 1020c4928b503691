"""tk_ops.attention against other implementations of the same attention, on the same inputs: FlexAttention
(torch.nn.attention.flex_attention under torch.compile) with causal masks (square, and bottom-right aligned across
lengths), sliding windows and a softcap (a tanh score_mod); FlashAttention (FlashAttention-4's flash_attn.cute, or
flash_attn 2) where it is installed. Both are measured against the float64 reference, O and the three gradients, as a
whole and in their worst row: ours must come within twice the peer's error plus a floor, and the peer itself must be
close to the reference (a peer far from it does not compute what we compute, which fails too). A peer that cannot be
imported skips its cases with the reason.

The peers compile per shape (tens of seconds each), so every case runs in a child Python started when collection
ends, beside the other tests (`python -m tests.gpu.ops.test_attention_peer <peer> <case>`); the test reads the child's
report."""
from __future__ import annotations

import functools
import json
import sys
import zlib

import pytest
import torch

import tk_ops
from tk_ops import reference

from ... import background
from ...cpu.toolchain import run_python
from ..util import ROW_SLACK, rel_err, worst_row

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def case(b, hq, hk, nq, nk, d, dtype="bf16", causal=False, window=(-1, -1), softcap=0.0, input_scale=1.0,
         backward=True):
    return {"shape": (b, hq, hk, nq, nk, d), "dtype": dtype, "causal": causal, "window": window, "softcap": softcap,
            "input_scale": input_scale, "backward": backward}


# Every row sees at least one key (Nq <= Nk under bottom-right alignment). The softcap cases double q and k: scores of
# standard deviation 4 under a cap of 5, which binds (test_attention_masks.py).
FLEX_CASES = {
    "causal-gqa-d128": case(2, 8, 2, 1000, 1000, 128, causal=True),
    "causal-cross300x777-d64": case(1, 4, 4, 300, 777, 64, causal=True),
    "window256_0-gqa-d64": case(2, 4, 2, 1500, 1500, 64, window=(256, 0)),
    "window100_50-d128-fp16": case(1, 4, 4, 777, 777, 128, dtype="fp16", window=(100, 50)),
    "cap5-gqa-d128": case(2, 4, 2, 777, 777, 128, softcap=5.0, input_scale=2.0),
    "causal-w64-cap5-d64": case(1, 4, 2, 1000, 1000, 64, causal=True, window=(64, -1), softcap=5.0, input_scale=2.0),
}
# FlashAttention-4's backward takes no softcap (its interface passes none to the backward kernel), so the softcap case
# compares the forward only.
FLASH_CASES = {
    "causal-gqa-d128": case(2, 8, 2, 1000, 1000, 128, causal=True),
    "window128_0-cross300x777-d64": case(1, 4, 4, 300, 777, 64, window=(128, 0)),
    "full-gqa-d128-fp16": case(2, 4, 2, 777, 777, 128, dtype="fp16"),
    "cap5-gqa-d64-forward": case(2, 4, 2, 777, 777, 64, softcap=5.0, input_scale=2.0, backward=False),
}
CASES = {"flex": FLEX_CASES, "flash": FLASH_CASES}

# Ours may be this much worse than the peer (relative to the float64 reference, whole tensor): twice the peer's
# error plus the floor, and ROW_SLACK times the floor in the worst row. bf16 and fp16 round P, dS and the outputs at
# about 2e-3 and 3e-4.
FLOOR = {"bf16": 2e-3, "fp16": 3e-4}
# The peer's own error must stay below this, else the comparison says nothing (or the peer computes something else).
PEER_TOL = {"bf16": 2e-2, "fp16": 3e-3}
REPORT = "ATTENTION_PEER_REPORT "
MODULE = "tests.gpu.ops.test_attention_peer"  # run from the repository root, as the child is


class PeerMissing(Exception):
    pass


def flex_peer(q, k, v, dout, causal, window, softcap, backward):
    """O and (dQ, dK, dV) from compiled FlexAttention, the mask as a mask_mod, the cap as a score_mod."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        raise PeerMissing(f"torch.nn.attention.flex_attention: {e}") from e
    nq, nk = q.shape[2], k.shape[2]
    shift = nk - nq  # bottom-right alignment: query i's diagonal is key i + shift
    left, right = window
    if causal:
        right = 0
    unlimited = nq + nk
    hi, lo = right if right >= 0 else unlimited, left if left >= 0 else unlimited

    def mask_mod(b, h, q_idx, kv_idx):
        offset = kv_idx - q_idx - shift
        return (offset <= hi) & (offset >= -lo)

    def cap(score, b, h, q_idx, kv_idx):
        return softcap * torch.tanh(score / softcap)

    masked = causal or left >= 0 or right >= 0
    block_mask = create_block_mask(mask_mod, None, None, nq, nk, device=q.device) if masked else None
    attend = torch.compile(flex_attention, dynamic=False)
    q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
    out = attend(q, k, v, score_mod=cap if softcap else None, block_mask=block_mask,
                 enable_gqa=q.shape[1] != k.shape[1])
    grads = torch.autograd.grad(out, (q, k, v), dout) if backward else ()
    return out.detach(), grads


def flash_peer(q, k, v, dout, causal, window, softcap, backward):
    """O and (dQ, dK, dV) from FlashAttention-4 (flash_attn.cute) or else flash_attn 2, on (B, N, H, D) copies."""
    try:
        from flash_attn.cute import flash_attn_func
        unlimited = None  # FlashAttention-4 writes an unlimited window side as None
    except ImportError as first:
        try:
            from flash_attn import flash_attn_func
        except ImportError as second:
            raise PeerMissing(f"flash_attn.cute: {first}; flash_attn: {second}") from second
        unlimited = -1
    bnhd = [t.detach().transpose(1, 2).contiguous().requires_grad_(backward) for t in (q, k, v)]
    res = flash_attn_func(*bnhd, causal=causal, window_size=tuple(unlimited if w < 0 else w for w in window),
                          softcap=softcap)
    out = res[0] if isinstance(res, (tuple, list)) else res
    grads = torch.autograd.grad(out, bnhd, dout.transpose(1, 2)) if backward else ()
    return out.detach().transpose(1, 2), tuple(g.transpose(1, 2) for g in grads)


PEERS = {"flex": flex_peer, "flash": flash_peer}


def measure(peer: str, name: str, device: str = "cuda") -> dict:
    """The report of one case: {"missing": reason} when the peer cannot be imported, else {"errors": {output: [ours,
    peer, ours' worst row, peer's worst row]}}, each against the float64 reference."""
    c = CASES[peer][name]
    b, hq, hk, nq, nk, d = c["shape"]
    dtype, causal, window, softcap, backward = (DTYPES[c["dtype"]], c["causal"], tuple(c["window"]), c["softcap"],
                                                c["backward"])
    torch.manual_seed(zlib.crc32(f"{peer}:{name}".encode()))
    q = (torch.randn(b, hq, nq, d, device=device) * c["input_scale"]).to(dtype)
    k = (torch.randn(b, hk, nk, d, device=device) * c["input_scale"]).to(dtype)
    v = torch.randn(b, hk, nk, d, device=device).to(dtype)
    dout = torch.randn(b, hq, nq, d, device=device).to(dtype)
    try:
        peer_out, peer_grads = PEERS[peer](q, k, v, dout, causal, window, softcap, backward)
    except PeerMissing as e:
        return {"missing": str(e)}

    qg, kg, vg = (t.detach().requires_grad_(backward) for t in (q, k, v))
    ours = tk_ops.attention(qg, kg, vg, causal=causal, window=window, softcap=softcap)
    our_grads = torch.autograd.grad(ours, (qg, kg, vg), dout) if backward else ()
    ours = ours.detach()
    ref, _ = reference.attention(q, k, v, causal=causal, window=window, softcap=softcap)
    ref_grads = (reference.attention_backward(q, k, v, dout, causal, window=window, softcap=softcap)
                 if backward else ())
    errors = {}
    for out_name, a, p, r in zip(("o", "dq", "dk", "dv"), (ours, *our_grads), (peer_out, *peer_grads),
                                 (ref, *ref_grads)):
        assert a.shape == p.shape == r.shape, f"{out_name}: shapes {a.shape}, {p.shape}, {r.shape}"
        errors[out_name] = [rel_err(a, r), rel_err(p, r), worst_row(a, r)[1], worst_row(p, r)[1]]
    return {"errors": errors}


def background_jobs():
    # Each case in its own child: the peers' compilations (tens of seconds) overlap each other and the other tests.
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        return {}
    return {f"attention_peer:{peer}:{name}": functools.partial(run_python, "-m", MODULE, peer, name, timeout=600)
            for peer, cases in CASES.items() for name in cases}


def check(peer: str, name: str):
    res = background.result(f"attention_peer:{peer}:{name}")
    assert res.returncode == 0, f"{peer} {name}: the child failed\n{res.stderr[-4000:]}"
    lines = [line for line in res.stdout.splitlines() if line.startswith(REPORT)]
    assert lines, f"{peer} {name}: no report\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    report = json.loads(lines[-1][len(REPORT):])
    if "missing" in report:
        pytest.skip(f"{peer} cannot be imported: {report['missing']}")
    dtype = CASES[peer][name]["dtype"]
    expected = ["o", "dq", "dk", "dv"] if CASES[peer][name]["backward"] else ["o"]
    assert list(report["errors"]) == expected, report
    floor = FLOOR[dtype]
    for out_name, (ours, theirs, ours_row, theirs_row) in report["errors"].items():
        what = f"{peer} {name} {out_name}: ours {ours:.2e} (worst row {ours_row:.2e}), {peer} {theirs:.2e} " \
               f"(worst row {theirs_row:.2e}) from float64"
        assert theirs <= PEER_TOL[dtype], f"{what}: the peer is off the reference"
        assert ours <= 2 * theirs + floor, f"{what}: ours is worse than twice the peer's plus {floor:.0e}"
        assert ours_row <= 2 * theirs_row + ROW_SLACK * floor, \
            f"{what}: our worst row is worse than twice the peer's plus {ROW_SLACK * floor:.0e}"


@pytest.mark.parametrize("name", list(FLEX_CASES))
def test_matches_flex_attention(name):
    check("flex", name)


@pytest.mark.parametrize("name", list(FLASH_CASES))
def test_matches_flash_attention(name):
    check("flash", name)


if __name__ == "__main__":
    print(REPORT + json.dumps(measure(sys.argv[1], sys.argv[2])), flush=True)
