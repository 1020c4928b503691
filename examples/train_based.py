"""Train a small hybrid language model, Based linear-attention layers interleaved with softmax-attention layers, twice
from the same initial weights on the same synthetic data: once on tk_ops kernels (tk_ops.nn.BasedLinearAttention,
tk_ops.nn.Attention and tk_ops.nn.Linear, forward and backward), once on PyTorch (nn.Linear, scaled_dot_product_attention
and the Based mixing written with PyTorch ops, chunk by chunk, in float32). Prints both loss curves side by side, the
mean step time of each and the largest difference between the curves; exits with status 1 if they disagree beyond
bf16 noise or if the loss did not fall.

    python examples/train_based.py                  # 300 steps, layers B A B A (dim 512; Based: 8 heads, Dv 64)
    python examples/train_based.py --quick          # a smoke run of a few seconds
    python examples/train_based.py --pattern BBAB   # any sequence of Based (B) and attention (A) layers
    python examples/train_based.py --compile        # both models under torch.compile

The Based layers mix tokens through their recurrent state (the Taylor feature map of 16-wide query and key
projections); the attention layers recall exact tokens, which the data asks for: each sequence repeats a random
segment (the Markov-chain data of examples/train_gpt.py, whose model skeleton, data, training loop, timing and
comparison this example reuses).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tk_ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt import (Block, LanguageModel, add_run_args, attention, compare_training, make_data,  # noqa: E402
                       twin_models)

FEATURE_DIM = 16  # the width of the query and key projections per Based head


# ---------------------------------------------------------------- the Based mixing in PyTorch

def based_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eps: float = 1e-6, chunk: int = 64):
    """Causal, normalised Based linear attention of q, k (B, H, N, 16) and v (B, H, N, Dv) in float32 PyTorch ops,
    differentiable by autograd: tk_ops.based's semantics (docs/based.md) with the default scale 16^-1/2, in v's dtype.

    Chunks of `chunk` tokens: inside a chunk the masked C x C matrix of w = 1 + s + s^2/2 (s = q.k / 4); across
    chunks the Taylor features phi(x) = [1, x, vec(x x^T) / sqrt(2)] of each chunk's keys summed with its values into
    a (273, Dv) state, an exclusive running sum of those states read by phi(q / 4). Linear in N, unlike the quadratic
    form, and exact up to float32 rounding."""
    b, h, n, dk = q.shape
    dv, dtype = v.shape[-1], v.dtype
    pad = (-n) % chunk
    # The padding comes after every real token: causality keeps it out of every real output.
    q, k, v = (F.pad(x.float(), (0, 0, 0, pad)) for x in (q, k, v))
    chunks = (n + pad) // chunk
    q = q.view(b, h, chunks, chunk, dk) * dk ** -0.5
    k = k.view(b, h, chunks, chunk, dk)
    v = v.view(b, h, chunks, chunk, dv)

    s = q @ k.transpose(-1, -2)
    w = (1 + s + 0.5 * s * s) * torch.ones(chunk, chunk, device=q.device, dtype=torch.bool).tril()
    num, den = w @ v, w.sum(-1)

    def features(x):
        square = (x[..., :, None] * x[..., None, :]).flatten(-2) * 0.5 ** 0.5
        return torch.cat([torch.ones_like(x[..., :1]), x, square], dim=-1)

    phi_q, phi_k = features(q), features(k)
    kv = phi_k.transpose(-1, -2) @ v               # (B, H, chunks, 273, Dv): each chunk's contribution
    k_sum = phi_k.sum(-2)                          # (B, H, chunks, 273)
    kv_before = kv.cumsum(2) - kv                  # what the chunks before each one left in the state
    k_sum_before = k_sum.cumsum(2) - k_sum
    num = num + phi_q @ kv_before
    den = den + (phi_q @ k_sum_before[..., :, None]).squeeze(-1)
    o = num / (den[..., None] + eps)
    return o.view(b, h, chunks * chunk, dv)[:, :, :n].to(dtype)


class TorchBased(nn.Module):
    """What tk_ops.nn.BasedLinearAttention computes, on PyTorch kernels; same parameter names and weight layout."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.h, self.dim = heads, dim
        self.qkv = nn.Linear(dim, 2 * heads * FEATURE_DIM + dim, bias=False, dtype=torch.bfloat16)
        self.proj = nn.Linear(dim, dim, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * FEATURE_DIM, self.h * FEATURE_DIM, self.dim], dim=-1)
        q, k, v = (t.unflatten(-1, (self.h, -1)).transpose(1, 2) for t in (q, k, v))
        o = based_chunked(q, k, v).to(x.dtype)
        return self.proj(o.transpose(1, 2).reshape(b, n, self.dim))


