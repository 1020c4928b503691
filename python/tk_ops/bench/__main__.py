"""python -m tk_ops.bench <family> [--backward] [--out DIR] [--quick] [--reps N]

<family> is a kernel family (GPU time per call, TFLOP/s against the PyTorch peers) or `overhead` (host time per
eager call of the ops against their PyTorch peers).

A family's run prints one table per group and writes <out>/<stem>.json (core.write_json: the timing settings of
core.timing_meta, the environment, and per row its status, ratio, flags and, per implementation, the median, fastest
and slowest round and every output's check) and a plot. It exits 1 when ours raised on some size or any check
failed (the row then reads FAIL), 2 on a usage error or without a GPU, else 0."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

from . import core

NOT_FAMILIES = {"core"}


def families() -> list[str]:
    """Benchmark modules in this package: one per kernel family, and overhead."""
    return sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)])
                  if not m.name.startswith("_") and m.name not in NOT_FAMILIES)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tk_ops.bench",
                                description="Time tk_ops kernels against their PyTorch peers (TFLOP/s), or the host "
                                            "time per eager call (overhead).")
    p.add_argument("family", choices=families(),
                   help="kernel family to benchmark, or overhead: host microseconds per eager call")
    p.add_argument("--backward", action="store_true",
                   help="time training work instead of the forward: gemm and attention time the backward pass alone; "
                        "based, mamba2 and fftconv a training step (forward + backward)")
    p.add_argument("--out", type=Path, default=Path("bench_out"),
                   help="folder for <family>.json and <family>.png (default: bench_out/)")
    p.add_argument("--quick", action="store_true", help="a few sizes and fewer repetitions, for a smoke test")
    p.add_argument("--masks", action="store_true",
                   help="attention only: sliding windows, softcap and packed documents against FlexAttention and, "
                        "where they import, FlashAttention-4 and flash-attn")
    p.add_argument("--config", default=None,
                   help="gemm only: our forward products in this named kernel configuration "
                        "(tk_ops._testing.gemm.CONFIGS) instead of each shape's own pick")
    p.add_argument("--reps", type=int, default=None,
                   help="timed calls per round of each implementation (default 30, --quick 9): a CUDA graph of "
                        f"reps / {core.REPLAYS} calls replayed {core.REPLAYS} times, median kept; for overhead, "
                        "timed runs of many calls")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("error: the benchmarks need a CUDA GPU (tk_ops kernels run on H100/H200), and torch sees none",
              file=sys.stderr)
        return 2
    if args.masks and args.family != "attention":
        print("error: --masks applies to the attention benchmark only", file=sys.stderr)
        return 2
    if args.config and (args.family != "gemm" or args.backward):
        print("error: --config applies to the gemm benchmark's forward products only", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__package__}.{args.family}")
    if hasattr(module, "main"):  # a benchmark with its own measurement and table (overhead)
        return module.main(args)
    options = {"masks": True} if args.masks else {}
    if args.config:
        options["config"] = args.config
    cases = module.cases(quick=args.quick, backward=args.backward, **options)
    reps = args.reps or (9 if args.quick else 30)
    warmup = 3 if args.quick else 10
    rows = core.run_cases(cases, reps=reps, warmup=warmup)

    env = core.environment()
    stem = args.family + ("_masks" if args.masks else "") + ("_backward" if args.backward else "")
    title = f"{getattr(module, 'MASKS_TITLE', module.TITLE) if args.masks else module.TITLE}" \
            f"{' (backward)' if args.backward else ''} on {env['device']}"
    timing = core.timing_meta(reps)
    core.write_json(args.out / f"{stem}.json", args.family, rows,
                    {**env, "backward": args.backward, "quick": args.quick, **timing})
    plotted = core.write_plot(args.out / f"{stem}.png", title, rows)
    print(f"{title}; GPU time per call, median of {timing['rounds']} rounds [min-max], each the median of "
          f"{timing['replays']} replays of a CUDA graph of {timing['calls_per_graph']} calls; torch {env['torch']}")
    print(core.format_table(rows))
    print(f"saved {args.out / (stem + '.json')}"
          + (f" and {stem}.png" if plotted else " (no plot: matplotlib missing)"))
    # A run where our kernels failed, or where any result is wrong, is not a benchmark result: say so in the exit
    # status.
    return 1 if core.failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
