"""Train a small Hugging Face Llama (LlamaForCausalLM, random initialisation) twice from the same weights on the same
synthetic data: once with attn_implementation="sdpa" (PyTorch's kernels), once with attn_implementation="tk_ops"
(tk_ops.integrations.transformers). AdamW under torch.autocast("cuda", dtype=torch.bfloat16) with float32 master
weights. Prints both loss curves with their step times, the mean step time of each, and the largest difference
between the curves; exits with status 1 if they disagree beyond bf16 noise (mean losses over windows of --every
steps more than 0.05 nats + 3% of the loss apart: examples/train_gpt.py's bound, where the reasoning is), if the
loss did not fall, or (with --generate) if greedy decoding disagrees away from a near-tie.

    python examples/train_hf_llama.py               # 200 steps, 4 layers, hidden 512, 8 heads (2 kv), seq 1024
    python examples/train_hf_llama.py --quick       # a smoke run of a few seconds
    python examples/train_hf_llama.py --packed      # documents packed into one row per step, position_ids restarting
    python examples/train_hf_llama.py --generate    # then greedy generate() with both attentions on the same weights
    python examples/train_hf_llama.py --cpu-smoke   # a tiny run on the CPU (see below)

The data is examples/train_gpt.py's (no download): each sequence repeats a random segment of a fixed Markov chain
over 256 tokens, so the repeats are predictable only by attending back one period. With --packed each step is one
row of batch * seq tokens holding documents of random lengths, as transformers' DataCollatorWithFlattening makes
them: position_ids restart at each document, and both models are called with use_cache=False, so transformers' masks
detect the documents (sdpa: a block-diagonal boolean mask over the whole row; tk_ops: flash_attn_varlen_func over
the documents).

Linear layers: tk_ops.integrations.transformers.swap_linears replaces the nn.Linear modules whose parameters
tk_ops.nn.Linear takes as they are, bfloat16 ones. With float32 master weights there is none, so both runs use
PyTorch's linear layers and the comparison is of the attention alone; the script prints swap_linears' report, which
says so. (A bf16-parameter model, trained without float32 master weights, would swap every projection.)

--cpu-smoke runs a tiny model for a few steps on the CPU, without autocast: the tk_ops attention there falls back to
transformers' sdpa attention (tk_ops' kernels take CUDA tensors; it warns once with the reason 'device'), so both runs
compute the same thing and the check is of the wiring (registration, the mask function, the fallback, packed rows,
generate()), not of the kernels.
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from tk_ops.integrations import transformers as tk_transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gpt import (TOLERANCE_ABS, TOLERANCE_REL, VOCAB, PackedData, add_run_args, document_ids, make_data,  # noqa: E402
                       make_packed_data)

GENERATE_TOKENS = 32
# A greedy token may differ from the reference's where the reference's top two logits are closer than bf16 rounding
# can move them. That noise is measured: the same weights on sdpa under bf16 autocast differ from the float32 model by
# E per row (the largest difference over its logits). A token we chose is accepted if the float32 model scores it
# within 2 E (+ 1e-3 of the row's spread, for runs with no rounding difference) of its best.
NOISE_FACTOR, NOISE_FLOOR = 2.0, 1e-3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512, help="hidden size; hidden / heads must be 64, 96, 128 or 256")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (GQA)")
    add_run_args(p, compile_option=False)
    p.add_argument("--packed", action="store_true",
                   help="pack documents of random lengths (seq / 8 to seq) into one row of batch * seq tokens")
    p.add_argument("--generate", action="store_true",
                   help=f"after training, greedy generate() {GENERATE_TOKENS} tokens with both attentions")
    p.add_argument("--quick", action="store_true", help="smoke run: 40 steps, 2 layers, seq 256, batch 4")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny CPU run (4 steps, 2 layers, hidden 64): the tk_ops attention falls back on the CPU")
    args = p.parse_args(argv)
    args.device = "cuda"
    args.new_tokens = GENERATE_TOKENS
    if args.quick:
        args.steps, args.layers, args.seq, args.batch, args.every = 40, 2, 256, 4, 10
    if args.cpu_smoke:
        args.device = "cpu"
        args.steps, args.layers, args.hidden, args.heads, args.kv_heads = 4, 2, 64, 4, 2
        args.seq, args.batch, args.every, args.new_tokens = 32, 2, 2, 8
    return args


# ---------------------------------------------------------------- model and data


def llama_config(args):
    from transformers import LlamaConfig
    ffn = -(-8 * args.hidden // 3 // 64) * 64  # about 8/3 of the width, a multiple of 64 (SwiGLU's usual ratio)
    return LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=ffn,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
                       max_position_embeddings=max(args.seq * (args.batch if args.packed else 1), 64),
                       rms_norm_eps=1e-5, initializer_range=0.02, tie_word_embeddings=False, use_cache=False,
                       attention_dropout=0.0, pad_token_id=0, bos_token_id=None, eos_token_id=None)


def twin_models(args, device):
    """The sdpa model and a copy of it (same float32 weights) on the tk_ops attention."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(args.seed)
    theirs = AutoModelForCausalLM.from_config(llama_config(args), attn_implementation="sdpa").to(device)
    ours = copy.deepcopy(theirs)
    ours.set_attn_implementation("tk_ops")
    return ours, theirs


