"""Benchmark machinery shared by every family: timing, records, the printed table, JSON and plot.

A family module (tk_ops/bench/<family>.py) describes its comparisons as `Case`s: one problem size,
its FLOP count, a function making one fresh random input set, and the implementations to run on
it (ours and its peers). `run_cases` times them all and returns one `Row` per case.

Timing: every implementation is called through CUDA events on the current stream, after a
warm-up, and the median of `reps` calls is kept. Calls rotate through several input sets whose
combined size is a few times the L2 cache, so no call finds its inputs already in L2 from the
call before. Before each timed call the GPU is held busy for a moment (a spin kernel) so that the
CPU has queued the call by the time the start event fires: the measured interval is GPU time,
not Python or launch overhead.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

# GPU cycles the spin kernel burns before each timed call (~100 us at Hopper clocks).
SPIN_CYCLES = 200_000
# Input sets span this many times the L2 size, within these bounds.
L2_SPAN = 3
MIN_SETS, MAX_SETS = 2, 64
# A result this far from the first peer's (relative Frobenius error) is flagged in the table.
ERROR_FLAG = 5e-2


@dataclass
class Impl:
    """One implementation in a comparison. `fn(*args)` is the timed call. `setup(*inputs)`, if
    given, runs untimed once per input set and returns the args `fn` takes (e.g. a forward
    pass whose backward `fn` then times)."""
    name: str
    fn: Callable[..., Any]
    ours: bool = False
    setup: Callable[..., tuple] | None = None


@dataclass
class Case:
    group: str                       # table section and plot panel, e.g. "bf16"
    name: str                        # the size as shown, e.g. "4096x4096x1024"
    shape: tuple[int, ...]
    flops: float
    make_inputs: Callable[[], tuple]
    impls: list[Impl]


@dataclass
class Result:
    ms: float | None = None
    tflops: float | None = None
    error: str | None = None
    rel_err: float | None = None  # against the first peer (None for the first peer itself), to catch a broken peer


@dataclass
class Row:
    group: str
    name: str
    shape: tuple[int, ...]
    flops: float
    ours: str
    results: dict[str, Result] = field(default_factory=dict)
    rel_err: float | None = None  # ours against the first peer, on the same inputs

    def best_peer(self) -> tuple[str, Result] | None:
        peers = [(n, r) for n, r in self.results.items() if n != self.ours and r.tflops]
        return max(peers, key=lambda p: p[1].tflops) if peers else None

    def ratio(self) -> float | None:
        """Our TFLOP/s over the best peer's: above 1 means we are faster."""
        ours, best = self.results.get(self.ours), self.best_peer()
        if ours is None or not ours.tflops or best is None:
            return None
        return ours.tflops / best[1].tflops


# ---------------------------------------------------------------- timing

def tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(tensor_bytes(o) for o in obj)
    return 0


def rotation_count(set_bytes: int, l2_bytes: int) -> int:
    """How many input sets to rotate through so that together they span L2_SPAN x the L2 cache."""
    if set_bytes <= 0:
        return MIN_SETS
    return max(MIN_SETS, min(MAX_SETS, math.ceil(L2_SPAN * l2_bytes / set_bytes)))


