"""tk_ops.mamba2_chunk_scan (Mamba-2 SSD, forward) against the float64 reference on the GPU: p and n in {64, 128},
bf16 and fp16, every option of the signature (D per head and per channel, z, dt_bias, softplus, dt_limit, initial and
final states, seq_idx with and without initial states), g in {1, 2, h}, chunk sizes 64 / 128 / 256, lengths from 1 to
4097, slowly decaying heads whose state carried across many chunks makes most of the output, strided inputs, and
outputs poisoned before the run (the argument rules themselves are tested on the CPU, tests/cpu/test_mamba2_api.py).
Skipped unless the 'mamba2' family is in the build."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.mamba2 import mamba2_chunk_scan as scan_ref
from tk_ops.reference.mamba2 import mamba2_dt

from ...util import requires_families
from ..util import assert_close, fresh_pool_with_nan, rel_err

# The output, in x's dtype: besides its own final rounding, the kernels round three operands to x's dtype before their
# products (P = S o L o dt, Xw = x diag(w) and the state's image; docs/mamba2.md, "Precision"). A float64 emulation of
# exactly these rounding points at these tests' inputs (fast and slow decays, l up to 4097, with and without D, z,
# initial states) lands at 1.7-2.9e-3 in bf16 and 2.1-3.6e-4 in fp16 (worst row 7.7e-3 and 9.1e-4): the bounds leave
# 3.5x and 5.5x (5x and 9x for the rows). fp16 has 3 more mantissa bits, so it is held 5x tighter.
OUT_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# The final states are fp32, but every token reaches them through Xw, rounded to x's dtype: the same emulation gives
# 1.1-1.8e-3 (bf16) and 1.4-2.1e-4 (fp16).
FINAL_TOL = {torch.bfloat16: 6e-3, torch.float16: 1e-3}
# The kernels' chunk: 64 tokens whatever chunk_size says (docs/mamba2.md).
KERNEL_CHUNK = 64


pytestmark = requires_families("mamba2")


def problem(b, l, h, g, p, n, dtype=torch.bfloat16, softplus=False, seed=0, decay="fast"):
    """x, dt, A, B, C at the scales of a trained Mamba-2 layer. decay="fast": A from Mamba2's init, decays exp(dt A)
    between about 0.3 and 1 a token and at most 0.04 over a 64-token chunk, so that little of the state outlives a
    chunk. decay="slow": A from -1e-3 to -0.1 across the heads (log-spaced), so that a head keeps 0.5 .. 1 of its
    state over a chunk and the slowest most of it over the whole sequence: the state carried across many chunks
    outweighs what the chunk itself adds, and grows with the length."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    x = rnd(b, l, h, p).to(dtype)
    if softplus:  # raw dt before softplus: softplus(-3 .. -1) is 0.05 .. 0.3
        dt = rnd(b, l, h) * 0.5 - 2.0
    else:
        dt = torch.rand(b, l, h, device="cuda", generator=gen) * 0.1
    if decay == "slow":
        A = -torch.logspace(-3, -1, h, device="cuda")
    else:
        A = -torch.exp(torch.rand(h, device="cuda", generator=gen) * math.log(16.0))  # -1 .. -16, Mamba2's init
    B = (rnd(b, l, g, n) / math.sqrt(n) * 2).to(dtype)
    C = (rnd(b, l, g, n) / math.sqrt(n) * 2).to(dtype)
    return x, dt, A, B, C


def options(b, l, h, p, n, dtype, seed=1, D=None, z=False, dt_bias=False, init=False, seq=None):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    kw = {}
    if D == "head":
        kw["D"] = rnd(h)
    elif D == "channel":
        kw["D"] = rnd(h, p)
    if z:
        kw["z"] = rnd(b, l, h, p).to(dtype)
    if dt_bias:
        kw["dt_bias"] = rnd(h) * 0.5
    if init:
        kw["initial_states"] = rnd(b, h, p, n)
    if seq is not None:
        kw["seq_idx"] = seq
    return kw