def step_batch(data, step: int):
    """(the model's keyword arguments, the targets) of one step: make_data's sequences, or make_packed_data's row of
    documents with position_ids restarting at each (DataCollatorWithFlattening's layout)."""
    if isinstance(data, PackedData):
        ids, cu = data.inputs[step][None], data.cu_seqlens[step]
        n = ids.shape[1]
        positions = torch.arange(n, device=ids.device) - cu.long()[document_ids(cu, n)]
        return {"input_ids": ids, "position_ids": positions[None], "use_cache": False}, data.targets[step]
    return {"input_ids": data[step, :, :-1], "use_cache": False}, data[step, :, 1:]


# ---------------------------------------------------------------- training


def train(model, data, args) -> tuple[list[float], list[float]]:
    """Losses and step times in ms, per step."""
    cuda = args.device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    losses, times = [], []
    model.train()
    for step in range(len(data)):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            begin = time.perf_counter()
        kwargs, targets = step_batch(data, step)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = model(**kwargs).logits
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if cuda:
            end.record()
            times.append((start, end))
        else:
            times.append((time.perf_counter() - begin) * 1e3)
        losses.append(loss.detach())
    if cuda:
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in times]
    return [x.item() for x in losses], times


def windows(values: list[float], every: int) -> list[tuple[int, float]]:
    return [(min(i + every, len(values)), sum(values[i:i + every]) / len(values[i:i + every]))
            for i in range(0, len(values), every)]