# ---------------------------------------------------------------- model

class HybridLM(LanguageModel):
    """A LanguageModel (examples/train_gpt.py) of the blocks of `pattern`: a Based mixer for B, attention for A."""

    def __init__(self, pattern: str, dim: int, heads: int, based_heads: int, seq: int, use_tk: bool):
        def mixer(kind):
            if kind == "B":
                return tk_ops.nn.BasedLinearAttention(dim, based_heads) if use_tk else TorchBased(dim, based_heads)
            return attention(dim, heads, heads, use_tk)
        super().__init__((Block(mixer(kind), dim, use_tk) for kind in pattern), dim, seq, use_tk)


# ---------------------------------------------------------------- run

def check_torch_peer(device) -> float:
    """The PyTorch Based mixing against the float64 reference on a ragged length, before it serves as the peer."""
    g = torch.Generator(device=device).manual_seed(1)
    q, k = (torch.randn(2, 3, 203, FEATURE_DIM, device=device, generator=g).bfloat16() for _ in range(2))
    v = torch.randn(2, 3, 203, 64, device=device, generator=g).bfloat16()
    ref = tk_ops.reference.based(q, k, v)
    got = based_chunked(q.float(), k.float(), v.float())
    return ((got.double() - ref).norm() / ref.norm()).item()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--pattern", default="BABA", help="the layers, B for Based and A for attention (default BABA)")
    p.add_argument("--dim", type=int, default=512, help="model width; dim / heads must be 64, 96, 128 or 256")
    p.add_argument("--heads", type=int, default=8, help="attention heads")
    p.add_argument("--based-heads", type=int, default=8,
                   help="Based heads; dim / based-heads (the value dimension) must be a multiple of 16 up to 128")
    add_run_args(p)
    p.add_argument("--quick", action="store_true", help="tiny smoke run: 40 steps, pattern BA, seq 256, batch 4")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.pattern, args.seq, args.batch, args.every = 40, "BA", 256, 4, 10
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this example trains on a CUDA GPU (tk_ops kernels need an H100/H200)", file=sys.stderr)
        return 2
    if not args.pattern or set(args.pattern) - {"A", "B"}:
        print(f"error: --pattern must be a sequence of A (attention) and B (Based), got {args.pattern!r}",
              file=sys.stderr)
        return 2
    if "A" in args.pattern and (args.dim % args.heads or args.dim // args.heads not in (64, 96, 128, 256)):
        print(f"error: --dim / --heads must be 64, 96, 128 or 256 (tk_ops.attention's head dimensions), got "
              f"{args.dim} / {args.heads}", file=sys.stderr)
        return 2
    value_dim = args.dim // args.based_heads
    if "B" in args.pattern and (args.dim % args.based_heads or value_dim % 16 or not 16 <= value_dim <= 128):
        print(f"error: --dim / --based-heads must be a multiple of 16 up to 128 (tk_ops.based's value dimensions), "
              f"got {args.dim} / {args.based_heads}", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    peer_err = check_torch_peer(device)
    if not peer_err < 1e-5:
        print(f"FAIL: the PyTorch Based mixing is off the float64 reference by {peer_err:.2e}", file=sys.stderr)
        return 1

    torch.manual_seed(args.seed)
    data = make_data(args.steps, args.batch, args.seq, args.seed, device)
    config = (args.pattern, args.dim, args.heads, args.based_heads, args.seq)
    ours, theirs = twin_models(lambda use_tk: HybridLM(*config, use_tk=use_tk), len(args.pattern), device)
    print(f"hybrid LM: layers {' '.join(args.pattern)} (B: Based, {args.based_heads} heads, feature dim "
          f"{FEATURE_DIM}, value dim {value_dim}; A: attention, {args.heads} heads), dim {args.dim}, seq {args.seq}, "
          f"batch {args.batch}, {sum(p.numel() for p in ours.parameters()):,} parameters (bf16), AdamW lr {args.lr}, "
          f"{args.steps} steps; the PyTorch Based mixing matches the float64 reference to {peer_err:.1e}")

    return compare_training(ours, theirs, data, args)


if __name__ == "__main__":
    sys.exit(main())
