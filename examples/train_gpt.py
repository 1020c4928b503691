"""Train a small GPT twice from the same initial weights on the same synthetic data: once on tk_ops kernels
(tk_ops.nn.Attention and tk_ops.nn.Linear, forward and backward), once on PyTorch's (nn.Linear and
scaled_dot_product_attention). Prints both loss curves side by side, the mean step time of each, and the
largest difference between the curves; exits with status 1 if they disagree beyond bf16 noise or if the loss
did not fall.

    python examples/train_gpt.py                 # 300 steps, 4 layers, dim 512, 8 heads (head_dim 64), seq 1024
    python examples/train_gpt.py --quick         # a smoke run of a few seconds
    python examples/train_gpt.py --compile       # both models under torch.compile
    python examples/train_gpt.py --packed        # documents of random lengths packed into each step

The data needs no download: each sequence repeats a random segment (period 16 to 128 tokens) drawn from a
fixed random Markov chain over the vocabulary. The first period is predictable from the previous token alone
(the chain's entropy is about 1.5 nats, against log(256) = 5.5 for a uniform guess); the repeats are
predictable exactly by attending back one period, which only attention can learn, so a model that learns it
goes below the chain's entropy (how far within the default 300 steps depends on its size).

With --packed each step is one row of batch * seq tokens holding documents of random lengths (seq / 8 to seq,
the last one cut to fit), each with its own segment and period (at most half its length, so that it repeats at
least once): the repeats are predictable only from inside the document. Positions restart at each document and
attention stays inside it: the tk_ops model calls tk_ops.nn.Attention(x, cu_seqlens, max_seqlen)
(tk_ops.attention_varlen), the PyTorch one scaled_dot_product_attention over the whole row with a block-diagonal
causal mask, built on the GPU from the same offsets. The PyTorch side therefore computes attention over every pair
of the row and discards most of it: its step time is that of the masked computation, not of a varlen kernel.
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

    def forward(self, x, cu_seqlens=None, max_seqlen=None):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, self.h + 2 * self.hkv, self.d).split([self.h, self.hkv, self.hkv], dim=2)
        if cu_seqlens is None:
            # Nq == Nk, so SDPA's top-left causal mask is the same as tk_ops' bottom-right one.
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=self.h != self.hkv)
        else:
            # Packed documents in one row (b == 1; max_seqlen is tk_ops' business): a query sees the keys of its own
            # document up to itself, a block-diagonal causal mask. k and v are expanded to every query head, so that
            # grouped heads rule out none of SDPA's kernels that take a mask.
            doc = document_ids(cu_seqlens, n)
            i = torch.arange(n, device=x.device)
            visible = (doc[:, None] == doc[None, :]) & (i[None, :] <= i[:, None])
            k, v = (t.repeat_interleave(self.h // self.hkv, dim=2) for t in (k, v))
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=visible)
        return self.proj(o.transpose(1, 2).reshape(b, n, self.h * self.d))


def document_ids(cu_seqlens: torch.Tensor, n: int) -> torch.Tensor:
    """(n,) the document of each position of a packed row, from the int32 offsets (documents + 1, starting at 0),
    on their device: nothing is read on the host, so a step never waits for the GPU."""
    positions = torch.arange(n, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return torch.searchsorted(cu_seqlens, positions, right=True) - 1


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

    def forward(self, x, cu_seqlens=None, max_seqlen=None):
        # Packed documents reach the mixer only when there are some: the other examples' mixers take x alone.
        h = self.ln1(x)
        x = x + (self.mixer(h) if cu_seqlens is None else self.mixer(h, cu_seqlens, max_seqlen))
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

    def forward(self, idx, cu_seqlens=None, max_seqlen=None):
        """idx (B, N) tokens -> (B, N, VOCAB) logits. With cu_seqlens (int32 offsets) idx is one row (1, total) of
        packed documents: positions restart at each document's start, and the blocks keep attention inside it."""
        if cu_seqlens is None:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
        else:
            n = idx.shape[1]
            starts = cu_seqlens.long()[document_ids(cu_seqlens, n)]
            x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device) - starts)
            for block in self.blocks:
                x = block(x, cu_seqlens, max_seqlen)
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

def markov_segments(count: int, gen: torch.Generator) -> torch.Tensor:
    """(count, PERIODS[1]) tokens: `count` walks of the Markov chain, which is drawn first from `gen` (so one seed
    gives one chain)."""
    # The chain: each token goes to one of SUCCESSORS random tokens with random (softmax) probabilities.
    succ = torch.stack([torch.randperm(VOCAB, generator=gen)[:SUCCESSORS] for _ in range(VOCAB)])
    probs = torch.softmax(torch.randn(VOCAB, SUCCESSORS, generator=gen), dim=-1)
    cdf = probs.cumsum(-1)
    seg = torch.empty(count, PERIODS[1], dtype=torch.long)
    seg[:, 0] = torch.randint(VOCAB, (count,), generator=gen)
    for t in range(1, PERIODS[1]):
        prev = seg[:, t - 1]
        choice = torch.searchsorted(cdf[prev], torch.rand(count, 1, generator=gen)).clamp_max(SUCCESSORS - 1)
        seg[:, t] = succ[prev, choice[:, 0]]
    return seg


