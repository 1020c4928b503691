"""Train a small Mamba-2 language model twice from the same initial weights on the same synthetic data: once on tk_ops
kernels (tk_ops.nn.Mamba2: the chunked scan forward and backward, the GEMMs of its projections and of the MLPs), once on
PyTorch (nn.Linear, and the SSD scan written with PyTorch ops, chunk by chunk, in float32). Prints both loss curves side
by side, the mean step time of each and the largest difference between the curves; exits with status 1 if they
disagree beyond bf16 noise or if the loss did not fall.

    python examples/train_mamba2.py                 # 300 steps, 4 layers, dim 512 (16 heads of 64, d_state 128)
    python examples/train_mamba2.py --quick         # a smoke run of a few seconds
    python examples/train_mamba2.py --d-state 64 --chunk-size 64
    python examples/train_mamba2.py --compile       # both models under torch.compile

Each block is a Mamba-2 mixer (in_proj, causal depthwise convolution, the scan, gated RMSNorm, out_proj) followed by
an MLP; the data is the Markov-chain data of examples/train_gpt.py (each sequence repeats a random segment), whose
model skeleton, training loop, timing and comparison this example reuses.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tk_ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt import Block, LanguageModel, add_run_args, compare_training, make_data, twin_models  # noqa: E402


# ---------------------------------------------------------------- the scan in PyTorch

def pair_sums(a: torch.Tensor) -> torch.Tensor:
    """(..., T) -> (..., T, T): entry (i, j) is a_{j+1} + ... + a_i for j <= i, -inf above the diagonal (so that its
    exp is the decay from token j to token i, and 0 where j > i)."""
    t = a.shape[-1]
    cum = a.cumsum(-1)
    sums = cum[..., :, None] - cum[..., None, :]
    causal = torch.ones(t, t, dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~causal, -math.inf)


def ssd_chunked(x, dt, A, B, C, chunk_size=64, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
                dt_softplus=False, dt_limit=(0.0, math.inf), return_final_states=False):
    """tk_ops.mamba2_chunk_scan's semantics (docs/mamba2.md) in float32 PyTorch ops, differentiable by autograd, for
    one sequence per row (seq_idx is not supported here). Chunks of `chunk_size` tokens: inside a chunk the masked,
    decayed (C B^T) times dt x; across chunks the chunk states, passed on with their decays. Output in x's dtype."""
    if seq_idx is not None:
        raise ValueError("ssd_chunked: packed sequences (seq_idx) are not supported by this PyTorch twin")
    b, l, h, p = x.shape
    g = B.shape[2]
    dtype = x.dtype
    dt = dt.float() + (dt_bias.float() if dt_bias is not None else 0.0)
    if dt_softplus:
        dt = F.softplus(dt)  # the identity above 20, as the kernels
    dt = dt.clamp(*dt_limit)
    pad = (-l) % chunk_size
    # Padding after the last token: causality keeps it out of every real output, and its dt = 0 leaves the state.
    xf, dt = F.pad(x.float(), (0, 0, 0, 0, 0, pad)), F.pad(dt, (0, 0, 0, pad))
    Bf, Cf = (F.pad(t.float(), (0, 0, 0, 0, 0, pad)).repeat_interleave(h // g, dim=2) for t in (B, C))
    c, t = (l + pad) // chunk_size, chunk_size
    xf, Bf, Cf = (v.view(b, c, t, h, -1) for v in (xf, Bf, Cf))
    dt = dt.view(b, c, t, h)
    log_decay = (dt * A.float()).permute(0, 3, 1, 2)              # (b, h, c, t)
    cum = log_decay.cumsum(-1)
    xdt = xf * dt[..., None]

    within = torch.exp(pair_sums(log_decay))                       # (b, h, c, t, t)
    y = torch.einsum("bcihn,bcjhn,bhcij,bcjhp->bcihp", Cf, Bf, within, xdt)
    to_end = torch.exp(cum[..., -1:] - cum)                        # decay from each token to its chunk's end
    chunk_states = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bf, to_end, xdt)
    start = initial_states.float() if initial_states is not None else torch.zeros_like(chunk_states[:, 0])
    states = torch.cat([start[:, None], chunk_states], dim=1)      # (b, c + 1, h, p, n)
    between = torch.exp(pair_sums(F.pad(cum[..., -1], (1, 0))))  # (b, h, c + 1, c + 1): decays between chunk ends
    states = torch.einsum("bhij,bjhpn->bihpn", between, states)
    y = y + torch.einsum("bcihn,bchpn,bhci->bcihp", Cf, states[:, :-1], torch.exp(cum))
    y = y.reshape(b, c * t, h, p)[:, :l]
    if D is not None:
        y = y + x.float() * (D.float()[:, None] if D.dim() == 1 else D.float())
    if z is not None:
        y = y * F.silu(z.float())
    y = y.to(dtype)
    return (y, states[:, -1]) if return_final_states else y


class TorchMamba2(tk_ops.nn.Mamba2):
    """What tk_ops.nn.Mamba2 computes, on PyTorch kernels: nn.Linear projections and the scan above; same parameter
    names and weight layout."""

    def _chunk_scan(self, *args, **kwargs):
        return ssd_chunked(*args, **kwargs)

    def __init__(self, d_model: int, **config):
        super().__init__(d_model, **config)
        dtype = self.in_proj.weight.dtype
        self.in_proj = nn.Linear(d_model, self.in_proj.weight.shape[0], bias=self.in_proj.bias is not None,
                                 dtype=dtype)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=self.out_proj.bias is not None, dtype=dtype)


