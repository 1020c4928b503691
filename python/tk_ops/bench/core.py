"""Benchmark machinery shared by every family: timing, correctness checks, records, the printed table, JSON and plot.

A family module (tk_ops/bench/<family>.py) describes its comparisons as `Case`s: one problem size,
its FLOP count, a function making one fresh random input set, the implementations to run on
it (ours and its peers), the tolerance of each output dtype and, optionally, the outputs' names. `run_case`
times them all and returns one `Row` per case.

Timing: GPU time per call, the same rule for every implementation, in `measure`. After a warm-up, a CUDA graph of
`calls` calls is captured and replayed REPLAYS times, each replay behind a spin kernel long enough for the host to
have queued the whole replay before the start event fires (the spin is sized from the replay's own host time); the
round's figure is the median replay's time over `calls`. No host work lies between the two events: Python, argument
checks, launches and allocation are not timed, for ours as for the peers. Where a call cannot be captured, the
round's figure is instead the sum of the call's kernel times from torch.profiler (self device time of every CUDA
activity), which is GPU-only too. Beside it each round times `calls` back-to-back eager calls between two events:
when that exceeds the GPU-only figure by more than HOST_MARGIN, the host's cost shows through in eager use and the
result is flagged (likewise when capture failed, or when the graph's time exceeds the kernels' sum by more than
IDLE_MARGIN: the GPU idled between kernels). Calls rotate through several input sets whose combined size is a few
times the L2 cache, so no call finds its inputs already in L2 from the call before.

Every implementation is timed in ROUNDS rounds, in order, reversed, in order (A B C, C B A, A B C), so that a GPU whose
clock drifts slows every implementation alike; a result is the median round, with the fastest and slowest beside it.

Correctness gates the numbers: each output (and each gradient) of every implementation is compared on its own with
the reference's (the first peer that ran), as a relative Frobenius error and row by row, against the case's
tolerance for the output's dtype; the output of the timed graph is held to the same implementation's eager output.
A failed check makes the row FAIL: it gets no ratio, stays out of the geometric means and makes the command exit 1.
"""
from __future__ import annotations

import contextlib
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

# Spin before each timed stretch: at least this many GPU cycles (~100 us at Hopper clocks), and at least
# SPIN_SAFETY x the host time of queueing what follows (capped at MAX_SPIN_MS).
SPIN_CYCLES = 200_000
SPIN_SAFETY = 3.0
MAX_SPIN_MS = 50.0
# Input sets span this many times the L2 size, within these bounds.
L2_SPAN = 3
MIN_SETS, MAX_SETS = 2, 64
# Rounds per implementation, and timed replays of the captured graph in each round.
ROUNDS = 3
REPLAYS = 3
# Flags: eager time over GPU-only time, and graph time over the kernels' summed time, past these margins.
HOST_MARGIN = 0.10
IDLE_MARGIN = 0.25
# A row (a vector along the last dimension) may be off by this many times the tolerance of the whole tensor: a row's
# rounding error sums fewer terms, so it fluctuates more, while a wrong row (unwritten, another head's) is off by ~1.
ROW_SLACK = 4.0
# Tolerances by output dtype for families that set none: relative error between two independent implementations.
DEFAULT_TOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2, torch.float32: 1e-2, torch.float64: 1e-6}

GRAPH, PROFILER = "graph", "profiler"
FLAG_MARKS = {"host": "h", "profiler": "p", "idle": "i"}
FLAG_TEXT = {
    "host": f"host time shows through: back-to-back eager calls take over {1 + HOST_MARGIN:.2f}x the GPU-only time",
    "profiler": "the call could not be captured in a CUDA graph: the time is the profiler's sum of its kernels",
    "idle": f"the graph's time exceeds the sum of its kernels by over {IDLE_MARGIN:.0%}: the GPU idled between them",
}


@dataclass
class Impl:
    """One implementation in a comparison. `fn(*args)` is the timed call. `setup(*inputs)`, if
    given, runs untimed once per input set and returns the args `fn` takes (e.g. a forward
    pass whose backward `fn` then times, or the inputs copied into the implementation's own layout)."""
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
    tol: dict = field(default_factory=lambda: dict(DEFAULT_TOL))  # output dtype -> allowed relative error
    outputs: tuple[str, ...] | None = None  # the outputs' names in the order fn returns them, for the report
    notes: list[str] = field(default_factory=list)  # e.g. a peer left out because it does not import