def packed_ids(b, l, starts_at_zero=True, seed=2):
    """seq_idx of rows packing several sequences (contiguous runs of increasing ids, run lengths 1 .. l / 3)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for r in range(b):
        ids, cur, t = [], 0 if (starts_at_zero or r % 2 == 0) else 3, 0
        while t < l:
            run = int(torch.randint(1, max(2, l // 3), (1,), generator=gen))
            ids += [cur] * min(run, l - t)
            t += run
            cur += 1
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.int32, device="cuda")


def check(x, dt, A, B, C, chunk_size=256, dt_softplus=False, dt_limit=(0.0, math.inf), what="", **kw):
    b, l, h, p = x.shape
    n = B.shape[-1]
    fresh_pool_with_nan(2 * b * l * h * p + b * h * p * n)
    out, final = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, chunk_size, dt_softplus=dt_softplus, dt_limit=dt_limit,
                                          return_final_states=True, **kw)
    torch.cuda.synchronize()
    # The reference's chunked form is proven equal to the recurrence (tests/cpu/test_reference_mamba2.py) and
    # walks long sequences faster.
    ref, ref_final = scan_ref(x, dt, A, B, C, 256, dt_softplus=dt_softplus, dt_limit=dt_limit,
                              return_final_states=True, form="chunked", **kw)
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    assert final.shape == (b, h, p, n) and final.dtype == torch.float32
    assert_close(out, ref, OUT_TOL[x.dtype], f"{what}: output")
    assert_close(final, ref_final, FINAL_TOL[x.dtype], f"{what}: final state")
    return out, final, ref, ref_final


def without_carried_state(x, dt, A, B, C, dt_softplus=False, initial_states=None, **kw):
    """The reference with the state carried between the kernels' chunks dropped: each 64-token chunk scanned from
    zero (the first from the initial states), as a kernel that lost the state passing would compute. Returns the
    output and the final states."""
    outs, final = [], None
    for start in range(0, x.shape[1], KERNEL_CHUNK):
        part = slice(start, start + KERNEL_CHUNK)
        extra = {k: (v[:, part] if k == "z" else v) for k, v in kw.items()}
        out, final = scan_ref(x[:, part], dt[:, part], A, B[:, part], C[:, part], dt_softplus=dt_softplus,
                              initial_states=initial_states if start == 0 else None, return_final_states=True,
                              **extra)
        outs.append(out)
    return torch.cat(outs, 1), final


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("p, n", [(64, 64), (64, 128), (128, 64), (128, 128)])
def test_dims_with_every_option(p, n, dtype):
    b, l, h, g = 2, 1000, 4, 2
    x, dt, A, B, C = problem(b, l, h, g, p, n, dtype, softplus=True)
    kw = options(b, l, h, p, n, dtype, D="channel", z=True, dt_bias=True, init=True)
    check(x, dt, A, B, C, dt_softplus=True, what=f"p={p} n={n} {dtype}", **kw)


@pytest.mark.parametrize("l", [1, 63, 64, 65, 1000, 4097])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lengths(l, dtype):
    b, h, g, p, n = 2, 4, 1, 64, 128
    x, dt, A, B, C = problem(b, l, h, g, p, n, dtype)
    check(x, dt, A, B, C, what=f"l={l}", **options(b, l, h, p, n, dtype, D="head"))


@pytest.mark.parametrize("g", [1, 2, 6])
def test_groups(g):
    b, l, h, p, n = 2, 333, 6, 64, 64
    x, dt, A, B, C = problem(b, l, h, g, p, n)
    check(x, dt, A, B, C, what=f"g={g}", **options(b, l, h, p, n, torch.bfloat16, z=True))


@pytest.mark.parametrize("decay, l", [("fast", 700), ("slow", 1500)])
def test_chunk_size_never_changes_the_result(decay, l):
    b, h, g, p, n = 2, 4, 2, 128, 64
    x, dt, A, B, C = problem(b, l, h, g, p, n, decay=decay)
    kw = options(b, l, h, p, n, torch.bfloat16, init=True)
    runs = [check(x, dt, A, B, C, chunk_size=cs, what=f"{decay} chunk {cs}", **kw) for cs in (64, 128, 256)]
    for other in runs[1:]:
        assert torch.equal(runs[0][0], other[0]) and torch.equal(runs[0][1], other[1])


SLOW_CASES = [pytest.param(l, cs, id=f"l{l}-chunk{cs}")
              for l, cs in [(200, 64), (1000, 128), (1000, 256), (4097, 64), (4097, 256)]]


@pytest.mark.parametrize("init", [False, True], ids=["from_zero", "initial_states"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("l, chunk_size", SLOW_CASES)
def test_slow_decay_carries_the_state_across_chunks(l, chunk_size, dtype, init):
    """Heads that keep most of their state over many chunks: the output and the final states are mostly the state
    carried from earlier chunks (and from the initial states), which grows with the length; a kernel that lost it, or
    handed it only to the next chunk, is off by order 1. The inputs are first shown to make that so on the reference
    itself: without the carried state its output and final states move by more than 10 times the bounds."""
    b, h, g, p, n = 2, 4, 2, 64, 128
    x, dt, A, B, C = problem(b, l, h, g, p, n, dtype, decay="slow")
    kw = options(b, l, h, p, n, dtype, D="head", z=True, init=init)
    kw["D"] = kw["D"] * 0.1  # a small skip term, which would otherwise outweigh the slow heads' scan
    log_decay = mamba2_dt(dt) * A.double()  # (b, l, h)
    per_chunk = torch.stack([log_decay[:, s:s + KERNEL_CHUNK].sum(1) for s in range(0, l, KERNEL_CHUNK)])
    assert per_chunk.min() > math.log(0.5), "a head loses more than half its state within one chunk"
    assert log_decay.sum(1).max() > math.log(0.5), "no head keeps half its state over the whole sequence"
    _, _, ref, ref_final = check(x, dt, A, B, C, chunk_size, what=f"slow decay l={l} chunk {chunk_size}", **kw)
    dropped, dropped_final = without_carried_state(x, dt, A, B, C, **kw)
    assert rel_err(dropped, ref) > 10 * OUT_TOL[dtype], "the carried state hardly shows in the output"
    assert rel_err(dropped_final, ref_final) > 10 * FINAL_TOL[dtype], "the carried state hardly shows in the final one"


@pytest.mark.parametrize("name, kw, extra", [
    ("plain", {}, {}),
    ("D per head", dict(D="head"), {}),
    ("D per channel", dict(D="channel"), {}),
    ("z", dict(z=True), {}),
    ("dt_bias", dict(dt_bias=True), {}),
    ("softplus", {}, dict(dt_softplus=True)),
    ("softplus + dt_bias", dict(dt_bias=True), dict(dt_softplus=True)),
    ("dt_limit", {}, dict(dt_limit=(0.02, 0.07))),
    ("initial states", dict(init=True), {}),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_options(name, kw, extra, dtype):
    b, l, h, g, p, n = 2, 300, 4, 2, 64, 128
    x, dt, A, B, C = problem(b, l, h, g, p, n, dtype, softplus=extra.get("dt_softplus", False))
    if name == "dt_bias":
        dt = dt - 0.3  # some dt + bias below 0: clamped to 0 by the default limits
    check(x, dt, A, B, C, what=name, **extra, **options(b, l, h, p, n, dtype, **kw))


@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("starts_at_zero", [True, False])
@pytest.mark.parametrize("l, p, n", [(1000, 64, 128), (257, 128, 64), (64, 64, 64)])
def test_seq_idx(init, starts_at_zero, l, p, n):
    b, h, g = 3, 4, 2
    x, dt, A, B, C = problem(b, l, h, g, p, n)
    seq = packed_ids(b, l, starts_at_zero)
    check(x, dt, A, B, C, what=f"seq_idx l={l}",
          **options(b, l, h, p, n, torch.bfloat16, D="head", z=True, init=init, seq=seq))


def test_packed_rows_equal_separate_sequences():
    b, l, h, g, p, n = 1, 400, 4, 1, 64, 64
    x, dt, A, B, C = problem(b, l, h, g, p, n)
    cut = 150
    seq = torch.cat([torch.zeros(1, cut), torch.ones(1, l - cut)], 1).int().cuda()
    packed = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, seq_idx=seq)
    first = tk_ops.mamba2_chunk_scan(x[:, :cut], dt[:, :cut], A, B[:, :cut], C[:, :cut])
    second = tk_ops.mamba2_chunk_scan(x[:, cut:], dt[:, cut:], A, B[:, cut:], C[:, cut:])
    assert_close(packed, torch.cat([first, second], 1), OUT_TOL[torch.bfloat16], "packed against separate")


@pytest.mark.parametrize("decay", ["fast", "slow"])
def test_prefill_in_two_calls_equals_one(decay):
    """With slowly decaying heads the second call's output is mostly the state handed over by the first."""
    b, l, h, g, p, n = 2, 600, 4, 2, 128, 128
    x, dt, A, B, C = problem(b, l, h, g, p, n, decay=decay)
    whole, whole_final = tk_ops.mamba2_chunk_scan(x, dt, A, B, C, return_final_states=True)
    cut = 201
    first, mid = tk_ops.mamba2_chunk_scan(x[:, :cut], dt[:, :cut], A, B[:, :cut], C[:, :cut],
                                          return_final_states=True)
    second, final = tk_ops.mamba2_chunk_scan(x[:, cut:], dt[:, cut:], A, B[:, cut:], C[:, cut:], initial_states=mid,
                                             return_final_states=True)
    # Two kernel results, each within its bound of the reference, on chunk grids that differ after the cut.
    assert_close(torch.cat([first, second], 1), whole, OUT_TOL[torch.bfloat16], f"{decay}: two calls against one")
    assert_close(final, whole_final, FINAL_TOL[torch.bfloat16], f"{decay}: final state of two calls against one")