def time_calls(fn: Callable, arg_sets: Sequence[tuple], reps: int, warmup: int) -> float:
    """Median milliseconds of fn(*args) over `reps` calls, cycling through arg_sets."""
    spin = getattr(torch.cuda, "_sleep", None)
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        args = arg_sets[(warmup + i) % len(arg_sets)]
        if spin is not None:
            spin(SPIN_CYCLES)
        starts[i].record()
        fn(*args)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def kernel_times(fn: Callable[[int], Any], calls: int, warmup: int = 3) -> dict[str, tuple[float, int]]:
    """GPU time per call of each kernel that ``fn(i)`` launches, from torch.profiler over ``calls`` calls after
    ``warmup`` unprofiled ones: {kernel name: (microseconds per call, launches per call)}, largest first."""
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for i in range(warmup, warmup + calls):
            fn(i)
        torch.cuda.synchronize()
    totals: dict[str, list] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = totals.setdefault(e.name, [0.0, 0])
            t[0] += e.device_time_total
            t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    return {name: (t / calls, n // calls) for name, (t, n) in ranked}


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| over all tensors of (possibly tuple) outputs. The difference is taken
    in float32 (enough for a sanity check, and half the memory of float64 on 16384^2 outputs)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    num = sum(float(torch.linalg.vector_norm(o.float() - r.float())) ** 2 for o, r in zip(outs, refs))
    den = sum(float(torch.linalg.vector_norm(r.float())) ** 2 for r in refs)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def backward_of(forward: Callable[..., torch.Tensor]):
    """(setup, fn) for timing only the backward pass of `forward`: setup runs the forward once per
    input set and draws a random output gradient; fn computes the input gradients."""
    def setup(*inputs):
        out = forward(*inputs)
        wrt = tuple(t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad)
        return out, wrt, torch.randn_like(out)

    def fn(out, wrt, grad):
        return torch.autograd.grad(out, wrt, grad, retain_graph=True)

    return setup, fn


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text[:300]


def run_case(case: Case, reps: int, warmup: int, l2_bytes: int, progress=None, timer=time_calls) -> Row:
    """Times every implementation of `case`; an implementation that raises is recorded as an
    error and the others still run. `timer` is replaceable so the bookkeeping can be tested
    without a GPU.

    The implementations are timed in two rounds, in order and then in reverse order (A B ... B A), each
    round with half the repetitions, and each reports the mean of its two medians: a GPU whose clock is
    still recovering from the previous (heavier) case then slows every implementation alike, instead of
    whichever happens to run first."""
    row = Row(case.group, case.name, tuple(case.shape), case.flops, next(i.name for i in case.impls if i.ours))
    first = case.make_inputs()
    inputs = [first] + [case.make_inputs() for _ in range(rotation_count(tensor_bytes(first), l2_bytes) - 1)]
    outputs, prepared = {}, {}
    for impl in case.impls:
        try:
            arg_sets = [impl.setup(*x) for x in inputs] if impl.setup else inputs
            outputs[impl.name] = impl.fn(*arg_sets[0])
            prepared[impl.name] = arg_sets
        except Exception as e:  # one failing implementation must not hide the others
            row.results[impl.name] = Result(error=_short(e))
    runnable = [i for i in case.impls if i.name in prepared]
    halves: dict[str, list[float]] = {i.name: [] for i in runnable}
    for order in (runnable, runnable[::-1]):
        for impl in order:
            if impl.name in row.results:  # failed in an earlier round
                continue
            try:
                halves[impl.name].append(timer(impl.fn, prepared[impl.name], max(1, reps // 2), warmup))
            except Exception as e:
                row.results[impl.name] = Result(error=_short(e))
    for impl in runnable:
        if impl.name not in row.results:
            ms = statistics.fmean(halves[impl.name])
            row.results[impl.name] = Result(ms=ms, tflops=case.flops / (ms * 1e-3) / 1e12)
    if progress is not None:
        for _ in case.impls:
            progress(1)
    prepared = None  # release the set-up state before comparing
    peers = [i.name for i in case.impls if not i.ours and i.name in outputs]
    if peers:
        for name in outputs.keys() - {peers[0]}:
            if row.results[name].ms is not None:
                row.results[name].rel_err = rel_error(outputs[name], outputs[peers[0]])
        if row.ours in outputs:
            row.rel_err = rel_error(outputs[row.ours], outputs[peers[0]])
    del inputs, outputs
    torch.cuda.empty_cache()
    return row


def run_cases(cases: list[Case], reps: int, warmup: int) -> list[Row]:
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    total = sum(len(c.impls) for c in cases)
    with _progress(total) as step:
        return [run_case(c, reps, warmup, l2_bytes, step) for c in cases]


class _progress:
    """A tqdm bar on stderr when tqdm is installed, else one line per finished case."""

    def __init__(self, total: int):
        self.total, self.done, self.bar = total, 0, None

    def __enter__(self):
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc="timing", unit="run", file=sys.stderr, leave=False)
        except ImportError:
            pass
        return self.step

    def step(self, n: int):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            print(f"  timed {self.done}/{self.total}", file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------- reporting

def _cell(res: Result | None, flag: bool = True) -> str:
    """TFLOP/s (ms), and " !" when `flag` and the result is far from the first peer's."""
    if res is None or res.error:
        return "error"
    wrong = flag and res.rel_err is not None and res.rel_err > ERROR_FLAG
    return f"{res.tflops:.1f} ({res.ms:.3f})" + (" !" if wrong else "")


def _aligned(table: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell: the first left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            for row in table]


def geomean_ratio(rows: list[Row]) -> float | None:
    ratios = [r.ratio() for r in rows if r.ratio()]
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None


def format_table(rows: list[Row]) -> str:
    """One section per group: TFLOP/s (ms) per implementation, the ratio of ours to the best peer
    (above 1: ours is faster) and our relative error against the first peer (" !" past ERROR_FLAG); another peer
    whose result is that far from the first peer's has " !" after its cell. The last line is the
    geometric-mean ratio per group, so it is what stays on screen."""
    lines, summary = [], []
    for g in dict.fromkeys(r.group for r in rows):
        grp = [r for r in rows if r.group == g]
        impls = list(dict.fromkeys(n for r in grp for n in r.results))
        table = [["size", *impls, "ratio", "rel.err"]]
        for r in grp:
            ratio = r.ratio()
            err = "-" if r.rel_err is None else f"{r.rel_err:.1e}" + (" !" if r.rel_err > ERROR_FLAG else "")
            table.append([r.name, *(_cell(r.results.get(n), flag=n != r.ours) for n in impls),
                          "-" if ratio is None else f"{ratio:.2f}x", err])
        body = _aligned(table)
        lines += ["", f"{g}: TFLOP/s (ms)", body[0], "-" * len(body[0]), *body[1:]]
        gm = geomean_ratio(grp)
        summary.append(f"{g} {gm:.2f}x" if gm else f"{g} -")
    errors = sorted({f"{n}: {res.error}" for r in rows for n, res in r.results.items() if res.error})
    if errors:
        lines += ["", "errors:", *(f"  {e}" for e in errors)]
    lines += ["", "ours / best peer, geometric mean: " + ", ".join(summary)]
    return "\n".join(lines)


def write_json(path: Path, family: str, rows: list[Row], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"family": family, **meta,
           "rows": [{**asdict(r), "ratio": r.ratio()} for r in rows]}
    path.write_text(json.dumps(doc, indent=2))


def write_plot(path: Path, title: str, rows: list[Row]) -> bool:
    """TFLOP/s against problem size, one panel per group, one line per implementation. Returns
    False (and writes nothing) when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups = list(dict.fromkeys(r.group for r in rows))
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), 4.5), squeeze=False)
    for ax, g in zip(axes[0], groups):
        grp = [r for r in rows if r.group == g]
        x = list(range(len(grp)))
        for n in dict.fromkeys(n for r in grp for n in r.results):
            y = [r.results[n].tflops if n in r.results and r.results[n].tflops else float("nan") for r in grp]
            ax.plot(x, y, marker="o", linewidth=2 if n == grp[0].ours else 1.2, label=n)
        ax.set_xticks(x, [r.name for r in grp], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(g)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def environment() -> dict:
    """What the numbers were measured on, stored with them."""
    from .. import __version__
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "tk_ops": __version__,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