@dataclass
class Sample:
    """One round of one implementation, from `measure`."""
    gpu_ms: float                     # GPU time per call: the graph's, or the profiler's kernel sum
    method: str = GRAPH               # GRAPH or PROFILER
    eager_ms: float | None = None     # back-to-back eager calls between two events, per call
    kernel_ms: float | None = None    # the profiler's kernel sum per call, when profiled this round
    capture_error: str | None = None  # why the call could not be captured
    graph_output: Any = None          # the timed graph's output of its first call (on the first input set)


@dataclass
class OutputCheck:
    output: str                  # the output's name, e.g. "dq"
    against: str                 # the implementation (or "eager") it was compared with
    rel_err: float | None = None
    row_err: float | None = None  # the worst row's error (see worst_row)
    tol: float | None = None
    passed: bool = False
    note: str | None = None      # why it failed, when not by its error (a shape, a missing output)


@dataclass
class Result:
    ms: float | None = None          # GPU time per call: the median round
    ms_min: float | None = None
    ms_max: float | None = None
    rounds_ms: list[float] = field(default_factory=list)
    tflops: float | None = None      # from the median
    method: str | None = None        # GRAPH, or PROFILER when the call could not be captured
    eager_ms: float | None = None    # median over rounds of the eager per-call time
    kernel_ms: float | None = None   # the profiler's kernel sum per call
    flags: list[str] = field(default_factory=list)
    error: str | None = None
    capture_error: str | None = None
    rel_err: float | None = None     # the worst output's error against the reference (None for the reference)
    checks: list[OutputCheck] = field(default_factory=list)
    passed: bool | None = None       # every check passed; None when nothing was compared

    @property
    def failed(self) -> bool:
        return self.passed is False


@dataclass
class Row:
    group: str
    name: str
    shape: tuple[int, ...]
    flops: float
    ours: str
    results: dict[str, Result] = field(default_factory=dict)
    rel_err: float | None = None  # ours against the reference, the worst output
    reference: str | None = None  # the peer every output was compared with
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """FAIL when any implementation's check failed; ok when ours passed its checks against the reference; else
        unchecked (no peer ran, or ours did not)."""
        if any(r.failed for r in self.results.values()):
            return "FAIL"
        ours = self.results.get(self.ours)
        against_peer = ours is not None and any(c.against != "eager" for c in ours.checks)
        return "ok" if against_peer and ours.passed else "unchecked"

    def flagged(self) -> dict[str, list[str]]:
        return {n: list(r.flags) for n, r in self.results.items() if r.flags}

    def best_peer(self) -> tuple[str, Result] | None:
        peers = [(n, r) for n, r in self.results.items() if n != self.ours and r.tflops and not r.failed]
        return max(peers, key=lambda p: p[1].tflops) if peers else None

    def ratio(self) -> float | None:
        """Our TFLOP/s over the best peer's: above 1 means we are faster. None for a row that failed its check."""
        ours, best = self.results.get(self.ours), self.best_peer()
        if self.status == "FAIL" or ours is None or not ours.tflops or best is None:
            return None
        return ours.tflops / best[1].tflops

    def to_json(self) -> dict:
        return {**asdict(self), "status": self.status, "ratio": self.ratio(), "flags": self.flagged()}


# ---------------------------------------------------------------- statistics and flags

def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    if not values:
        raise ValueError("no values")
    return statistics.median(values), min(values), max(values)


def flags_for(gpu_ms: float, eager_ms: float | None, kernel_ms: float | None, method: str) -> list[str]:
    """The flags of one result, the same rule for every implementation (FLAG_TEXT says what each means)."""
    flags = []
    if eager_ms is not None and eager_ms > gpu_ms * (1 + HOST_MARGIN):
        flags.append("host")
    if method == PROFILER:
        flags.append("profiler")
    elif kernel_ms is not None and gpu_ms > kernel_ms * (1 + IDLE_MARGIN):
        flags.append("idle")
    return flags