def test_strided_inputs():
    """x, z, B, C and dt as slices of one fused projection (what Mamba2's in_proj gives) are read as they are."""
    b, l, h, g, p, n = 2, 500, 4, 2, 64, 128
    width = 2 * h * p + 2 * g * n + h
    zxbcdt = torch.randn(b, l, width, device="cuda").to(torch.bfloat16)
    z, xs, Bs, Cs, dts = torch.split(zxbcdt, [h * p, h * p, g * n, g * n, h], dim=-1)
    x, z = xs.view(b, l, h, p), z.view(b, l, h, p)
    B, C = (Bs.view(b, l, g, n) * 0.2), Cs.view(b, l, g, n) * 0.2
    dt = dts.float()  # (b, l, h) with the row stride of the projection
    A = -torch.rand(h, device="cuda") * 4 - 1
    check(x, dt, A, B, C, dt_softplus=True, z=z, D=torch.randn(h, device="cuda"), what="strided")


def test_no_final_states_by_default():
    x, dt, A, B, C = problem(1, 70, 2, 1, 64, 64)
    out = tk_ops.mamba2_chunk_scan(x, dt, A, B, C)
    assert isinstance(out, torch.Tensor) and out.shape == x.shape
    assert_close(out, scan_ref(x, dt, A, B, C), OUT_TOL[torch.bfloat16], "output")
