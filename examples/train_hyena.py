"""Train a small long-convolution (Hyena-style) language model twice from the same initial weights on the same
synthetic data: once on tk_ops kernels (tk_ops.nn.LongConv on tk_ops.fftconv, and tk_ops.nn.Linear, forward and
backward), once on PyTorch (nn.Linear, and the convolution by torch.fft in float32). Prints both loss curves side by
side, the mean step time of each and the largest difference between the curves; exits with status 1 if they disagree
beyond bf16 noise or if the loss did not fall.

    python examples/train_hyena.py                  # 300 steps, 4 layers, dim 512, seq 1024
    python examples/train_hyena.py --quick          # a smoke run of a few seconds
    python examples/train_hyena.py --seq 4096 --batch 2
    python examples/train_hyena.py --compile        # both models under torch.compile

Each block's mixer is an order-2 Hyena operator (H3's gated long convolution): one projection makes three streams
v, x1 and x2 of the model's width, and y = out_proj(x2 * (conv(x1 * v, k_eff) + D * x1 * v)), with k_eff a learned
filter per channel as long as the sequence (tk_ops.nn.LongConv: explicit taps under a learned exponential decay
window). The gates are fftconv's pregate and postgate, so the whole operator between the projections is one kernel
call. An MLP follows, as in the other examples; the data is the Markov-chain data of examples/train_gpt.py (each
sequence repeats a random segment), whose model skeleton, training loop, timing and comparison this example reuses.
Sequences may be as long as tk_ops.fftconv takes (MAX_SEQ below; docs/fftconv.md says which lengths run on its
kernels and which on cuFFT).

Two checks judge the run. First, one step from the shared weights on the first batch: every parameter's gradient
of the tk_ops model must be within 0.1 (relative) of the PyTorch model's. The tk_ops convolution is within 5e-3 of
the float64 reference in bf16 (docs/fftconv.md) and the PyTorch one rounds its float32 result once to bf16, so the
gradients differ by bf16 roundings carried through the layers: at most 1.3e-2 measured (H200; quick and default
sizes and seq 4096, two seeds), while a filter delayed by one tap, swapped gates or a lost skip term put some
parameter's gradient off by 1.0 or more. Then the loss curves, held to the other examples' tolerance (0.05 nats + 3%
of the loss, train_gpt.py): they catch what goes wrong along training (a backward that fails on some inputs, a loss
that does not fall), but not every defect: a model trained through a filter delayed by one tap learns around it, and
its curve stayed within 0.03 nats of the correct one, which is why the first-step gradients are compared too.
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tk_ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt import (VOCAB, Block, LanguageModel, add_run_args, compare_training, init_weights,  # noqa: E402
                       make_data)

MAX_SEQ = 1 << 20  # the longest sequence tk_ops.fftconv takes


# ---------------------------------------------------------------- the convolution in PyTorch

def torch_fftconv(u: torch.Tensor, k: torch.Tensor, pregate: torch.Tensor | None = None,
                  postgate: torch.Tensor | None = None) -> torch.Tensor:
    """tk_ops.fftconv's semantics by torch.fft, differentiable by autograd: u and the gates (B, H, N), k (H, Nk <= N),
    y = postgate * irfft(rfft(u * pregate, 2N) * rfft(k, 2N))[..., :N] (2N points: the circular convolution then
    equals the causal one on the first N outputs). Computed in float32 (float64 for float64 inputs), returned in u's
    dtype."""
    n = u.shape[-1]
    work = torch.promote_types(u.dtype, torch.float32)
    v = u.to(work) if pregate is None else u.to(work) * pregate.to(work)
    spectrum = torch.fft.rfft(v, n=2 * n) * torch.fft.rfft(k.to(work), n=2 * n)
    y = torch.fft.irfft(spectrum, n=2 * n)[..., :n]
    return (y if postgate is None else y * postgate.to(work)).to(u.dtype)


class TorchLongConv(tk_ops.nn.LongConv):
    """What tk_ops.nn.LongConv computes, with the convolution above; same parameters, filter and skip term."""

    def convolve(self, u, k, pregate, postgate):
        return torch_fftconv(u, k, pregate, postgate)


# ---------------------------------------------------------------- model

class HyenaMixer(nn.Module):
    """The order-2 Hyena operator: in_proj to (v, x1, x2), y = x2 * LongConv(x1 * v), out_proj."""

    def __init__(self, dim: int, seq: int, use_tk: bool):
        super().__init__()
        linear = tk_ops.nn.Linear if use_tk else nn.Linear
        self.in_proj = linear(dim, 3 * dim, bias=False, dtype=torch.bfloat16)
        self.filter = (tk_ops.nn.LongConv if use_tk else TorchLongConv)(dim, seq)
        self.out_proj = linear(dim, dim, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        v, x1, x2 = self.in_proj(x).chunk(3, dim=-1)
        return self.out_proj(self.filter(v, pregate=x1, postgate=x2))


class HyenaLM(LanguageModel):
    """A LanguageModel (examples/train_gpt.py) of `layers` blocks whose token mixer is a HyenaMixer."""

    def __init__(self, layers: int, dim: int, seq: int, use_tk: bool):
        super().__init__((Block(HyenaMixer(dim, seq, use_tk), dim, use_tk) for _ in range(layers)), dim, seq, use_tk)


def init_hyena(model: HyenaLM, layers: int):
    """init_weights (GPT-2 style), then the filters' own initialisation (their decay window and 1 / max_len scale,
    which N(0, 0.02) would replace) and unscaled input projections: only the residual branch's output projections
    are scaled down, and the three streams multiply, so scaled inputs would start the mixer near zero."""
    init_weights(model, layers)
    with torch.no_grad():
        for block in model.blocks:
            block.mixer.filter.reset_parameters()
            block.mixer.in_proj.weight.normal_(0, 0.02)


def twin_hyena_models(layers: int, dim: int, seq: int, device) -> tuple[HyenaLM, HyenaLM]:
    """The tk_ops model with init_hyena's weights, and the PyTorch model holding the same weights."""
    ours = HyenaLM(layers, dim, seq, use_tk=True).to(device)
    init_hyena(ours, layers)
    theirs = HyenaLM(layers, dim, seq, use_tk=False).to(device)
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))
    return ours, theirs


