"""The Mamba-2 backward (tk_ops.mamba2_chunk_scan through autograd) against float64 reference gradients on the GPU:
dx, ddt, dA, dB, dC, dD (per head and per channel), dz, ddt_bias and d(initial_states), from the output's gradient,
the final states' or both; p and n in {64, 128}, g in {1, 2, h} for h in {2, 4, 6}, chunk sizes 64 / 128 / 256 (never
changing the result), lengths 1 to 4097, bf16 and fp16, slowly decaying heads whose gradients travel back through the
state carried across many chunks (to the initial states too), dt_bias with softplus and dt limits that clamp (no
gradient where dt is clamped), seq_idx (no initial-state gradient for a row that starts with another id), gradients on a
subset of the inputs, strided views of one projection, run-to-run reproducibility, chunked prefill, torch.compile and
CUDA graphs. Skipped unless the 'mamba2' family is in the build."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.mamba2 import mamba2_chunk_scan as scan_ref
from tk_ops.reference.mamba2 import mamba2_dt

from ...util import requires_families
from ..util import ROW_SLACK, fresh_pool_with_nan, worst_row

# ||grad - ref|| / ||ref||: twice the forward's bound in bf16, as for attention and Based: the backward's products
# take 16-bit operands too, one rounding more on the way to each gradient than on the way to the output.
TOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2}
# The denominator is floored at this RMS per element: a gradient that is zero in exact arithmetic is judged by its
# absolute size, where what the kernels leave is fp32 cancellation, not an error.
RMS_FLOOR = 1e-4
# dA and ddt_bias are (h,) sums over batch rows and tokens of one term each, dt_t dL/d(dt_t A) and dL/d(dt_t). The
# reference differentiates in float64; the kernels form dL/dcum per token from fp32 accumulators fed by 16-bit
# operands, take its reverse cumulative sum along the row and the sums over tokens in fp32 (docs/mamba2.md, "Precision
# of ddt and dA"): each term carries an error of its own, and the sum's error is at most the terms' errors added up.
# Under a random output gradient the terms have random signs and the sums cancel to a few percent of sum |term|, where
# rounding alone is a large share of the result. So out_grads puts the output itself beside the noise: the loss holds
# 1/2 ||y||^2, whose derivatives in A and dt keep one sign token after token: over these tests' inputs (on the CPU)
# the sums come to 0.5 .. 1 of the norm of sum_{b,t} |term|. The error is measured against the larger of ||sum|| and
# SUM_FLOOR times that norm and held to TOL: in every test through compare(), which asserts that the sums are large
# enough for it (above 0.1 of their terms in bf16, 0.05 in fp16; a row of one token, whose sums hold one term a batch
# row, is left out), a 5% error of dA or ddt_bias fails; a sum that does cancel (loss.backward() of out.sum()) is held
# to TOL / 4 of its terms' scale, as before. The kernels' rounding points emulated in float64
# (tools/check/mamba2_bwd_rounding.py: one head, A from -1e-3 to -8, l = 1000 and 4097, output gradients made this
# way) put both sums within 8e-4 of their values in bf16 and 1e-4 in fp16: TOL leaves 25x and 100x.
# ddt_bias is also held to the sum of the returned ddt.
SUMS = ("A", "dt_bias")
SUM_FLOOR = 0.25
# Two runs on the same inputs, or the same inputs under another chunk_size, give the same dx and dz bit for bit:
# each element is written once, with no cross-task sum. dt, A, B, C, D, dt_bias and the initial states' gradients
# may be summed across heads, batch rows or column blocks with fp32 atomics, whose order varies from run to run,
# so those are held to a relative 1e-5 instead (dA and ddt_bias on the whole scale of their terms: the order of the
# atomics moves each term, whatever the sum comes to). Gradients returned in 16 bits (dB, dC) are cast from such fp32
# sums: where two sums straddle a 16-bit rounding boundary the results differ by one unit in the last place (eps / 2
# .. eps relative), so their norms are held to eps / 32, room for such flips in one element in 256 (measured: 1.4e-5
# for bf16 dB); a lost or doubled block of a sum is far above it.
REPEAT_TOL = 1e-5
BITWISE = ("x", "z")
# Same kernels, same inputs, but inductor may fuse the elementwise work around them (the loss's gradient, any part
# of the backward left to PyTorch) and round once where eager rounds after every op.
COMPILE_TOL = 5e-3
LEAVES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float16, id="fp16")]
# Softplus of the raw dt below spans about 0.03 .. 0.5: these limits clamp a good share at both ends.
DT_LIMIT = (0.06, 0.25)
# The kernels' chunk: 64 tokens whatever chunk_size says (docs/mamba2.md).
KERNEL_CHUNK = 64
# Gradients whose rows (along the last dimension: p or n elements of one token, head or group) are also held one by
# one, to ROW_SLACK times the bound, so that a wrong head, group or tile cannot hide in the norm of the rest; ddt's rows
# are the h heads of one token, too few for a stable bound, and dA, ddt_bias and a per-head dD are single rows.
ROWS = ("x", "B", "C", "D", "z", "initial_states")


pytestmark = requires_families("mamba2")


def inputs(b, l, h, g, p, n, dtype=torch.bfloat16, D=None, z=False, dt_bias=False, init=False, softplus=False,
           dt_shift=0.0, seq=None, seed=0, device="cuda", decay="fast"):
    """The op's tensors by name, at the scales of a trained Mamba-2 layer (as in test_mamba2.py): C B^T of order 1;
    decay="fast": A from Mamba2's init, decays exp(dt A) between about 0.3 and 1 a token, little of the state outlives
    a 64-token chunk; decay="slow": A from -1e-3 to -0.1 across the heads (log-spaced), which keep most of their state
    over many chunks, so that the gradients of earlier tokens (and of the initial states) come mostly through the
    state carried back from later chunks. Without softplus, dt_shift moves dt (0 .. 0.1) so that some of
    dt + dt_bias is negative, where the default limits clamp it to 0."""
    gen = torch.Generator(device=device).manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device=device, generator=gen)  # noqa: E731
    kw = {"x": rnd(b, l, h, p).to(dtype)}
    if softplus:  # raw dt before softplus: softplus(-3 .. -1) is 0.05 .. 0.3
        kw["dt"] = rnd(b, l, h) * 0.5 - 2.0
    else:
        kw["dt"] = torch.rand(b, l, h, device=device, generator=gen) * 0.1 + dt_shift
    if decay == "slow":
        kw["A"] = -torch.logspace(-3, -1, h, device=device)
    else:
        kw["A"] = -torch.exp(torch.rand(h, device=device, generator=gen) * math.log(16.0))  # -1 .. -16, Mamba2's init
    kw["B"] = (rnd(b, l, g, n) / math.sqrt(n) * 2).to(dtype)
    kw["C"] = (rnd(b, l, g, n) / math.sqrt(n) * 2).to(dtype)
    if D == "head":
        kw["D"] = rnd(h)
    elif D == "channel":
        kw["D"] = rnd(h, p)
    if z:
        kw["z"] = rnd(b, l, h, p).to(dtype)
    if dt_bias:
        kw["dt_bias"] = rnd(h) * (0.5 if softplus else 0.02)
    if init:
        kw["initial_states"] = rnd(b, h, p, n)
    if seq is not None:
        kw["seq_idx"] = seq.to(device)
    return kw


def packed_ids(b, l, starts_at_zero=True, seed=2):
    """seq_idx of rows packing several sequences: contiguous runs of increasing ids, run lengths 1 .. l / 3. Unless
    starts_at_zero, the odd rows start with id 1, so that the initial states do not reach them."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for r in range(b):
        ids, cur, t = [], 0 if (starts_at_zero or r % 2 == 0) else 1, 0
        while t < l:
            run = int(torch.randint(1, max(2, l // 3), (1,), generator=gen))
            ids += [cur] * min(run, l - t)
            t += run
            cur += 1
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.int32)


def out_grads(kw, final, seed=3, **flags):
    """The gradients arriving at out (in its dtype) and at the final states (fp32), as `final` asks: 'none' and
    'unused' give none to the states, 'only' none to the output. Each is unit Gaussian noise plus the reference's own
    output (or final states) scaled to unit RMS, so that the loss holds 1/2 ||y||^2 and the terms of dA and ddt_bias
    add up (SUMS above); `flags` are the scan's dt_softplus and dt_limit. That output leaves out the D x term and the
    initial states' share: neither grows with dt, and the initial states' decay shrinks as dt grows, which would
    pull ddt the other way in the first tokens."""
    x = kw["x"]
    b, _, h, p = x.shape
    gen = torch.Generator(device=x.device).manual_seed(seed)
    dy = torch.randn(x.shape, device=x.device, generator=gen)
    dfinal = torch.randn(b, h, p, kw["B"].shape[-1], device=x.device, generator=gen)
    with torch.no_grad():
        y, y_final = scan_ref(**{k: v.detach() for k, v in kw.items() if k not in ("D", "initial_states")},
                              chunk_size=256, return_final_states=True, form="chunked", **flags)
    dy = (dy + (y / y.square().mean().sqrt().clamp_min(1e-30)).float()).to(x.dtype)
    dfinal = dfinal + (y_final / y_final.square().mean().sqrt().clamp_min(1e-30)).float()
    return (None if final == "only" else dy), (dfinal if final in ("grad", "only") else None)


def names_of(kw):
    return [k for k in LEAVES if k in kw]


def autograd_grads(fn, kw, dy, dfinal, cast=None):
    """The gradients, by name, of sum(out * dy) + sum(final * dfinal) for `fn(**tensors) -> (out, final)`; every
    floating tensor of kw is a fresh leaf (converted by `cast` first, when given)."""
    names = names_of(kw)
    leaves = [(cast(kw[k]) if cast else kw[k]).detach().requires_grad_() for k in names]
    args = dict(kw, **dict(zip(names, leaves)))
    out, final = fn(**args)
    outs = [t for t, d in ((out, dy), (final, dfinal)) if d is not None]
    seeds = [d if cast is None else cast(d) for d in (dy, dfinal) if d is not None]
    if cast is None:
        fresh_pool_with_nan(2 * sum(t.numel() for t in leaves))
    got = torch.autograd.grad(outs, leaves, seeds, allow_unused=True)
    return dict(zip(names, got))


def tk_grads(kw, dy, dfinal, return_final, chunk_size=256, **flags):
    def fn(**args):
        res = tk_ops.mamba2_chunk_scan(**args, chunk_size=chunk_size, return_final_states=return_final, **flags)
        return res if return_final else (res, None)
    got = autograd_grads(fn, kw, dy, dfinal)
    torch.cuda.synchronize()
    return got


def ref_grads(kw, dy, dfinal, return_final, **flags):
    """The float64 gradients by name, and under 'A_terms' and 'dt_bias_terms' the magnitudes of the per-token terms
    that dA and ddt_bias sum (SUMS above)."""
    # The chunked form is proven equal to the recurrence, gradients included (tests/cpu/test_reference_mamba2.py),
    # and walks long sequences faster; its chunk size never changes the result.
    def fn(**args):
        res = scan_ref(**args, chunk_size=256, return_final_states=return_final, form="chunked", **flags)
        return res if return_final else (res, None)
    ref = autograd_grads(fn, kw, dy, dfinal, cast=lambda t: t.double())
    ref["A_terms"] = decay_terms(kw, dy, dfinal, return_final, **flags)
    if "dt_bias" in kw:
        ref["dt_bias_terms"] = ref["dt"].abs().sum((0, 1))
    return ref


def decay_terms(kw, dy, dfinal, return_final, dt_softplus=False, dt_limit=(0.0, math.inf)):
    """sum over batch rows and tokens of |dt_t dL/d(dt_t A)|, per head. The reference runs with the decays' dt as a
    leaf of its own: x is divided by it and multiplied by the true dt, so that dt x (and the output) is unchanged
    while only the decays see the leaf. D, which would see the rescaled x, is left out: it adds nothing there."""
    f = {k: (v.detach().double() if v.is_floating_point() else v) for k, v in kw.items() if k not in ("D", "dt_bias")}
    dt = mamba2_dt(f.pop("dt"), kw.get("dt_bias"), dt_softplus, dt_limit).detach()
    a = dt.clone().requires_grad_()
    on = dt > 0  # a clamped dt of 0 scales neither the input nor the decay
    f["x"] = f["x"] * torch.where(on, dt / torch.where(on, a, 1.0), 0.0)[..., None]
    res = scan_ref(dt=a, chunk_size=256, return_final_states=return_final, form="chunked", **f)
    out, final = res if return_final else (res, None)
    outs = [t for t, d in ((out, dy), (final, dfinal)) if d is not None]
    (da,) = torch.autograd.grad(outs, a, [d.double() for d in (dy, dfinal) if d is not None])
    return (dt * da).abs().sum((0, 1)) / kw["A"].detach().double().abs()


def err(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """||got - ref|| / max(||ref||, ||scale||, RMS floor)."""
    got64, ref64 = got.double(), ref.double()
    if not torch.isfinite(got64).all():
        return float("inf")
    floor = max(RMS_FLOOR * ref64.numel() ** 0.5, 0.0 if scale is None else scale.norm().item())
    return (got64 - ref64).norm().item() / max(ref64.norm().item(), floor)


def grad_err(name, got, expect, ref):
    """err() of one gradient; for dA and ddt_bias floored at SUM_FLOOR of their terms' scale (ref: ref_grads'
    dict)."""
    terms = ref.get(f"{name}_terms")
    return err(got, expect, None if terms is None else SUM_FLOOR * terms)


def tol_of(name, dtype):
    return TOL[dtype]


def clamped(kw, dt_softplus=False, dt_limit=(0.0, math.inf)):
    """Where dt + dt_bias (after softplus) lies outside dt_limit by more than fp32 can blur."""
    pre = mamba2_dt(kw["dt"], kw.get("dt_bias"), dt_softplus, dt_limit=None)
    return (pre < dt_limit[0] - 1e-4) | (pre > dt_limit[1] + 1e-4)


def compare(got, ref, kw, dy, flags, what):
    """Every gradient within its tolerance of the reference, in its leaf's shape and dtype; ddt_bias the sum of the
    returned ddt (the same fp32 terms); exactly zero where the op's definition makes it so: dt where the clamp holds
    it, the initial states of a row whose first id is not 0, C, D and z when only the final states have a gradient."""
    dtype = kw["x"].dtype
    for name in SUMS:  # out_grads' output gradients make these sums add up, so that a 5% error of one cannot pass
        if name in kw and kw["x"].shape[1] > 1:
            size, scale = ref[name].norm().item(), ref[f"{name}_terms"].norm().item()
            assert 0.05 * size / max(size, SUM_FLOOR * scale) > TOL[dtype], \
                f"{what} d{name}: the terms cancel to {size / scale:.2f} of their size, a 5% error would pass"
    for name in names_of(kw):
        leaf, g = kw[name], got[name]
        if dy is None and name in ("C", "D", "z"):
            assert g is None or not g.any(), f"{what} d{name}: must be zero with no gradient on the output"
            continue
        assert g is not None, f"{what} d{name}: no gradient"
        assert g.shape == leaf.shape and g.dtype == leaf.dtype, f"{what} d{name}: {tuple(g.shape)} {g.dtype}"
        e, tol = grad_err(name, g, ref[name], ref), tol_of(name, dtype)
        assert e <= tol, f"{what} d{name}: relative error {e:.3e} > {tol:.1e}"
        if name in ROWS and g.dim() > 1:
            row, row_e = worst_row(g, ref[name])
            assert row_e <= ROW_SLACK * tol, f"{what} d{name}: row {row} has relative error {row_e:.3e}"
    if "dt_bias" in kw:
        ddt = got["dt"].double()
        gap = (got["dt_bias"].double() - ddt.sum((0, 1))).abs()
        assert (gap <= REPEAT_TOL * ddt.abs().sum((0, 1))).all(), f"{what}: ddt_bias is not the sum of ddt"
    mask = clamped(kw, flags.get("dt_softplus", False), flags.get("dt_limit", (0.0, math.inf)))
    assert (got["dt"][mask] == 0).all(), f"{what} ddt: nonzero where dt is clamped"
    if "initial_states" in kw and "seq_idx" in kw:
        cut_off = kw["seq_idx"][:, 0] != 0
        assert (got["initial_states"][cut_off] == 0).all(), f"{what}: initial states' gradient in a row not of id 0"


def check(b, l, h, g, p, n, dtype=torch.bfloat16, final="grad", chunk_size=256, dt_softplus=False,
          dt_limit=(0.0, math.inf), what="", **opts):
    """tk_ops' gradients against the reference's; `final`: 'none' (final states not returned), 'unused' (returned
    and unused), 'grad' (gradients on both) or 'only' (on the final states alone). Returns (got, ref, kw)."""
    kw = inputs(b, l, h, g, p, n, dtype, softplus=dt_softplus, **opts)
    flags = dict(dt_softplus=dt_softplus, dt_limit=dt_limit)
    dy, dfinal = out_grads(kw, final, **flags)
    got = tk_grads(kw, dy, dfinal, final != "none", chunk_size, **flags)
    ref = ref_grads(kw, dy, dfinal, final != "none", **flags)
    compare(got, ref, kw, dy, flags, what)
    return got, ref, kw


def assert_reproduced(a, b, ref, what):
    """a and b from the same kernels on the same inputs: see REPEAT_TOL (ref: ref_grads' dict, for the scales)."""
    for name in a:
        if name in BITWISE:
            assert torch.equal(a[name], b[name]), f"{what} d{name}: not bitwise identical"
        else:
            tol = torch.finfo(a[name].dtype).eps / 32 if a[name].element_size() == 2 else REPEAT_TOL
            e = err(a[name], b[name], ref.get(f"{name}_terms"))
            assert e <= tol, f"{what} d{name}: differs by {e:.2e} relative (allowed {tol:.1e})"


# -- every gradient over the shapes -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p, n", [(64, 64), (64, 128), (128, 64), (128, 128)],
                         ids=["p64n64", "p64n128", "p128n64", "p128n128"])
def test_dims_with_every_option(p, n, dtype):
    """D per channel, z, dt_bias + softplus, a clamping dt_limit, initial states and the final states' gradient."""
    check(2, 1000, 4, 2, p, n, dtype, D="channel", z=True, dt_bias=True, init=True, dt_softplus=True,
          dt_limit=DT_LIMIT, what=f"p={p} n={n} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("l", [1, 63, 64, 65, 1000, 4097])
def test_lengths(l, dtype):
    """Ragged last chunks, a single token, and a long sequence; every gradient at each length."""
    b, h = (2, 4) if l < 4096 else (1, 4)
    check(b, l, h, 1, 64, 128, dtype, D="head", z=True, dt_bias=True, init=True, dt_softplus=True,
          what=f"l={l} {dtype}")


def group_grid():
    out = []
    for h, g in [(2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 1), (6, 2), (6, 6)]:
        for p, n in [(64, 128), (128, 64)]:
            out.append(pytest.param(h, g, p, n, id=f"h{h}g{g}-p{p}n{n}"))
    return out


@pytest.mark.parametrize("h, g, p, n", group_grid())
def test_groups(h, g, p, n):
    """dB and dC sum over the h / g heads of a group: even counts (heads taken in pairs at p = 64) and odd ones
    (h = 6, g = 2: three heads a group; g = h: one)."""
    check(2, 333, h, g, p, n, D="head", z=True, dt_bias=True, init=True, dt_softplus=True,
          what=f"h={h} g={g} p={p} n={n}")


OPTIONS = {
    "plain": dict(final="none"),
    "D_head": dict(D="head", final="none"),
    "D_channel": dict(D="channel", final="none"),
    "z": dict(z=True, final="none"),
    # dt in -0.04 .. 0.06 plus a small bias: the default limits (0, inf) clamp about a third of it to 0
    "dt_bias_clamped_at_0": dict(dt_bias=True, dt_shift=-0.04, final="none"),
    "softplus": dict(dt_softplus=True, final="none"),
    "softplus_dt_bias": dict(dt_bias=True, dt_softplus=True, final="none"),
    "dt_limit": dict(dt_bias=True, dt_softplus=True, dt_limit=DT_LIMIT, final="none"),
    "initial_states": dict(init=True, final="none"),
    "final_grad": dict(final="grad"),
    "final_unused": dict(final="unused"),
    # short enough that the final states' gradient still reaches the initial states
    "final_only": dict(D="channel", z=True, init=True, final="only", l=40),
    "initial_and_final": dict(init=True, final="grad"),
    "everything": dict(D="channel", z=True, dt_bias=True, init=True, dt_softplus=True, dt_limit=DT_LIMIT,
                       final="grad"),
}
CLAMPING = ("dt_bias_clamped_at_0", "dt_limit", "everything")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(OPTIONS))
def test_options(name, dtype):
    opts = dict(OPTIONS[name])
    _, _, kw = check(2, opts.pop("l", 300), 4, 2, 64, 128, dtype, what=f"{name} {dtype}", **opts)
    if name in CLAMPING:  # the zero-gradient check in compare() has something to look at, at each clamped end
        lo, hi = opts.get("dt_limit", (0.0, math.inf))
        pre = mamba2_dt(kw["dt"], kw.get("dt_bias"), opts.get("dt_softplus", False), dt_limit=None)
        share = clamped(kw, opts.get("dt_softplus", False), (lo, hi)).float().mean().item()
        assert 0.05 < share < 0.7 and (pre < lo).any() and (hi == math.inf or (pre > hi).any()), name


@pytest.mark.parametrize("init", [False, True], ids=["no_init", "init"])
@pytest.mark.parametrize("starts_at_zero", [True, False], ids=["rows_from_0", "odd_rows_from_1"])
@pytest.mark.parametrize("l, p, n", [(1000, 64, 128), (257, 128, 64), (64, 64, 64)], ids=["l1000", "l257", "l64"])
def test_seq_idx(init, starts_at_zero, l, p, n):
    """Packed sequences: no gradient crosses a sequence boundary, the final states' reaches the row's last sequence
    only, and the initial states' is zero in a row that starts with id 1."""
    b = 3
    check(b, l, 4, 2, p, n, D="head", z=True, init=init, dt_bias=True, dt_softplus=True,
          seq=packed_ids(b, l, starts_at_zero), what=f"seq_idx l={l} init={init} from_0={starts_at_zero}")


@pytest.mark.parametrize("decay, l", [("fast", 700), ("slow", 1500)])
@pytest.mark.parametrize("packed", [False, True], ids=["one_sequence", "seq_idx"])
def test_chunk_size_never_changes_the_gradients(packed, decay, l):
    b, h, g, p, n = 2, 4, 2, 128, 64
    seq = packed_ids(b, l, starts_at_zero=False) if packed else None
    runs = [check(b, l, h, g, p, n, chunk_size=cs, D="channel", z=True, dt_bias=True, init=True, dt_softplus=True,
                  dt_limit=DT_LIMIT, seq=seq, decay=decay, what=f"{decay} chunk {cs}") for cs in (64, 128, 256)]
    ref = runs[0][1]
    assert_reproduced(runs[0][0], runs[1][0], ref, "chunk 64 vs 128")
    assert_reproduced(runs[0][0], runs[2][0], ref, "chunk 64 vs 256")


def without_carried_gradient(kw, dy, dfinal, return_final, **flags):
    """float64 gradients of the reference with the state carried between the kernels' chunks cut out of the
    backward (detached at every 64-token boundary; the forward is unchanged): what a backward that lost its carried
    gradient would return."""
    l = kw["x"].shape[1]

    def fn(initial_states=None, **args):
        outs, state = [], initial_states
        for start in range(0, l, KERNEL_CHUNK):
            part = slice(start, start + KERNEL_CHUNK)
            sliced = {k: (v[:, part] if k in ("x", "dt", "B", "C", "z", "seq_idx") else v) for k, v in args.items()}
            out, state = scan_ref(**sliced, initial_states=state if start == 0 or state is None else state.detach(),
                                  chunk_size=256, return_final_states=True, form="chunked", **flags)
            outs.append(out)
        return torch.cat(outs, 1), (state if return_final else None)
    return autograd_grads(fn, kw, dy, dfinal, cast=lambda t: t.double())


SLOW_CASES = [pytest.param(l, cs, id=f"l{l}-chunk{cs}") for l, cs in [(1000, 64), (1000, 256), (4097, 128)]]
# The gradients that reach earlier chunks through the carried state (dC, dD and dz do not: they read the forward's
# state and the output's gradient at their own token).
CARRIED = ("x", "dt", "A", "B", "dt_bias", "initial_states")


@pytest.mark.parametrize("final", ["grad", "only"], ids=["out_and_final", "final_only"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("l, chunk_size", SLOW_CASES)
def test_slow_decay_gradients_cross_many_chunks(l, chunk_size, dtype, final):
    """Heads that keep most of their state over many chunks: the gradient of a token (and of the initial states) is
    mostly what later chunks' outputs, and the final states', send back through the carried state, so a backward that
    lost the carried gradient, or handed it back one chunk only, is off by order 1. The inputs are first shown to make
    that so on the reference itself: without the carried gradient, dx, ddt, dA, dB, ddt_bias and d(initial_states)
    move by more than 10 times their bounds."""
    b, h, g, p, n = 2, 4, 2, 64, 128
    _, ref, kw = check(b, l, h, g, p, n, dtype, final=final, chunk_size=chunk_size, z=True, dt_bias=True, init=True,
                       decay="slow", what=f"slow decay l={l} chunk {chunk_size} {dtype} final={final}")
    log_decay = mamba2_dt(kw["dt"], kw["dt_bias"]) * kw["A"].double()  # (b, l, h)
    per_chunk = torch.stack([log_decay[:, s:s + KERNEL_CHUNK].sum(1) for s in range(0, l, KERNEL_CHUNK)])
    assert per_chunk.min() > math.log(0.25), "a head loses more than three quarters of its state within one chunk"
    assert log_decay.sum(1).max() > math.log(0.5), "no head keeps half its state over the whole sequence"
    dy, dfinal = out_grads(kw, final)
    cut = without_carried_gradient(kw, dy, dfinal, True)
    for name in CARRIED:  # an input the cut-off backward does not reach at all gets no gradient: zero
        e = grad_err(name, torch.zeros_like(ref[name]) if cut[name] is None else cut[name], ref[name], ref)
        assert e > 10 * tol_of(name, dtype), f"d{name} without the carried gradient is only {e:.2e} off"


@pytest.mark.parametrize("h, g, p, n", [(4, 1, 64, 128), (6, 2, 128, 64)], ids=["head_pairs", "column_halves"])
def test_two_runs_agree(h, g, p, n):
    """The same inputs twice: dx and dz bit for bit, the summed gradients to REPEAT_TOL."""
    b, l = 3, 777
    kw = inputs(b, l, h, g, p, n, D="channel", z=True, dt_bias=True, init=True, softplus=True)
    flags = dict(dt_softplus=True, dt_limit=DT_LIMIT)
    dy, dfinal = out_grads(kw, "grad", **flags)
    first = tk_grads(kw, dy, dfinal, True, **flags)
    second = tk_grads(kw, dy, dfinal, True, **flags)
    ref = ref_grads(kw, dy, dfinal, True, **flags)
    compare(first, ref, kw, dy, flags, "first run")
    assert_reproduced(first, second, ref, "second run")


# -- how the gradients are asked for --------------------------------------------------------------------------------

@pytest.mark.parametrize("wrt", ["x", "dt", "A", "B C", "D dt_bias", "z", "initial_states"],
                         ids=lambda w: w.replace(" ", "_and_"))
def test_loss_backward_on_a_subset(wrt):
    """loss.backward() with requires_grad on some inputs only; the others get no .grad. The loss is a plain sum, so
    the output's gradient arrives as an expanded (stride-0) tensor."""
    wanted = wrt.split()
    kw = inputs(2, 333, 4, 2, 64, 64, D="head", z=True, dt_bias=True, init=True, softplus=True)
    for k in names_of(kw):
        kw[k].requires_grad_(k in wanted)
    tk_ops.mamba2_chunk_scan(**kw, dt_softplus=True).sum().backward()
    ref = ref_grads({k: v.detach() for k, v in kw.items()}, torch.ones_like(kw["x"]), None, False, dt_softplus=True)
    for k in names_of(kw):
        if k in wanted:
            t = kw[k]
            assert t.grad is not None and t.grad.dtype == t.dtype and t.grad.shape == t.shape, f"d{k}"
            e = grad_err(k, t.grad, ref[k], ref)
            assert e <= tol_of(k, torch.bfloat16), f"d{k}: relative error {e:.3e}"
        else:
            assert kw[k].grad is None, f"{k} does not require grad but got one"


def test_strided_views_of_one_projection():
    """x, z, B, C and dt as slices of one fused projection (what Mamba2's in_proj gives): the gradients land in
    the projection's own layout."""
    b, l, h, g, p, n = 2, 500, 4, 2, 64, 128
    kw = inputs(b, l, h, g, p, n, z=True, softplus=True)
    parts = [kw["z"].reshape(b, l, h * p), kw["x"].reshape(b, l, h * p), kw["B"].reshape(b, l, g * n),
             kw["C"].reshape(b, l, g * n), kw["dt"].bfloat16()]
    fused = torch.cat(parts, -1)
    widths = [t.shape[-1] for t in parts]
    gen = torch.Generator(device="cuda").manual_seed(4)
    A = kw["A"]
    D = torch.randn(h, device="cuda", generator=gen)
    dy = torch.randn(b, l, h, p, device="cuda", generator=gen).bfloat16()

    def fused_grad(proj, scan, cast):
        proj = proj.detach().requires_grad_()
        z, x, B, C, dt = torch.split(proj, widths, dim=-1)
        out = scan(x.view(b, l, h, p), cast(dt), A, B.view(b, l, g, n), C.view(b, l, g, n), D=D,
                   z=z.view(b, l, h, p), dt_softplus=True)
        return torch.autograd.grad(out, proj, dy.to(out.dtype))[0]

    got = fused_grad(fused, tk_ops.mamba2_chunk_scan, lambda t: t.float())
    ref = fused_grad(fused.double(), scan_ref, lambda t: t)
    assert got.dtype == torch.bfloat16 and got.shape == fused.shape
    for name, g_part, r_part in zip(("z", "x", "B", "C", "dt"), torch.split(got, widths, -1),
                                    torch.split(ref, widths, -1)):
        e = err(g_part, r_part)
        assert e <= TOL[torch.bfloat16], f"strided d{name}: relative error {e:.3e}"


@pytest.mark.parametrize("decay", ["fast", "slow"])
@pytest.mark.parametrize("cut", [64, 201], ids=["cut_at_chunk_edge", "cut_inside_chunk"])
def test_prefill_in_two_calls_has_the_gradients_of_one(cut, decay):
    """The first call's final states are the second's initial states: gradients flow back through them (with slowly
    decaying heads, most of the first call's gradients do), and equal those of one call over the whole sequence."""
    b, l, h, g, p, n = 2, 600, 4, 2, 128, 128
    kw = inputs(b, l, h, g, p, n, D="head", z=True, dt_bias=True, init=True, softplus=True, decay=decay)
    dy, dfinal = out_grads(kw, "grad", dt_softplus=True)
    whole = tk_grads(kw, dy, dfinal, True, dt_softplus=True)

    def two_calls(x, dt, A, B, C, D, z, dt_bias, initial_states):
        common = dict(A=A, D=D, dt_bias=dt_bias, dt_softplus=True, return_final_states=True)
        first, mid = tk_ops.mamba2_chunk_scan(x[:, :cut], dt[:, :cut], B=B[:, :cut], C=C[:, :cut], z=z[:, :cut],
                                              initial_states=initial_states, **common)
        second, final = tk_ops.mamba2_chunk_scan(x[:, cut:], dt[:, cut:], B=B[:, cut:], C=C[:, cut:], z=z[:, cut:],
                                                 initial_states=mid, **common)
        return torch.cat([first, second], 1), final

    split = autograd_grads(two_calls, kw, dy, dfinal)
    torch.cuda.synchronize()
    ref = ref_grads(kw, dy, dfinal, True, dt_softplus=True)
    compare(split, ref, kw, dy, dict(dt_softplus=True), f"{decay}: two calls cut at {cut}")
    for name in names_of(kw):
        e = grad_err(name, split[name], whole[name], ref)
        assert e <= tol_of(name, torch.bfloat16), f"{decay}: cut at {cut} d{name}: {e:.3e} from one call's"


# -- torch.compile and CUDA graphs ---------------------------------------------------------------------------------

def test_compiles_fullgraph_forward_and_backward():
    kw = inputs(2, 333, 4, 2, 64, 128, D="channel", z=True, dt_bias=True, init=True, softplus=True)
    dy, dfinal = out_grads(kw, "grad", dt_softplus=True, dt_limit=DT_LIMIT)
    w_out = dy.float()

    def loss(x, dt, A, B, C, D, z, dt_bias, initial_states):
        out, final = tk_ops.mamba2_chunk_scan(x * 2, dt, A, B, C, 128, D=D, z=z, dt_bias=dt_bias,
                                              initial_states=initial_states, dt_softplus=True, dt_limit=DT_LIMIT,
                                              return_final_states=True)
        return (out.float() * w_out).sum() + (final * dfinal).sum()

    names = names_of(kw)

    def grads_of(fn):
        leaves = [kw[k].detach().clone().requires_grad_() for k in names]
        return dict(zip(names, torch.autograd.grad(fn(*leaves), leaves)))

    eager = grads_of(loss)
    compiled = grads_of(torch.compile(loss, fullgraph=True))
    x2 = dict(kw, x=kw["x"] * 2)
    ref = ref_grads(x2, dy, dfinal, True, dt_softplus=True, dt_limit=DT_LIMIT)
    ref["x"] = ref["x"] * 2
    compare(compiled, ref, kw, dy, dict(dt_softplus=True, dt_limit=DT_LIMIT), "compiled")
    for name in names:
        e = grad_err(name, compiled[name], eager[name], ref)
        assert e <= COMPILE_TOL, f"d{name}: compiled differs from eager by {e:.2e}"


def test_cuda_graph_capture_of_forward_and_backward():
    """Forward and backward captured once, replayed on new inputs written into the captured ones."""
    b, l, h, g, p, n = 2, 500, 4, 2, 64, 128
    shape = dict(D="channel", z=True, dt_bias=True, init=True, softplus=True)
    flags = dict(dt_softplus=True, dt_limit=DT_LIMIT)
    kw = inputs(b, l, h, g, p, n, torch.float16, **shape)
    names = names_of(kw)
    leaves = {k: kw[k].detach().clone().requires_grad_() for k in names}
    dy, dfinal = out_grads(kw, "grad", **flags)

    def step():
        out, final = tk_ops.mamba2_chunk_scan(**leaves, **flags, return_final_states=True)
        return torch.autograd.grad([out, final], [leaves[k] for k in names], [dy, dfinal])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside capture: loads the extension, settles the allocator
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()

    new = inputs(b, l, h, g, p, n, torch.float16, seed=7, **shape)
    new_dy, new_dfinal = out_grads(new, "grad", seed=8, **flags)
    with torch.no_grad():
        for k in names:
            leaves[k].copy_(new[k])
        dy.copy_(new_dy)
        dfinal.copy_(new_dfinal)
    graph.replay()
    torch.cuda.synchronize()
    replayed = {k: t.clone() for k, t in zip(names, captured)}

    ref = ref_grads(new, new_dy, new_dfinal, True, **flags)
    compare(replayed, ref, new, new_dy, flags, "graph replay")
    assert_reproduced(replayed, tk_grads(new, new_dy, new_dfinal, True, **flags), ref, "graph replay vs eager")
