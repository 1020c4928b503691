"""Train a small GPT twice from the same initial weights on the same synthetic data: once on tk_ops kernels
(tk_ops.nn.Attention and tk_ops.nn.Linear, forward and backward), once on PyTorch's (nn.Linear and
scaled_dot_product_attention). Prints both loss curves side by side, the mean step time of each, and the
largest difference between the curves; exits with status 1 if they disagree beyond bf16 noise or if the loss
did not fall.

    python examples/train_gpt.py                 # 300 steps, 4 layers, dim 512, 8 heads (head_dim 64), seq 1024
    python examples/train_gpt.py --quick         # a smoke run of a few seconds
    python examples/train_gpt.py --compile       # both models under torch.compile

The data needs no download: each sequence repeats a random segment (period 16 to 128 tokens) drawn from a
fixed random Markov chain over the vocabulary. The first period is predictable from the previous token alone
(the chain's entropy is about 1.5 nats, against log(256) = 5.5 for a uniform guess); the repeats are
predictable exactly by attending back one period, which only attention can learn, so a model that learns it
goes below the chain's entropy (how far within the default 300 steps depends on its size).
"""
from __future__ import annotations

import argparse
import copy
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

import tk_ops

VOCAB = 256  # a multiple of 8, so the head can be a tk_ops Linear
SUCCESSORS = 6  # tokens each token can be followed by, in the Markov chain
PERIODS = (16, 128)  # shortest and longest repeated segment


# ---------------------------------------------------------------- model

class TorchAttention(nn.Module):
    """What tk_ops.nn.Attention computes, on PyTorch kernels; same parameter names and weight layout."""

    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.h, self.hkv, self.d = heads, kv_heads, dim // heads
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.d, bias=False, dtype=torch.bfloat16)
        self.proj = nn.Linear(heads * self.d, dim, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, self.h + 2 * self.hkv, self.d).split([self.h, self.hkv, self.hkv], dim=2)
        # Nq == Nk, so SDPA's top-left causal mask is the same as tk_ops' bottom-right one.
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=self.h != self.hkv)
        return self.proj(o.transpose(1, 2).reshape(b, n, self.h * self.d))


def attention(dim: int, heads: int, kv_heads: int, use_tk: bool) -> nn.Module:
    """Causal multi-head attention (GQA when kv_heads < heads) on tk_ops or on PyTorch kernels."""
    return tk_ops.nn.Attention(dim, heads, kv_heads, causal=True) if use_tk else TorchAttention(dim, heads, kv_heads)


class Block(nn.Module):
    """Pre-LN block: a token mixer (attention here; examples/train_based.py also passes Based layers), then an MLP."""

    def __init__(self, mixer: nn.Module, dim: int, use_tk: bool):
        super().__init__()
        linear = tk_ops.nn.Linear if use_tk else nn.Linear
        self.ln1 = nn.LayerNorm(dim, dtype=torch.bfloat16)
        self.mixer = mixer
        self.ln2 = nn.LayerNorm(dim, dtype=torch.bfloat16)
        self.up = linear(dim, 4 * dim, dtype=torch.bfloat16)
        self.down = linear(4 * dim, dim, dtype=torch.bfloat16)

    def forward(self, x):
        x = x + self.mixer(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class LanguageModel(nn.Module):
    """Token and position embeddings, the given blocks, final LayerNorm, untied output head."""

    def __init__(self, blocks, dim: int, seq: int, use_tk: bool):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim, dtype=torch.bfloat16)
        self.pos = nn.Embedding(seq, dim, dtype=torch.bfloat16)
        self.blocks = nn.ModuleList(blocks)
        self.ln = nn.LayerNorm(dim, dtype=torch.bfloat16)
        self.head = (tk_ops.nn.Linear if use_tk else nn.Linear)(dim, VOCAB, bias=False, dtype=torch.bfloat16)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class GPT(LanguageModel):
    """A LanguageModel of `layers` attention blocks."""

    def __init__(self, layers: int, dim: int, heads: int, kv_heads: int, seq: int, use_tk: bool):
        super().__init__((Block(attention(dim, heads, kv_heads, use_tk), dim, use_tk) for _ in range(layers)), dim, seq,
                         use_tk)