# ---------------------------------------------------------------- run

# The largest relative difference ||g_tk - g_torch|| / ||g_torch|| allowed for any parameter's gradient after one step
# from the same weights (module docstring: bf16 noise measured at most 1.3e-2, defects 1.0 and more).
FIRST_STEP_TOLERANCE = 0.1


def first_step_gradients(model: nn.Module, batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """The gradient of the loss on one batch for every parameter, by name (the parameters' .grad untouched)."""
    loss = F.cross_entropy(model(batch[:, :-1]).float().reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
    params = dict(model.named_parameters())
    return dict(zip(params, torch.autograd.grad(loss, list(params.values()))))


def compare_first_step(ours: nn.Module, theirs: nn.Module, batch: torch.Tensor) -> tuple[str, float]:
    """The parameter whose gradients differ most between the twins on `batch`, and that relative difference (NaN
    counts as infinite)."""
    mine, peer = first_step_gradients(ours, batch), first_step_gradients(theirs, batch)
    worst, worst_err = "", -1.0
    for name, g in peer.items():
        g, diff = g.double(), mine[name].double() - g.double()
        err = (diff.norm() / g.norm().clamp_min(1e-30)).item()
        err = err if math.isfinite(err) else math.inf
        if err > worst_err:
            worst, worst_err = name, err
    return worst, worst_err


def check_torch_peer(device) -> float:
    """The PyTorch convolution against the float64 reference (ragged length, a shorter filter, both gates), before it
    serves as the peer."""
    g = torch.Generator(device=device).manual_seed(1)
    u, pregate, postgate = (torch.randn(2, 3, 203, device=device, generator=g) for _ in range(3))
    k = torch.randn(3, 150, device=device, generator=g) * torch.exp(-torch.arange(150, device=device) / 40.0) / 10
    ref = tk_ops.reference.fftconv(u, k, pregate, postgate)
    got = torch_fftconv(u, k, pregate, postgate)
    return ((got.double() - ref).norm() / ref.norm()).item()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512, help="model width (a multiple of 8: tk_ops.nn.Linear's rule)")
    add_run_args(p)
    p.add_argument("--quick", action="store_true", help="tiny smoke run: 40 steps, 2 layers, dim 256, seq 256, batch 4")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.layers, args.dim, args.seq, args.batch, args.every = 40, 2, 256, 256, 4, 10
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this example trains on a CUDA GPU (tk_ops kernels need an H100/H200)", file=sys.stderr)
        return 2
    if not 1 <= args.seq <= MAX_SEQ:
        print(f"error: --seq must be between 1 and {MAX_SEQ} (the longest sequence tk_ops.fftconv takes), got "
              f"{args.seq}", file=sys.stderr)
        return 2
    if args.dim <= 0 or args.dim % 8:
        print(f"error: --dim must be a positive multiple of 8 (tk_ops.nn.Linear), got {args.dim}", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    peer_err = check_torch_peer(device)
    if not peer_err < 1e-5:
        print(f"FAIL: the PyTorch convolution is off the float64 reference by {peer_err:.2e}", file=sys.stderr)
        return 1

    torch.manual_seed(args.seed)
    data = make_data(args.steps, args.batch, args.seq, args.seed, device)
    ours, theirs = twin_hyena_models(args.layers, args.dim, args.seq, device)
    print(f"Hyena LM: {args.layers} layers, dim {args.dim} (filters of {args.seq} taps per channel, float32), seq "
          f"{args.seq}, batch {args.batch}, {sum(p.numel() for p in ours.parameters()):,} parameters, AdamW lr "
          f"{args.lr}, {args.steps} steps; the PyTorch convolution matches the float64 reference to {peer_err:.1e}")
    worst, worst_err = compare_first_step(ours, theirs, data[0])
    print(f"first step, same weights and batch: the gradients differ by at most {worst_err:.1e} (relative, {worst}; "
          f"allowed {FIRST_STEP_TOLERANCE})")
    if not worst_err <= FIRST_STEP_TOLERANCE:
        print(f"FAIL: the tk_ops model's first-step gradient of {worst} is off the PyTorch model's by {worst_err:.2e}",
              file=sys.stderr)
        return 1
    return compare_training(ours, theirs, data, args)


if __name__ == "__main__":
    sys.exit(main())
