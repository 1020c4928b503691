"""Float64 emulation of the Mamba-2 backward's rounding points for ddt and dA (no GPU needed).

    python tools/check/mamba2_bwd_rounding.py [--dtype bf16|fp16] [--lengths 257 1000 4097]

It walks one head's chunks as kernels/mamba2/mamba2_bwd_kernel.cuh does (the forward walk's dC part of dL/dcum, the
backward walk's GB, its carried part and the chunk's pair matrix Q^T), rounding to 16 bits exactly where the kernels
do (the weighted rows diag(w) X and diag(exp cum) dY, the decayed B C^T, the state images), then takes the reverse
cumulative sum and the dt chain as the binding does, and prints ddt's relative error and dA's error on the scale of
its terms against float64 autograd through tk_ops.reference.mamba2_chunk_scan. Variants:

- exact: no rounding (the kernels' formulas themselves; about 1e-15);
- one image: the states' single 16-bit image on both walks' carried parts, each walk weighting its own operand (the
  first design);
- hi+lo, shared weights: the kernels as built (the states as 16-bit hi + lo images; both walks round the weighted rows
  of a pair the same way, so that the carried terms of dL/dcum cancel across chunks).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from tk_ops.reference.mamba2 import mamba2_chunk_scan as reference  # noqa: E402

CHUNK = 64
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def emulate(x, dt, A, B, C, dy, d_final, rnd, hi_lo: bool):
    """(ddt, dt dL/d(dt A) per token) of one head: x, dy (l, p); B, C (l, n); dt (l,); A a float; `rnd` rounds to 16
    bits (or is the identity)."""
    l = x.shape[0]
    pad = (-l) % CHUNK
    x, dy, B, C = (F.pad(t, (0, 0, 0, pad)) for t in (x, dy, B, C))
    dt = F.pad(dt, (0, pad))
    log_decay = dt * A
    d_cum, x_dot = torch.zeros_like(dt), torch.zeros_like(dt)
    later = torch.ones(CHUNK, CHUNK, dtype=torch.bool).triu()
    chunks = [slice(k * CHUNK, (k + 1) * CHUNK) for k in range(x.shape[0] // CHUNK)]

    H = torch.zeros(x.shape[1], B.shape[1], dtype=torch.float64)
    for s in chunks:
        cum = log_decay[s].cumsum(0)
        image = rnd(H) + (rnd(H - rnd(H)) if hi_lo else 0)
        if hi_lo:
            carried = rnd(dy[s] * cum.exp()[:, None]) @ image
        else:
            carried = cum.exp()[:, None] * (dy[s] @ image)
        d_cum[s] += (carried * C[s]).sum(1)
        w = (cum[-1] - cum).exp() * dt[s]
        H = math.exp(cum[-1]) * H + rnd(x[s] * w[:, None]).T @ B[s]
    d_cum[l - 1] += (d_final * H).sum()

    G = d_final.clone()
    for s in reversed(chunks):
        cum = log_decay[s].cumsum(0)
        image = rnd(G) + (rnd(G - rnd(G)) if hi_lo else 0)
        decayed = rnd(torch.where(later, (B[s] @ C[s].T) * (cum[None, :] - cum[:, None]).exp(), 0.0))
        to_end = (cum[-1] - cum).exp()
        bg = B[s] @ image.T
        if hi_lo:
            d_cum[s] -= (rnd(x[s] * (to_end * dt[s])[:, None]) * bg).sum(1)
        else:
            d_cum[s] -= dt[s] * (x[s] * to_end[:, None] * bg).sum(1)
        gb = to_end[:, None] * bg + decayed @ dy[s]
        x_dot[s] = (x[s] * gb).sum(1)
        pairs = decayed * (x[s] @ dy[s].T) * dt[s][:, None]
        d_cum[s] += pairs.sum(0) - pairs.sum(1)
        G = math.exp(cum[-1]) * G + rnd(dy[s] * cum.exp()[:, None]).T @ C[s]
    d_log_decay = d_cum.flip(0).cumsum(0).flip(0)
    return (x_dot + A * d_log_decay)[:l], (dt * d_log_decay)[:l]


def exact_gradients(x, dt, A, B, C, dy, d_final):
    leaves = [t.clone().requires_grad_() for t in (x, dt, torch.tensor([A], dtype=torch.float64))]
    y, final = reference(leaves[0][None, :, None], leaves[1][None, :, None], leaves[2], B[None, :, None],
                         C[None, :, None], 64, return_final_states=True)
    loss = (y[0, :, 0] * dy).sum() + (final[0, 0] * d_final).sum()
    _, d_dt, d_A = torch.autograd.grad(loss, leaves)
    return d_dt, d_A.item()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--lengths", type=int, nargs="+", default=[257, 1000, 4097])
    parser.add_argument("--dims", type=int, nargs=2, default=[64, 128], metavar=("P", "N"))
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args(argv)
    dtype = DTYPES[args.dtype]
    p, n = args.dims
    variants = {"exact": (lambda t: t, False), "one image": (None, False), "hi+lo, shared weights": (None, True)}
    for l in args.lengths:
        for seed in range(args.seeds):
            gen = torch.Generator().manual_seed(seed)
            r16 = lambda t: t.to(dtype).double()  # noqa: E731
            randn = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
            x, dy = r16(randn(l, p)), r16(randn(l, p))
            dt = torch.rand(l, generator=gen, dtype=torch.float64) * 0.1
            A = -math.exp(torch.rand(1, generator=gen).item() * math.log(16.0))  # the tests' and Mamba2's range
            B, C = (r16(randn(l, n) * 2 / math.sqrt(n)) for _ in range(2))
            d_final = randn(p, n)
            want_dt, want_A = exact_gradients(x, dt, A, B, C, dy, d_final)
            cells = []
            for name, (rnd, hi_lo) in variants.items():
                ddt, terms = emulate(x, dt, A, B, C, dy, d_final, rnd or r16, hi_lo)
                e_dt = ((ddt - want_dt).norm() / want_dt.norm()).item()
                e_A = abs(terms.sum().item() - want_A) / terms.abs().sum().item()
                cells.append(f"{name}: ddt {e_dt:.1e} dA {e_A:.1e}")
            print(f"{args.dtype} l={l} p={p} n={n} A={A:6.2f}  " + "  |  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