def make_data(steps: int, batch: int, seq: int, seed: int, device) -> torch.Tensor:
    """(steps, batch, seq + 1) tokens: per sequence a random segment from a fixed Markov chain, repeated."""
    gen = torch.Generator().manual_seed(seed)
    count = steps * batch
    seg = markov_segments(count, gen)
    period = torch.randint(PERIODS[0], PERIODS[1] + 1, (count, 1), generator=gen)
    pos = torch.arange(seq + 1)[None, :] % period
    return seg.gather(1, pos).view(steps, batch, seq + 1).to(device)


class PackedData:
    """Packed documents for `len(self)` steps of `total` tokens each (make_packed_data): ``inputs`` (steps, total)
    tokens; ``targets`` (steps, total), the token after each input in the same document; ``cu_seqlens``
    (steps, slots + 1) int32 offsets per step, from 0 to `total`; ``max_seqlen``, the longest a document can be."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int):
        self.inputs, self.targets, self.cu_seqlens, self.max_seqlen = inputs, targets, cu_seqlens, max_seqlen

    def __len__(self) -> int:
        return self.inputs.shape[0]


def make_packed_data(steps: int, batch: int, seq: int, seed: int, device) -> PackedData:
    """Per step batch * seq tokens of documents whose lengths are uniform in [seq // 8, seq] (the last one of a step
    cut to fit). Each document walks its own segment of the Markov chain and repeats it with its own period (16 to
    128, and at most half the document, so that every document but a very short last one repeats); its targets are
    its next tokens, so no target crosses into another document.

    The offsets have a fixed number of slots per step, ceil(total / (seq // 8)) + 1, as many as the shortest
    documents would need: the slots a step does not use repeat `total` (empty documents, which the kernels skip), so
    every step has the same shapes (no recompilation under --compile)."""
    gen = torch.Generator().manual_seed(seed)
    total, shortest = batch * seq, max(1, seq // 8)
    slots = -(-total // shortest)
    seg = markov_segments(steps * slots, gen).view(steps * slots * PERIODS[1])
    # Cumulative lengths, clamped at the row's end: the document that crosses it is cut, the ones after it are empty.
    ends = torch.randint(shortest, seq + 1, (steps, slots), generator=gen).cumsum(1).clamp_max(total)
    cu_seqlens = F.pad(ends, (1, 0))
    lengths = cu_seqlens.diff(dim=1)
    longest = (lengths // 2).clamp(PERIODS[0], PERIODS[1])
    period = PERIODS[0] + (torch.rand(steps, slots, generator=gen) * (longest - PERIODS[0] + 1)).long()

    # Every token's document, its offset in it, and from those its place in the document's segment.
    at = torch.arange(total).expand(steps, total).contiguous()
    doc = torch.searchsorted(cu_seqlens, at, right=True) - 1
    offset = at - cu_seqlens.gather(1, doc)
    per = period.gather(1, doc)
    base = (torch.arange(steps)[:, None] * slots + doc) * PERIODS[1]
    inputs, targets = seg[base + offset % per], seg[base + (offset + 1) % per]
    return PackedData(inputs.to(device), targets.to(device), cu_seqlens.to(device=device, dtype=torch.int32), seq)


# ---------------------------------------------------------------- training

def step_batch(data, step: int):
    """(the model's arguments, the targets) of one step of `data`: make_data's tokens (the inputs, then the same
    shifted by one) or make_packed_data's documents (one row, with their offsets)."""
    if isinstance(data, PackedData):
        return (data.inputs[step][None], data.cu_seqlens[step], data.max_seqlen), data.targets[step]
    return (data[step, :, :-1],), data[step, :, 1:]


def train(model: nn.Module, data, lr: float, warmup: int) -> tuple[list[float], float]:
    """Losses per step and the mean step time in ms (CUDA events; steps after `warmup` only). `data` is make_data's
    tensor or make_packed_data's documents."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    steps = len(data)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    losses, events = [], []
    for step in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        inputs, targets = step_batch(data, step)
        loss = F.cross_entropy(model(*inputs).float().view(-1, VOCAB), targets.reshape(-1))
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


def add_run_args(p: argparse.ArgumentParser, compile_option: bool = True):
    """The options of a comparison run that do not depend on the model (compare_training reads them); --compile only
    where the example can compile its models."""
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=int, default=25, help="steps per printed (and compared) loss value")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest allowed difference between the curves, in nats (default: 0.05 + 3%% of the loss)")
    if compile_option:
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
    p.add_argument("--packed", action="store_true",
                   help="pack documents of random lengths (seq / 8 to seq) into rows of batch * seq tokens, attention "
                        "kept inside each document (tk_ops.attention_varlen)")
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


def compare_training(ours: nn.Module, theirs: nn.Module, data, args) -> int:
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
    data = (make_packed_data if args.packed else make_data)(args.steps, args.batch, args.seq, args.seed, device)
    config = (args.layers, args.dim, args.heads, args.kv_heads, args.seq)

    ours, theirs = twin_models(lambda use_tk: GPT(*config, use_tk=use_tk), args.layers, device)
    print(f"GPT: {args.layers} layers, dim {args.dim}, {args.heads} heads ({args.kv_heads} kv), head_dim "
          f"{args.dim // args.heads}, seq {args.seq}, batch {args.batch}, {sum(p.numel() for p in ours.parameters()):,}"
          f" parameters (bf16), AdamW lr {args.lr}, {args.steps} steps")
    if args.packed:
        print(f"packed: one row of {args.batch * args.seq} tokens per step, documents of {max(1, args.seq // 8)} to "
              f"{args.seq} tokens")

    return compare_training(ours, theirs, data, args)


if __name__ == "__main__":
    sys.exit(main())