def summarize(samples: Sequence[Sample], flops: float) -> Result:
    """One implementation's rounds as a Result: median, min and max of the GPU-only times, and its flags."""
    gpu = [s.gpu_ms for s in samples]
    ms, lo, hi = spread(gpu)
    eager = [s.eager_ms for s in samples if s.eager_ms is not None]
    kernel = [s.kernel_ms for s in samples if s.kernel_ms is not None]
    method = PROFILER if any(s.method == PROFILER for s in samples) else GRAPH
    eager_ms = statistics.median(eager) if eager else None
    kernel_ms = statistics.median(kernel) if kernel else None
    capture = next((s.capture_error for s in samples if s.capture_error), None)
    return Result(ms=ms, ms_min=lo, ms_max=hi, rounds_ms=gpu, tflops=flops / (ms * 1e-3) / 1e12 if ms > 0 else None,
                  method=method, eager_ms=eager_ms, kernel_ms=kernel_ms,
                  flags=flags_for(ms, eager_ms, kernel_ms, method), capture_error=capture)


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


_streams: dict = {}


def allow_recompiles(per_function: int = 256, total: int = 1024) -> None:
    """Room in dynamo's cache for one compilation of a compiled peer per benchmarked shape: past the default limit
    (8) torch.compile gives up and runs the function eagerly, which would time another implementation."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, per_function)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, total)


@contextlib.contextmanager
def bench_stream():
    """Runs the body on a side stream kept for the benchmark. A CUDA graph is captured on a stream other than the
    default one, and autograd runs a backward on the stream of its forward: with the set-up forwards and the capture
    on this one stream, a backward whose forward ran untimed can be captured."""
    if not torch.cuda.is_available():
        yield
        return
    current = torch.cuda.current_stream()
    stream = _streams.get(current.device)
    if stream is None:
        stream = _streams[current.device] = torch.cuda.Stream(current.device)
    if current == stream:
        yield
        return
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        yield
    current.wait_stream(stream)


def _spin(cycles: int) -> None:
    torch.cuda._sleep(int(cycles))


_cycles_per_ms: list[float] = []


def cycles_per_ms() -> float:
    """GPU cycles of the spin kernel per millisecond, measured once."""
    if not _cycles_per_ms:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _spin(10_000)
        start.record()
        _spin(5_000_000)
        end.record()
        end.synchronize()
        _cycles_per_ms.append(5_000_000 / max(start.elapsed_time(end), 1e-3))
    return _cycles_per_ms[0]


def spin_cycles(host_ms: float) -> int:
    """A spin long enough to cover host_ms of queueing SPIN_SAFETY times over, at least SPIN_CYCLES."""
    rate = cycles_per_ms()
    return int(max(SPIN_CYCLES, min(SPIN_SAFETY * host_ms, MAX_SPIN_MS) * rate))


def _eager_ms(call: Callable[[int], Any], calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _spin(SPIN_CYCLES)
    start.record()
    for i in range(calls):
        call(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _kernel_ms(call: Callable[[int], Any], calls: int) -> float:
    return sum(t for t, _ in kernel_times(call, calls, warmup=0).values()) / 1000.0


def _graph_ms(call: Callable[[int], Any], calls: int) -> tuple[float, Any]:
    """(milliseconds per call over REPLAYS replays of one graph of `calls` calls, the first call's output)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.current_stream()):
        first = call(0)
        for i in range(1, calls):
            call(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()  # untimed: uploads the graph; its host time sizes the spin
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    cycles = spin_cycles(host_ms)
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _spin(cycles)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    torch.cuda.synchronize()
    # A copy outside the graph's memory pool, so that the pool is released with the graph rather than kept for one
    # output until the checks.
    first = _copy_outputs(first)
    del graph
    return statistics.median(times), first


def _copy_outputs(out):
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (tuple, list)):
        return [_copy_outputs(o) for o in out]  # compared through flatten_outputs, which takes either
    return out


def measure(fn: Callable, arg_sets: Sequence[tuple], calls: int, warmup: int, capture: bool = True,
            profile: bool = True) -> Sample:
    """One round of fn(*args), cycling through arg_sets: the one timing rule of every implementation (module
    docstring). `capture=False` skips the graph (a call that failed to capture before); `profile` also sums the
    kernels' times from the profiler, which is the figure when there is no graph."""
    n = len(arg_sets)

    def call(i):
        return fn(*arg_sets[i % n])

    with bench_stream():
        for i in range(warmup):
            call(i)
        torch.cuda.synchronize()
        eager = _eager_ms(call, calls)
        kernel = _kernel_ms(call, calls) if profile or not capture else None
        gpu, output, error = None, None, None
        if capture:
            try:
                gpu, output = _graph_ms(call, calls)
            except Exception as e:  # a host sync, a CPU tensor, an unsupported call: fall back to the profiler
                error = _short(e)
                torch.cuda.synchronize()
        if gpu is None:
            if kernel is None:
                kernel = _kernel_ms(call, calls)
            return Sample(kernel, PROFILER, eager, kernel, error or "not captured")
        return Sample(gpu, GRAPH, eager, kernel, None, output)


def time_calls(fn: Callable, arg_sets: Sequence[tuple], reps: int, warmup: int) -> float:
    """GPU milliseconds per call of fn(*args) over `reps` calls, cycling through arg_sets (as `measure` times)."""
    return measure(fn, arg_sets, max(1, reps), warmup, profile=False).gpu_ms


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


# ---------------------------------------------------------------- correctness

def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| over all tensors of (possibly tuple) outputs. The difference is taken
    in float32 (enough for a sanity check, and half the memory of float64 on 16384^2 outputs)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    num = sum(float(torch.linalg.vector_norm(o.float() - r.float())) ** 2 for o, r in zip(outs, refs))
    den = sum(float(torch.linalg.vector_norm(r.float())) ** 2 for r in refs)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def worst_row(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest error of a row (a vector along the last dimension, leading dimensions flattened): ||out_r - ref_r||
    over the larger of ||ref_r|| and the root-mean-square row norm, so that a row of small values is measured against
    the tensor's scale. Not finite anywhere: inf."""
    width = out.shape[-1] if out.dim() > 0 else 1
    o, r = out.float().reshape(-1, width), ref.float().reshape(-1, width)
    if o.numel() == 0:
        return 0.0
    norms = torch.linalg.vector_norm(r, dim=1)
    scale = norms.square().mean().sqrt().clamp_min(1e-30)
    err = torch.linalg.vector_norm(o - r, dim=1) / torch.maximum(norms, scale)
    worst = float(err.max())
    return worst if math.isfinite(worst) else math.inf


def flatten_outputs(out) -> list:
    """The tensors of an output in order (nested tuples and lists flattened; None kept, other values dropped)."""
    if out is None or isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten_outputs(o)]
    return []


def tolerance(tol: dict, *dtypes) -> float:
    """The case's tolerance for the least precise of the dtypes compared."""
    return max(tol.get(d, DEFAULT_TOL.get(d, DEFAULT_TOL[torch.bfloat16])) for d in dtypes)


def check_outputs(out, ref, tol: dict, names: Sequence[str] | None = None, against: str = "reference"
                  ) -> list[OutputCheck]:
    """Each output of `out` against the same output of `ref`, on its own: same shape, relative error within the
    tolerance of its dtype and every row within ROW_SLACK times that. NaN or inf never passes."""
    outs, refs = flatten_outputs(out), flatten_outputs(ref)
    if len(outs) != len(refs):
        return [OutputCheck("outputs", against, note=f"{len(outs)} outputs, {len(refs)} from {against}")]
    checks = []
    for i, (o, r) in enumerate(zip(outs, refs)):
        name = names[i] if names is not None and i < len(names) else f"output {i}"
        if o is None or r is None:
            same = o is None and r is None
            checks.append(OutputCheck(name, against, passed=same, note=None if same else "None on one side only"))
            continue
        t = tolerance(tol, o.dtype, r.dtype)
        if tuple(o.shape) != tuple(r.shape):
            checks.append(OutputCheck(name, against, tol=t,
                                      note=f"shape {tuple(o.shape)}, {tuple(r.shape)} from {against}"))
            continue
        err, row = rel_error(o, r), worst_row(o, r)
        passed = err <= t and row <= ROW_SLACK * t  # False for NaN
        checks.append(OutputCheck(name, against, err, row, t, passed))
    return checks


def grad_like(out: torch.Tensor) -> torch.Tensor:
    """A random output gradient seeded by the output's size, so every implementation of a case draws the same one for
    the same inputs (their gradients are compared)."""
    gen = torch.Generator(device=out.device).manual_seed(out.numel())
    return torch.randn(out.shape, device=out.device, dtype=out.dtype, generator=gen)


def backward_of(forward: Callable[..., torch.Tensor]):
    """(setup, fn) for timing only the backward pass of `forward`: setup runs the forward once per
    input set and draws the output gradient (grad_like); fn computes the input gradients."""
    def setup(*inputs):
        out = forward(*inputs)
        wrt = tuple(t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad)
        return out, wrt, grad_like(out)

    def fn(out, wrt, grad):
        return torch.autograd.grad(out, wrt, grad, retain_graph=True)

    return setup, fn


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text[:300]


# ---------------------------------------------------------------- a case

def run_case(case: Case, reps: int, warmup: int, l2_bytes: int, progress=None, timer=measure,
             rounds: int = ROUNDS) -> Row:
    """Times every implementation of `case` and checks its outputs; an implementation that raises is recorded as an
    error and the others still run. `timer` (measure's signature) is replaceable so the bookkeeping can be tested
    without a GPU. Each round times a graph of reps // REPLAYS calls, replayed REPLAYS times; the first round also
    warms up and profiles."""
    row = Row(case.group, case.name, tuple(case.shape), case.flops, next(i.name for i in case.impls if i.ours),
              notes=list(case.notes))
    calls = max(1, reps // REPLAYS)
    with bench_stream():
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
        samples: dict[str, list[Sample]] = {i.name: [] for i in runnable}
        graph_outputs: dict[str, Any] = {}
        for r in range(rounds):
            for impl in (runnable if r % 2 == 0 else runnable[::-1]):
                if impl.name in row.results:  # failed in an earlier round
                    continue
                earlier = samples[impl.name]
                capture = not any(s.method == PROFILER for s in earlier)
                try:
                    # Later rounds make one untimed call: it refills the allocator's cache the previous graph emptied.
                    sample = timer(impl.fn, prepared[impl.name], calls, warmup if r == 0 else 1,
                                   capture=capture, profile=r == 0)
                except Exception as e:
                    row.results[impl.name] = Result(error=_short(e))
                    continue
                if r == 0 and sample.graph_output is not None:
                    graph_outputs[impl.name] = sample.graph_output
                sample.graph_output = None
                earlier.append(sample)
        for impl in runnable:
            if impl.name not in row.results:
                row.results[impl.name] = summarize(samples[impl.name], case.flops)
        if progress is not None:
            for _ in case.impls:
                progress(1)
        prepared = None  # release the set-up state before comparing
        _check_row(row, case, outputs, graph_outputs)
        del inputs, outputs, graph_outputs
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def _check_row(row: Row, case: Case, outputs: dict, graph_outputs: dict) -> None:
    """Every implementation's outputs against the reference's (the first peer that ran), and the timed graph's output
    against the same implementation's eager one."""
    peers = [i.name for i in case.impls if not i.ours and i.name in outputs]
    row.reference = peers[0] if peers else None
    for name, out in outputs.items():
        res = row.results[name]
        if res.error:
            continue
        checks = []
        if row.reference is not None and name != row.reference:
            checks = check_outputs(out, outputs[row.reference], case.tol, case.outputs, row.reference)
            errs = [c.rel_err for c in checks if c.rel_err is not None]
            res.rel_err = max(errs) if errs else None
        if name in graph_outputs:
            checks += check_outputs(graph_outputs[name], out, case.tol, case.outputs, "eager")
        res.checks = checks
        res.passed = all(c.passed for c in checks) if checks else None
    ours = row.results.get(row.ours)
    row.rel_err = ours.rel_err if ours is not None else None


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

def _ms(x: float) -> str:
    return f"{x:.4g}"


def _cell(res: Result | None) -> str:
    """TFLOP/s, then ms: the median round [fastest-slowest], its flags' letters, and FAIL when a check failed."""
    if res is None:
        return "-"
    if res.error or res.ms is None:
        return "error"
    rate = "-" if res.tflops is None else f"{res.tflops:.1f}"
    text = f"{rate} {_ms(res.ms)} [{_ms(res.ms_min)}-{_ms(res.ms_max)}]"
    marks = "".join(FLAG_MARKS[f] for f in res.flags)
    return text + (f" {marks}" if marks else "") + (" FAIL" if res.failed else "")


def _aligned(table: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell: the first left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            for row in table]


def geomean_ratio(rows: list[Row]) -> float | None:
    ratios = [r.ratio() for r in rows if r.ratio()]
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None


def _check_cell(row: Row) -> str:
    status = row.status
    if status == "ok":
        return "ok" if row.rel_err is None else f"ok {row.rel_err:.1e}"
    return "FAIL" if status == "FAIL" else "-"


def failed_checks(rows: list[Row]) -> list[str]:
    lines = []
    for r in rows:
        for name, res in r.results.items():
            for c in res.checks:
                if c.passed:
                    continue
                why = c.note or (f"relative error {c.rel_err:.2e}, worst row {c.row_err:.2e}, tolerance {c.tol:.1e}"
                                 f" (rows {ROW_SLACK:g}x)")
                lines.append(f"{r.group} {r.name}: {name} {c.output} against {c.against}: {why}")
    return lines


def format_table(rows: list[Row]) -> str:
    """One section per group: per implementation TFLOP/s and the GPU milliseconds per call (median round [fastest-
    slowest]) with its flags' letters; the ratio of ours to the best peer (above 1: ours is faster); and the check:
    ok with our worst output's relative error against the reference, or FAIL (that row has no ratio and stays out of
    the means). Then the failed checks, the errors, the flags' meanings and notes. The last line is the
    geometric-mean ratio per group, so it is what stays on screen."""
    lines, summary = [], []
    for g in dict.fromkeys(r.group for r in rows):
        grp = [r for r in rows if r.group == g]
        impls = list(dict.fromkeys(n for r in grp for n in r.results))
        table = [["size", *impls, "ratio", "check"]]
        for r in grp:
            ratio = r.ratio()
            table.append([r.name, *(_cell(r.results.get(n)) for n in impls),
                          "-" if ratio is None else f"{ratio:.2f}x", _check_cell(r)])
        body = _aligned(table)
        reference = next((r.reference for r in grp if r.reference), None)
        lines += ["", f"{g}: TFLOP/s ms [min-max]" + (f"; checked against {reference}" if reference else ""),
                  body[0], "-" * len(body[0]), *body[1:]]
        gm = geomean_ratio(grp)
        failed = sum(r.status == "FAIL" for r in grp)
        summary.append((f"{g} {gm:.2f}x" if gm else f"{g} -") + (f" ({failed} FAIL left out)" if failed else ""))
    failures = failed_checks(rows)
    if failures:
        lines += ["", "failed checks:", *(f"  {f}" for f in failures)]
    errors = sorted({f"{n}: {res.error}" for r in rows for n, res in r.results.items() if res.error})
    if errors:
        lines += ["", "errors:", *(f"  {e}" for e in errors)]
    used = [f for f in FLAG_MARKS if any(f in res.flags for r in rows for res in r.results.values())]
    if used:
        lines += ["", "flags:", *(f"  {FLAG_MARKS[f]}: {FLAG_TEXT[f]}" for f in used)]
    notes = list(dict.fromkeys(n for r in rows for n in r.notes))
    if notes:
        lines += ["", "notes:", *(f"  {n}" for n in notes)]
    lines += ["", "ours / best peer, geometric mean: " + ", ".join(summary)]
    return "\n".join(lines)


def failed(rows: list[Row]) -> bool:
    """Whether a run is not a benchmark result: ours raised somewhere, or a check failed."""
    return any(r.status == "FAIL" or (r.ours in r.results and r.results[r.ours].error) for r in rows)


SCHEMA = 2


def write_json(path: Path, family: str, rows: list, meta: dict) -> None:
    """{"family", "schema", **meta, "rows": [...]}; a row of `Row` is Row.to_json(): its fields (results per
    implementation with ms = median round, ms_min, ms_max, rounds_ms, tflops, method, eager_ms, kernel_ms, flags,
    error, capture_error, rel_err, checks, passed), then status, ratio and flags."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"family": family, "schema": SCHEMA, **meta,
           "rows": [r.to_json() if hasattr(r, "to_json") else {**asdict(r), "ratio": r.ratio()} for r in rows]}
    path.write_text(json.dumps(_strict(doc), indent=2, allow_nan=False))


def _strict(obj):
    """JSON has no NaN or infinity: such a float (a failed check's error) is written as the string "nan" or "inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def write_plot(path: Path, title: str, rows: list[Row]) -> bool:
    """TFLOP/s against problem size, one panel per group, one line per implementation (a result that failed its
    check is left out). Returns False (and writes nothing) when matplotlib is not installed."""
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
            y = [r.results[n].tflops if n in r.results and r.results[n].tflops and not r.results[n].failed
                 else float("nan") for r in grp]
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


def timing_meta(reps: int) -> dict:
    """How the numbers were measured, stored with them."""
    return {"rounds": ROUNDS, "replays": REPLAYS, "calls_per_graph": max(1, reps // REPLAYS), "reps": reps,
            "spin_cycles": SPIN_CYCLES, "host_margin": HOST_MARGIN, "idle_margin": IDLE_MARGIN,
            "row_slack": ROW_SLACK}


def environment() -> dict:
    """What the numbers were measured on, stored with them."""
    from .. import __version__
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "tk_ops": __version__,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