# ---------------------------------------------------------------- model

class Mamba2LM(LanguageModel):
    """A LanguageModel (examples/train_gpt.py) of `layers` blocks whose token mixer is Mamba-2."""

    def __init__(self, layers: int, dim: int, seq: int, use_tk: bool, **config):
        mixer = tk_ops.nn.Mamba2 if use_tk else TorchMamba2
        super().__init__((Block(mixer(dim, **config), dim, use_tk) for _ in range(layers)), dim, seq, use_tk)


# ---------------------------------------------------------------- run

def check_torch_peer(device) -> float:
    """The PyTorch scan against the float64 reference (ragged length, every option it supports), before it serves as
    the peer."""
    g = torch.Generator(device=device).manual_seed(1)
    b, l, h, groups, p, n = 2, 203, 4, 2, 64, 32

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, device=device, generator=g) * scale
    x, z = rand(b, l, h, p).bfloat16(), rand(b, l, h, p).bfloat16()
    dt, A, bias = rand(b, l, h, scale=0.5) - 2.0, -torch.rand(h, device=device, generator=g) - 0.5, rand(h, scale=0.3)
    B, C = (rand(b, l, groups, n, scale=n ** -0.5).bfloat16() for _ in range(2))
    D, init = rand(h), rand(b, h, p, n, scale=0.3)
    kw = dict(D=D, z=z, dt_bias=bias, initial_states=init, dt_softplus=True, return_final_states=True)
    ref_y, ref_s = tk_ops.reference.mamba2_chunk_scan(x, dt, A, B, C, 64, **kw)
    y, s = ssd_chunked(x.float(), dt, A, B, C, 64, **kw)
    return max(((y.double() - ref_y).norm() / ref_y.norm()).item(), ((s.double() - ref_s).norm() / ref_s.norm()).item())


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512, help="model width (the mixer's d_model; d_inner = 2 dim)")
    p.add_argument("--d-state", type=int, default=128, choices=(64, 128))
    p.add_argument("--headdim", type=int, default=64, choices=(64, 128))
    p.add_argument("--chunk-size", type=int, default=256, choices=(64, 128, 256))
    add_run_args(p)
    p.add_argument("--quick", action="store_true", help="tiny smoke run: 40 steps, 2 layers, seq 256, batch 4")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.layers, args.seq, args.batch, args.every = 40, 2, 256, 4, 10
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this example trains on a CUDA GPU (tk_ops kernels need an H100/H200)", file=sys.stderr)
        return 2
    if (2 * args.dim) % (8 * args.headdim):
        # in_proj's width 4 dim + 2 d_state + heads must be a multiple of 8 (tk_ops.nn.Linear), so the heads must be.
        print(f"error: 2 * --dim must be a multiple of 8 * --headdim (heads in multiples of 8), got {2 * args.dim} "
              f"and {args.headdim}", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    peer_err = check_torch_peer(device)
    if not peer_err < 1e-4:
        print(f"FAIL: the PyTorch scan is off the float64 reference by {peer_err:.2e}", file=sys.stderr)
        return 1

    torch.manual_seed(args.seed)
    data = make_data(args.steps, args.batch, args.seq, args.seed, device)
    config = dict(d_state=args.d_state, headdim=args.headdim, chunk_size=args.chunk_size)
    ours, theirs = twin_models(lambda use_tk: Mamba2LM(args.layers, args.dim, args.seq, use_tk, **config),
                               args.layers, device)
    heads = 2 * args.dim // args.headdim
    print(f"Mamba-2 LM: {args.layers} layers, dim {args.dim} (d_inner {2 * args.dim}, {heads} heads of {args.headdim}, "
          f"d_state {args.d_state}, chunk {args.chunk_size}), seq {args.seq}, batch {args.batch}, "
          f"{sum(p.numel() for p in ours.parameters()):,} parameters, AdamW lr {args.lr}, {args.steps} steps; the "
          f"PyTorch scan matches the float64 reference to {peer_err:.1e}")
    return compare_training(ours, theirs, data, args)


if __name__ == "__main__":
    sys.exit(main())