def init_weights(model: LanguageModel, layers: int):
    """GPT-2 style: N(0, 0.02), residual output projections scaled down by sqrt(2 * layers)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                continue  # LayerNorm weights 1, biases 0 (their defaults)
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "down.weight")) else 0.02
            p.normal_(0, std)
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()


def twin_models(build, layers: int, device) -> tuple[nn.Module, nn.Module]:
    """build(use_tk=True) with init_weights' weights, and build(use_tk=False) holding the same weights."""
    ours = build(use_tk=True).to(device)
    init_weights(ours, layers)
    theirs = build(use_tk=False).to(device)
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))
    return ours, theirs


# ---------------------------------------------------------------- data

def make_data(steps: int, batch: int, seq: int, seed: int, device) -> torch.Tensor:
    """(steps, batch, seq + 1) tokens: per sequence a random segment from a fixed Markov chain, repeated."""
    gen = torch.Generator().manual_seed(seed)
    # The chain: each token goes to one of SUCCESSORS random tokens with random (softmax) probabilities.
    succ = torch.stack([torch.randperm(VOCAB, generator=gen)[:SUCCESSORS] for _ in range(VOCAB)])
    probs = torch.softmax(torch.randn(VOCAB, SUCCESSORS, generator=gen), dim=-1)
    cdf = probs.cumsum(-1)
    count = steps * batch
    seg = torch.empty(count, PERIODS[1], dtype=torch.long)
    seg[:, 0] = torch.randint(VOCAB, (count,), generator=gen)
    for t in range(1, PERIODS[1]):
        prev = seg[:, t - 1]
        choice = torch.searchsorted(cdf[prev], torch.rand(count, 1, generator=gen)).clamp_max(SUCCESSORS - 1)
        seg[:, t] = succ[prev, choice[:, 0]]
    period = torch.randint(PERIODS[0], PERIODS[1] + 1, (count, 1), generator=gen)
    pos = torch.arange(seq + 1)[None, :] % period
    return seg.gather(1, pos).view(steps, batch, seq + 1).to(device)


# ---------------------------------------------------------------- training

