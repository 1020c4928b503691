"""Host cost per eager call: tk_ops.matmul, tk_ops.nn.Linear and tk_ops.attention (forward, and forward with
backward) next to torch.matmul, torch.nn.Linear and scaled_dot_product_attention, in one run; and the drop-in entry
points (tk_ops.scaled_dot_product_attention, tk_ops.flash_attn.flash_attn_func) next to the op they wrap, each allowed
at most COMPAT_BUDGET_US more host time per call than that op (a row over it is marked and fails the run).

Every op runs on inputs small enough that the GPU finishes a call before the host has issued the next one, so the
wall time of many back-to-back calls, divided by their number, is what the host spends per call: Python, argument
checks, dispatch, autograd bookkeeping, allocation and launches. A run issues CALLS calls and synchronises once;
the implementations take turns run by run, and the median run is kept. Next to it, the GPU time per call (the
kernels' own time, from the profiler) and the kernel launches per call show that the host was the limit: a GPU
time close to the host time would mean the queue, not the host, set the pace.
"""
from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import core

TITLE = "Host time per eager call"
# What a drop-in entry point may add to the host cost of the op it wraps (argument mapping, layout views).
COMPAT_BUDGET_US = 2.0
CALLS = 200
RUNS, QUICK_RUNS = 15, 5
WARMUP = 20


@dataclass
class Impl:
    """`make()` builds the inputs and returns the call to time (a function of no arguments); `context()`, if
    given, is entered around the timed runs (an SDPA backend choice)."""
    name: str
    make: Callable[[], Callable[[], Any]]
    ours: bool = False
    context: Callable[[], Any] | None = None


@dataclass
class Timing:
    host_us: float | None = None
    gpu_us: float | None = None
    kernels: int | None = None
    error: str | None = None


@dataclass
class Row:
    group: str
    name: str
    ours: str
    results: dict[str, Timing] = field(default_factory=dict)
    wraps: str | None = None  # for a drop-in entry point: the implementation (another row entry) it wraps

    def extra_us(self) -> float | None:
        """Host microseconds per call that a drop-in entry point adds to the op it wraps."""
        ours, wrapped = self.results.get(self.ours), self.results.get(self.wraps or "")
        if ours is None or wrapped is None or not ours.host_us or not wrapped.host_us:
            return None
        return ours.host_us - wrapped.host_us

    def over_budget(self) -> bool:
        extra = self.extra_us()
        return extra is not None and extra > COMPAT_BUDGET_US

    def best_peer(self) -> tuple[str, Timing] | None:
        peers = [(n, r) for n, r in self.results.items() if n not in (self.ours, self.wraps) and r.host_us]
        return min(peers, key=lambda p: p[1].host_us) if peers else None

    def ratio(self) -> float | None:
        """The cheapest peer's host time over ours: above 1 means ours costs the host less."""
        ours, best = self.results.get(self.ours), self.best_peer()
        if ours is None or not ours.host_us or best is None:
            return None
        return best[1].host_us / ours.host_us


# ---------------------------------------------------------------- what is timed

def _bf16(*shape, grad=False):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=grad)


def _sdpa_backend(name: str):
    def enter():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([getattr(SDPBackend, name)])
    return enter


def cases(quick: bool = False) -> list[tuple[str, str, list[Impl], str | None]]:
    """(group, size, implementations, the implementation a drop-in wraps or None), ours first."""
    import torch.nn.functional as F

    import tk_ops
    from tk_ops import flash_attn

    m = n = k = 256

    def matmul(fn):
        def make():
            a, b = _bf16(m, k), _bf16(k, n)
            return lambda: fn(a, b)
        return make

    tokens, features = 64, 256

    def linear(cls):
        def make():
            layer = cls(features, features, device="cuda", dtype=torch.bfloat16)  # parameters require gradients
            x = _bf16(tokens, features)
            return lambda: layer(x)
        return make

    shape = (1, 8, 128, 64)

    def attention(fn, backward):
        def make():
            q, k_, v = (_bf16(*shape, grad=backward) for _ in range(3))
            if not backward:
                return lambda: fn(q, k_, v)
            grad = torch.randn_like(q)
            return lambda: torch.autograd.grad(fn(q, k_, v), (q, k_, v), grad)
        return make

    def sdpa_peers(backward):
        sdpa = F.scaled_dot_product_attention
        return [Impl("sdpa", attention(sdpa, backward)),
                Impl("sdpa cudnn", attention(sdpa, backward), context=_sdpa_backend("CUDNN_ATTENTION")),
                Impl("sdpa flash", attention(sdpa, backward), context=_sdpa_backend("FLASH_ATTENTION"))]

    def flash_attn_layout(fn, backward):
        # flash_attn's (B, N, H, D) layout; the wrapped op gets (B, H, N, D) views of the same memory.
        def make():
            b, h, n_, d = shape
            q, k_, v = (_bf16(b, n_, h, d, grad=backward) for _ in range(3))
            if not backward:
                return lambda: fn(q, k_, v)
            grad = torch.randn_like(q)
            return lambda: torch.autograd.grad(fn(q, k_, v), (q, k_, v), grad)
        return make

    def transposed(fn):
        return lambda q, k_, v: fn(q.transpose(1, 2), k_.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)

    size = "x".join(map(str, shape)) + " bf16"
    compat = [
        (f"SDPA drop-in {'forward+backward' if backward else 'forward'}", size,
         [Impl("tk_ops.scaled_dot_product_attention", attention(tk_ops.scaled_dot_product_attention, backward),
               ours=True),
          Impl("tk_ops.attention", attention(tk_ops.attention, backward)), *sdpa_peers(backward)[:1]],
         "tk_ops.attention")
        for backward in (False, True)]
    compat += [
        (f"flash_attn_func drop-in {'forward+backward' if backward else 'forward'}", size + " (B, N, H, D)",
         [Impl("tk_ops.flash_attn.flash_attn_func", flash_attn_layout(flash_attn.flash_attn_func, backward), ours=True),
          Impl("tk_ops.attention", flash_attn_layout(transposed(tk_ops.attention), backward))],
         "tk_ops.attention")
        for backward in (False, True)]
    return [
        ("matmul", f"{m}x{n}x{k} bf16", [Impl("tk_ops", matmul(tk_ops.matmul), ours=True),
                                         Impl("torch.matmul", matmul(torch.matmul))], None),
        ("nn.Linear forward", f"{tokens}x{features} -> {features} bf16",
         [Impl("tk_ops", linear(tk_ops.nn.Linear), ours=True), Impl("torch.nn.Linear", linear(torch.nn.Linear))],
         None),
        ("attention forward", size, [Impl("tk_ops", attention(tk_ops.attention, False), ours=True),
                                     *sdpa_peers(False)], None),
        ("attention forward+backward", size, [Impl("tk_ops", attention(tk_ops.attention, True), ours=True),
                                              *sdpa_peers(True)], None),
        *compat,
    ]