def compare(ours, theirs, data, args) -> int:
    """Train both, print the curves and times, and judge: 0 when the curves agree (and the loss fell), else 1."""
    loss_tk, ms_tk = train(ours, data, args)
    loss_pt, ms_pt = train(theirs, data, args)
    warmup = min(10, args.steps // 2)
    print(f"\nmean loss and step time per {args.every} steps")
    print(f"{'step':>6}  {'tk_ops':>8}  {'sdpa':>8}  {'diff':>8}  {'tk_ops ms':>9}  {'sdpa ms':>9}")
    worst, worst_allowed, failed = -1.0, 0.0, False
    for (step, a), (_, b), (_, ta), (_, tb) in zip(windows(loss_tk, args.every), windows(loss_pt, args.every),
                                                   windows(ms_tk, args.every), windows(ms_pt, args.every)):
        diff = abs(a - b)
        allowed = args.tolerance if args.tolerance is not None else TOLERANCE_ABS + TOLERANCE_REL * b
        failed |= not diff <= allowed  # NaN fails too
        if not math.isnan(worst) and not diff <= worst:  # the largest, or the first NaN
            worst, worst_allowed = diff, allowed
        print(f"{step:>6}  {a:>8.4f}  {b:>8.4f}  {diff:>8.4f}  {ta:>9.2f}  {tb:>9.2f}")
    mean_tk = sum(ms_tk[warmup:]) / max(1, len(ms_tk[warmup:]))
    mean_pt = sum(ms_pt[warmup:]) / max(1, len(ms_pt[warmup:]))
    print(f"\nmean step time (after {warmup} warm-up steps): tk_ops {mean_tk:.2f} ms, sdpa {mean_pt:.2f} ms "
          f"({mean_pt / mean_tk:.2f}x)")
    print(f"max |difference| between the curves: {worst:.4f} nats (allowed there: {worst_allowed:.4f})")
    last = max(windows(loss_tk, args.every)[-1][1], windows(loss_pt, args.every)[-1][1])
    if failed:
        print("FAIL: the tk_ops and sdpa loss curves disagree beyond bf16 noise", file=sys.stderr)
        return 1
    if not (args.quick or args.cpu_smoke) and not last < 0.6 * math.log(VOCAB):
        print(f"FAIL: the loss did not fall enough (last window {last:.3f}, needs < {0.6 * math.log(VOCAB):.3f})",
              file=sys.stderr)
        return 1
    print("OK: the curves agree")
    return 0


# ---------------------------------------------------------------- generation


def prompts(args, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Four left-padded prompts of different lengths from the training distribution, and their attention mask."""
    longest = min(64, args.seq // 2)
    lengths = [longest, longest // 2, longest // 4 + 1, 3 * longest // 4]
    tokens = make_data(1, len(lengths), longest, args.seed + 1, "cpu")[0, :, :longest]
    ids = torch.zeros(len(lengths), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, longest - n:], mask[i, longest - n:] = tokens[i, :n], 1
    return ids.to(device), mask.to(device)


def check_generate(model, args) -> int:
    """Greedy generate() on the same weights with the tk_ops attention (prefill with left padding, then decoding
    steps against the KV cache) and with sdpa, both under the training's autocast. The float32 model (sdpa, no
    autocast) then scores our tokens (teacher forcing): each must be its best token, or within the measured bf16
    noise of it (see NOISE_FACTOR). 0 when so, else 1."""
    device = args.device
    cuda = device == "cuda"
    ids, mask = prompts(args, device)
    model.eval()
    opts = dict(attention_mask=mask, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                do_sample=False, pad_token_id=0, use_cache=True)
    with torch.no_grad():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            model.set_attn_implementation("tk_ops")
            ours = model.generate(ids, **opts)
            model.set_attn_implementation("sdpa")
            theirs = model.generate(ids, **opts)
            full_mask = torch.cat([mask, torch.ones_like(ours[:, ids.shape[1]:])], dim=1)
            bf16 = model(ours, attention_mask=full_mask).logits.float()
        scores = model(ours, attention_mask=full_mask).logits.float()
    model.set_attn_implementation("tk_ops")
    p = ids.shape[1]
    new = ours[:, p:]
    rows = scores[:, p - 1:-1]  # the float32 logits that chose each new token
    gap = rows.max(-1).values - rows.gather(-1, new[..., None])[..., 0]
    allowed = NOISE_FACTOR * (bf16[:, p - 1:-1] - rows).abs().amax(-1) + NOISE_FLOOR * rows.std(-1)
    top2 = rows.topk(2, dim=-1).values
    decisive = float(((top2[..., 0] - top2[..., 1]) > allowed).float().mean())
    same = (ours == theirs).all(-1)
    print(f"\ngreedy tokens ({args.new_tokens} per prompt, {len(new)} left-padded prompts): "
          f"{int(same.sum())} of {len(new)} sequences identical with tk_ops and sdpa")
    for i in range(len(new)):
        if not same[i]:
            first = int((ours[i, p:] != theirs[i, p:]).nonzero()[0])
            print(f"  prompt {i}: first difference at new token {first}; the float32 model's gap there to our "
                  f"token {float(gap[i, first]):.4f} (bf16 noise bound {float(allowed[i, first]):.4f})")
    bad = gap > allowed
    if bad.any():
        i, t = (int(x) for x in bad.nonzero()[0])
        print(f"FAIL: prompt {i}, new token {t}: tk_ops chose a token the float32 model scores {float(gap[i, t]):.4f} "
              f"below its best (bf16 noise bound {float(allowed[i, t]):.4f}): not a near-tie", file=sys.stderr)
        return 1
    print(f"OK: every token tk_ops chose is the float32 model's greedy choice or within bf16 noise of it "
          f"({decisive:.0%} of the steps decisive)")
    return 0


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("error: this example trains on a CUDA GPU (the tk_ops kernels need an H100/H200); --cpu-smoke runs "
                  "a tiny model on the CPU, where the tk_ops attention falls back", file=sys.stderr)
            return 2
        if args.hidden % args.heads or args.hidden // args.heads not in (64, 96, 128, 256):
            print(f"error: --hidden / --heads must be 64, 96, 128 or 256 (the kernels' head dimensions), got "
                  f"{args.hidden} / {args.heads}", file=sys.stderr)
            return 2
    tk_transformers.register()
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    data = (make_packed_data if args.packed else make_data)(args.steps, args.batch, args.seq, args.seed, device)
    ours, theirs = twin_models(args, device)
    report = tk_transformers.swap_linears(ours)
    total = report.swapped + len(report.skipped)
    reasons = sorted(set(report.skipped.values()))
    print(f"Llama: {args.layers} layers, hidden {args.hidden}, {args.heads} heads ({args.kv_heads} kv), head_dim "
          f"{args.hidden // args.heads}, vocab {VOCAB}, {sum(p.numel() for p in ours.parameters()):,} float32 "
          f"parameters; seq {args.seq}, batch {args.batch}, AdamW lr {args.lr}, {args.steps} steps, "
          f"{'bf16 autocast' if args.device == 'cuda' else 'float32 (no autocast)'}")
    if args.packed:
        print(f"packed: one row of {args.batch * args.seq} tokens per step, documents of {max(1, args.seq // 8)} to "
              f"{args.seq} tokens, position_ids restarting in each")
    print(f"swap_linears: {report.swapped} of {total} nn.Linear swapped to tk_ops.nn.Linear"
          + (f"; left alone: {'; '.join(reasons)}" if reasons else ""))
    if report.swapped == 0 and any("float32" in r for r in reasons):
        print("  (float32 master weights: tk_ops.nn.Linear needs bfloat16 parameters, so both runs use PyTorch's "
              "linear layers and compare the attention alone)")
    if args.cpu_smoke:
        print("CPU smoke: the tk_ops attention falls back to transformers' sdpa attention on CPU tensors (reason "
              "'device'), so both runs compute the same thing; this checks the wiring, not the kernels")
    with warnings.catch_warnings():
        if args.cpu_smoke:
            warnings.simplefilter("ignore", tk_transformers.FallbackWarning)
        status = compare(ours, theirs, data, args)
        if args.generate:
            status |= check_generate(ours, args)
    return status


if __name__ == "__main__":
    sys.exit(main())