def train(model: nn.Module, data: torch.Tensor, lr: float, warmup: int) -> tuple[list[float], float]:
    """Losses per step and the mean step time in ms (CUDA events; steps after `warmup` only)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    steps = data.shape[0]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    losses, events = [], []
    for step in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        inputs, targets = data[step, :, :-1], data[step, :, 1:]
        loss = F.cross_entropy(model(inputs).float().view(-1, VOCAB), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        end.record()
        events.append((start, end))
        losses.append(loss.detach())
    torch.cuda.synchronize()
    timed = [s.elapsed_time(e) for s, e in events[warmup:]] or [s.elapsed_time(e) for s, e in events]
    return [x.item() for x in losses], sum(timed) / len(timed)


def windowed(losses: list[float], every: int) -> list[tuple[int, float]]:
    """(last step, mean loss) of each window of `every` steps: the curve printed and compared."""
    return [(min(i + every, len(losses)), sum(losses[i:i + every]) / len(losses[i:i + every]))
            for i in range(0, len(losses), every)]


def add_run_args(p: argparse.ArgumentParser):
    """The options of a comparison run that do not depend on the model (compare_training reads them)."""
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=25, help="steps per printed (and compared) loss value")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest allowed difference between the curves, in nats (default: 0.05 + 3%% of the loss)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile both models (the first steps, untimed, include compilation)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512, help="model width; dim / heads must be 64, 96, 128 or 256")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA); default: --heads")
    add_run_args(p)
    p.add_argument("--quick", action="store_true", help="tiny smoke run: 40 steps, 2 layers, seq 256, batch 4")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.layers, args.seq, args.batch = 40, 2, 256, 4
        args.every = 10
    args.kv_heads = args.kv_heads or args.heads
    return args


# Two runs that differ only in kernels (summation order, fp32-accumulated products rounded to bf16 at different
# points) do not follow the same trajectory bit for bit: bf16 keeps 8 significant bits (relative rounding
# 2^-9 ~ 2e-3), every step's parameters differ by a few such roundings, and the difference grows along training.
# Averaged over a window of 25 steps, same data and weights, the curves of two correct implementations stay within
# a few hundredths of a nat of each other (a few 1e-2 relative at a loss near 1-2); a real defect (a wrong mask,
# a missing GQA sum, a gradient with the wrong scale) moves the curve by tenths of a nat or stops the descent.
# The allowed gap is therefore 0.05 nats plus 3% of the loss.
TOLERANCE_ABS, TOLERANCE_REL = 0.05, 0.03


def compare_training(ours: nn.Module, theirs: nn.Module, data: torch.Tensor, args) -> int:
    """Train the tk_ops model and its PyTorch twin (same initial weights) on `data`, print both loss curves and step
    times, and judge them: 0 when the curves agree and the loss fell, 1 otherwise (the exit status of main)."""
    warmup = min(10, args.steps // 2)
    run_tk, run_pt = (torch.compile(ours), torch.compile(theirs)) if args.compile else (ours, theirs)
    loss_tk, ms_tk = train(run_tk, data, args.lr, warmup)
    loss_pt, ms_pt = train(run_pt, data, args.lr, warmup)

    curve_tk, curve_pt = windowed(loss_tk, args.every), windowed(loss_pt, args.every)
    print(f"\nmean loss per {args.every} steps")
    print(f"{'step':>6}  {'tk_ops':>8}  {'torch':>8}  {'diff':>8}")
    worst, worst_allowed, failed = 0.0, 0.0, False
    for (step, a), (_, b) in zip(curve_tk, curve_pt):
        diff = abs(a - b)
        allowed = args.tolerance if args.tolerance is not None else TOLERANCE_ABS + TOLERANCE_REL * b
        failed |= not diff <= allowed  # NaN fails too
        if diff > worst or math.isnan(diff):
            worst, worst_allowed = diff, allowed
        print(f"{step:>6}  {a:>8.4f}  {b:>8.4f}  {diff:>8.4f}")
    print(f"\nmean step time (after {warmup} warm-up steps): tk_ops {ms_tk:.2f} ms, torch {ms_pt:.2f} ms "
          f"({ms_pt / ms_tk:.2f}x)")
    print(f"max |difference| between the curves: {worst:.4f} nats (allowed there: {worst_allowed:.4f})")

    # The comparison means something only if the model learned: the loss must fall well below the uniform
    # guess's log(VOCAB) in both runs.
    last = max(curve_tk[-1][1], curve_pt[-1][1])
    learned = last < 0.6 * math.log(VOCAB)
    if failed:
        print("FAIL: the tk_ops and torch loss curves disagree beyond bf16 noise", file=sys.stderr)
        return 1
    if not learned and not args.quick:
        print(f"FAIL: the loss did not fall enough (last window {last:.3f}, needs < {0.6 * math.log(VOCAB):.3f})",
              file=sys.stderr)
        return 1
    print("OK: the curves agree")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this example trains on a CUDA GPU (tk_ops kernels need an H100/H200)", file=sys.stderr)
        return 2
    if args.dim % args.heads or args.dim // args.heads not in (64, 96, 128, 256):
        print(f"error: --dim / --heads must be 64, 96, 128 or 256 (the head dimensions tk_ops.attention supports), "
              f"got {args.dim} / {args.heads}", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    data = make_data(args.steps, args.batch, args.seq, args.seed, device)
    config = (args.layers, args.dim, args.heads, args.kv_heads, args.seq)

    ours, theirs = twin_models(lambda use_tk: GPT(*config, use_tk=use_tk), args.layers, device)
    print(f"GPT: {args.layers} layers, dim {args.dim}, {args.heads} heads ({args.kv_heads} kv), head_dim "
          f"{args.dim // args.heads}, seq {args.seq}, batch {args.batch}, {sum(p.numel() for p in ours.parameters()):,}"
          f" parameters (bf16), AdamW lr {args.lr}, {args.steps} steps")

    return compare_training(ours, theirs, data, args)


if __name__ == "__main__":
    sys.exit(main())