# ---------------------------------------------------------------- timing

def host_run_us(call: Callable[[], Any], calls: int) -> float:
    """Microseconds per call of `calls` back-to-back calls, the GPU drained before and after."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    return (issued - start) / calls * 1e6


def gpu_us(call: Callable[[], Any], calls: int) -> tuple[float, int]:
    """(kernel microseconds per call, kernel launches per call), from the profiler."""
    kernels = core.kernel_times(lambda i: call(), calls)
    return sum(t for t, _ in kernels.values()), sum(n for _, n in kernels.values())


def run_row(group: str, size: str, impls: list[Impl], runs: int, calls: int, wraps: str | None = None) -> Row:
    row = Row(group, size, next(i.name for i in impls if i.ours), wraps=wraps)
    prepared: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    for impl in impls:
        try:
            call = impl.make()
            with (impl.context or nullcontext)():
                for _ in range(WARMUP):
                    call()
            torch.cuda.synchronize()
            prepared[impl.name] = (call, impl.context or nullcontext)
        except Exception as e:  # one failing implementation must not hide the others
            row.results[impl.name] = Timing(error=core._short(e))
    samples: dict[str, list[float]] = {name: [] for name in prepared}
    for _ in range(runs):  # turns: a slow moment of the machine hits every implementation alike
        for name, (call, context) in prepared.items():
            with context():
                samples[name].append(host_run_us(call, calls))
    for name, (call, context) in prepared.items():
        with context():
            gpu, launches = gpu_us(call, calls)
        row.results[name] = Timing(statistics.median(samples[name]), gpu, launches)
    return row


# ---------------------------------------------------------------- reporting

def format_table(rows: list[Row]) -> str:
    """Host microseconds per call, ours first and each peer on its own line, with the GPU's time and launches
    per call and the cheapest peer's host time over ours (above 1: ours costs the host less)."""
    table = [["op", "size", "implementation", "host us", "GPU us", "kernels", "peer / ours", "over wrapped op"]]
    for r in rows:
        ratio, extra = r.ratio(), r.extra_us()
        for i, (name, t) in enumerate(r.results.items()):
            cells = ["error", "-", "-"] if t.error else [f"{t.host_us:.1f}", f"{t.gpu_us:.1f}", str(t.kernels)]
            first = i == 0
            over = "" if not first or extra is None else f"{extra:+.1f} us" + (" OVER" if r.over_budget() else "")
            table.append([r.group if first else "", r.name if first else "", name, *cells,
                          (f"{ratio:.2f}x" if ratio else "-") if first else "", over])
    body = core._aligned(table)
    lines = [body[0], "-" * len(body[0]), *body[1:]]
    errors = sorted({f"{n}: {t.error}" for r in rows for n, t in r.results.items() if t.error})
    if errors:
        lines += ["", "errors:", *(f"  {e}" for e in errors)]
    return "\n".join(lines)


def main(args) -> int:
    """python -m tk_ops.bench overhead [--quick] [--reps RUNS] [--out DIR]"""
    runs = args.reps or (QUICK_RUNS if args.quick else RUNS)
    rows = [run_row(group, size, impls, runs, CALLS, wraps) for group, size, impls, wraps in cases(args.quick)]
    env = core.environment()
    core.write_json(args.out / "overhead.json", "overhead", rows, {**env, "runs": runs, "calls": CALLS})
    print(f"{TITLE} on {env['device']}: median of {runs} runs of {CALLS} calls each, torch {env['torch']}")
    print(format_table(rows))
    print(f"saved {args.out / 'overhead.json'}")
    over = [f"{r.group} ({r.extra_us():+.1f} us)" for r in rows if r.over_budget()]
    if over:
        print(f"over the {COMPAT_BUDGET_US:.0f} us a drop-in may add to the op it wraps: {', '.join(over)}")
    failed = any(r.results[r.ours].error for r in rows if r.ours in r.results)
    return 1 if failed or over else 0
