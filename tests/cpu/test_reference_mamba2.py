"""The float64 Mamba-2 references (tk_ops.reference.mamba2) checked against each other and against the
semantics of mamba_ssm's mamba_chunk_scan_combined / selective_state_update: the token-by-token recurrence,
the chunked SSD form (every chunk size, ragged lengths, packed sequences) and an explicit double sum agree;
chunked prefill followed by decoding steps equals one pass; gradients exist for every differentiable input."""
import math

import pytest
import torch

from tk_ops.reference.mamba2 import mamba2_chunk_scan, mamba2_dt, mamba2_step

TOL = 1e-9
CHUNK_SIZES = (4, 8, 16)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def make_inputs(b=2, l=33, h=4, p=8, n=8, g=1, seed=0, D=None, z=False, dt_bias=False, init=False, raw_dt=False):
    """Random inputs in float64. dt is around 0.3, positive, or with ``raw_dt`` the value to put through
    softplus (mostly negative); A in [-1.05, -0.05] so that some heads carry their state across the whole
    sequence."""
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    dt = 0.5 * rnd(b, l, h) - 1.0
    kw = dict(x=rnd(b, l, h, p), dt=dt if raw_dt else torch.nn.functional.softplus(dt),
              A=-(0.05 + torch.rand(h, generator=gen, dtype=torch.float64)),
              B=rnd(b, l, g, n) / math.sqrt(n), C=rnd(b, l, g, n))
    if D == "head":
        kw["D"] = rnd(h)
    elif D == "channel":
        kw["D"] = rnd(h, p)
    if z:
        kw["z"] = rnd(b, l, h, p)
    if dt_bias:
        kw["dt_bias"] = 0.3 * rnd(h)
    if init:
        kw["initial_states"] = rnd(b, h, p, n)
    return kw


def packed_seq_idx(l, starts_per_row, first_ids):
    """(b, l) int32 ids; row r starts a new sequence at each position of starts_per_row[r] (< l)."""
    rows = []
    for starts, first in zip(starts_per_row, first_ids):
        ids = torch.full((l,), first, dtype=torch.int32)
        for s in starts:
            if s < l:
                ids[s:] += 1
        rows.append(ids)
    return torch.stack(rows)


# Boundaries inside chunks of 4, 8 and 16 and on chunk borders (8, 16, 32), and a one-token sequence (13).
SEQ_STARTS = ([3, 8, 13, 14, 22, 32], [1, 16, 19, 30])

CASES = {
    "plain": dict(),
    "D_per_head_g2": dict(inputs=dict(D="head", g=2)),
    "D_per_channel_z_g_eq_h": dict(inputs=dict(D="channel", z=True, g=4)),
    "dt_bias_softplus": dict(inputs=dict(dt_bias=True), dt_softplus=True),
    "dt_limit": dict(inputs=dict(dt_bias=True), dt_softplus=True, dt_limit=(0.25, 0.4)),
    "initial_states": dict(inputs=dict(init=True, D="head"), dt_softplus=True),
    "seq_idx": dict(inputs=dict(g=2), dt_softplus=True, seq_idx=(0, 0)),
    "everything": dict(inputs=dict(D="channel", z=True, dt_bias=True, init=True, g=2), dt_softplus=True,
                       dt_limit=(0.05, 0.6), seq_idx=(0, 2)),
}


def case_args(name, l):
    case = dict(CASES[name])
    kw = make_inputs(l=l, raw_dt=case.get("dt_softplus", False), **case.pop("inputs", {}))
    if "seq_idx" in case:
        kw["seq_idx"] = packed_seq_idx(l, SEQ_STARTS, case.pop("seq_idx"))
    kw.update(case)
    return kw


@pytest.mark.parametrize("l", [1, 7, 16, 33])
@pytest.mark.parametrize("name", list(CASES))
def test_chunked_form_equals_recurrence(name, l):
    kw = case_args(name, l)
    out_ref, final_ref = mamba2_chunk_scan(**kw, return_final_states=True, form="recurrent")
    assert torch.isfinite(out_ref).all() and out_ref.norm() > 0
    for chunk_size in CHUNK_SIZES:
        out, final = mamba2_chunk_scan(**kw, chunk_size=chunk_size, return_final_states=True, form="chunked")
        assert out.dtype == torch.float64 and out.shape == kw["x"].shape
        assert rel(out, out_ref) < TOL, (chunk_size, rel(out, out_ref))
        assert rel(final, final_ref) < TOL, (chunk_size, rel(final, final_ref))


def test_recurrence_equals_explicit_sum():
    """y_t = C_t . (prod_{r<=t} a_r) h0 + sum_{s<=t} (prod_{s<r<=t} a_r) dt_s C_t . B_s x_s, a_r = exp(dt_r A),
    then + D x_t and * silu(z_t): the definition written as a double sum, with groups and all options."""
    kw = make_inputs(b=1, l=6, h=4, p=3, n=5, g=2, D="channel", z=True, dt_bias=True, init=True, raw_dt=True)
    out = mamba2_chunk_scan(**kw, dt_softplus=True, form="recurrent")
    dt = torch.nn.functional.softplus(kw["dt"] + kw["dt_bias"])[0]  # (l, h)
    x, B, C, h0 = kw["x"][0], kw["B"][0], kw["C"][0], kw["initial_states"][0]
    expected = torch.empty_like(x)
    for t in range(6):
        for head in range(4):
            grp = head // 2
            a = torch.exp(dt[:, head] * kw["A"][head])
            y = (h0[head] @ C[t, grp]) * a[: t + 1].prod()
            for s in range(t + 1):
                y = y + a[s + 1: t + 1].prod() * dt[s, head] * (C[t, grp] @ B[s, grp]) * x[s, head]
            y = y + kw["D"][head] * x[t, head]
            zt = kw["z"][0, t, head]
            expected[t, head] = y * zt * torch.sigmoid(zt)
    assert rel(out[0], expected) < TOL


def test_dt_bias_then_softplus_then_clamp():
    bias = torch.tensor([0.7], dtype=torch.float64)
    dt = torch.tensor([-0.7, 10.0, -10.0], dtype=torch.float64)[:, None]
    got = mamba2_dt(dt, bias, dt_softplus=True, dt_limit=(0.5, 1.0))[:, 0]
    # softplus(0) = ln 2 lies inside the limits; softplus(10.7) is clamped to 1.0; softplus(-9.3) ~ 9e-5 is
    # clamped to 0.5 (clamping before softplus would give softplus(0.5) = 0.97).
    torch.testing.assert_close(got, torch.tensor([math.log(2.0), 1.0, 0.5], dtype=torch.float64))
    # Softplus applies up to 20 included and is the identity above, as in mamba_ssm.
    edge = mamba2_dt(torch.tensor([[19.3], [19.8]], dtype=torch.float64), bias, dt_softplus=True)[:, 0]
    assert edge[0].item() == pytest.approx(20.0 + math.exp(-20.0), rel=0, abs=1e-13) and edge[0].item() > 20.0
    assert edge[1].item() == 19.8 + 0.7


def test_default_dt_limit_clamps_negative_dt_to_zero():
    kw = make_inputs(l=19, D="head", raw_dt=True)
    assert (kw["dt"] < 0).any()  # raw dt, no softplus: many steps are negative
    out = mamba2_chunk_scan(**kw)
    clamped = mamba2_chunk_scan(**{**kw, "dt": kw["dt"].clamp_min(0.0)}, dt_limit=(-math.inf, math.inf))
    unclamped = mamba2_chunk_scan(**kw, dt_limit=(-math.inf, math.inf))
    assert rel(out, clamped) < TOL
    assert rel(out, unclamped) > 1e-3


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_packed_sequences_equal_separate_runs(form):
    lengths = [5, 13, 1, 20]
    l = sum(lengths)
    kw = make_inputs(b=1, l=l, g=2, D="channel", z=True, dt_bias=True, init=True, raw_dt=True)
    kw["seq_idx"] = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                            torch.tensor(lengths))[None]
    out, final = mamba2_chunk_scan(**kw, chunk_size=8, dt_softplus=True, return_final_states=True, form=form)
    start = 0
    for i, n_tok in enumerate(lengths):
        part = {k: (v[:, start:start + n_tok] if k in ("x", "dt", "B", "C", "z") else v)
                for k, v in kw.items() if k != "seq_idx"}
        if i > 0:  # only the row's first sequence (id 0) starts from the initial states
            del part["initial_states"]
        alone, alone_final = mamba2_chunk_scan(**part, chunk_size=8, dt_softplus=True, return_final_states=True,
                                               form=form)
        assert rel(out[:, start:start + n_tok], alone) < TOL, i
        start += n_tok
    assert rel(final, alone_final) < TOL  # the final state is the last sequence's
    # The resets matter: without seq_idx the packed row gives something else.
    no_reset = mamba2_chunk_scan(**{k: v for k, v in kw.items() if k != "seq_idx"}, dt_softplus=True)
    assert rel(no_reset[:, lengths[0]:], out[:, lengths[0]:]) > 1e-3


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_initial_states_feed_only_a_row_starting_with_sequence_0(form):
    kw = make_inputs(l=21, init=True, raw_dt=True)
    kw["seq_idx"] = packed_seq_idx(21, ([6], [6]), (0, 1))
    out, final = mamba2_chunk_scan(**kw, chunk_size=8, dt_softplus=True, return_final_states=True, form=form)
    no_init, no_init_final = mamba2_chunk_scan(**{**kw, "initial_states": None}, chunk_size=8, dt_softplus=True,
                                               return_final_states=True, form=form)
    assert rel(out[0, :6], no_init[0, :6]) > 1e-3  # row 0 starts with id 0: its first sequence sees them
    assert rel(out[0, 6:], no_init[0, 6:]) < TOL
    assert rel(out[1], no_init[1]) < TOL  # row 1 starts with id 1: the initial states are not used
    assert rel(final, no_init_final) < TOL


@pytest.mark.parametrize("D", ["head", "channel"])
def test_chunked_prefill_then_steps_equal_one_pass(D):
    l, first, second = 40, 17, 30
    kw = make_inputs(l=l, g=2, D=D, z=True, dt_bias=True, init=True, raw_dt=True)
    opts = dict(dt_softplus=True, return_final_states=True)
    full, full_final = mamba2_chunk_scan(**kw, **opts, form="recurrent")
    seq = lambda a, b: {k: (v[:, a:b] if k in ("x", "dt", "B", "C", "z") else v) for k, v in kw.items()}  # noqa: E731
    out1, state1 = mamba2_chunk_scan(**seq(0, first), chunk_size=8, **opts, form="chunked")
    out2, state2 = mamba2_chunk_scan(**{**seq(first, second), "initial_states": state1}, chunk_size=8, **opts,
                                     form="chunked")
    state = state2.clone()
    steps = []
    for t in range(second, l):
        steps.append(mamba2_step(state, kw["x"][:, t], kw["dt"][:, t], kw["A"], kw["B"][:, t], kw["C"][:, t],
                                 D=kw["D"], z=kw["z"][:, t], dt_bias=kw["dt_bias"], dt_softplus=True))
    got = torch.cat([out1, out2, torch.stack(steps, dim=1)], dim=1)
    assert rel(got, full) < TOL
    assert rel(state, full_final) < TOL  # the steps updated the state in place


def test_step_uses_dt_without_clamp_and_keeps_the_state_dtype():
    kw = make_inputs(b=2, l=1, h=4, g=2, D="head", init=True)
    kw["dt"] = -kw["dt"].abs()  # negative: the scan's default limits would clamp it to 0, the step does not
    state = kw["initial_states"].clone()
    y = mamba2_step(state, kw["x"][:, 0], kw["dt"][:, 0], kw["A"], kw["B"][:, 0], kw["C"][:, 0], D=kw["D"])
    out, final = mamba2_chunk_scan(**kw, dt_limit=(-math.inf, math.inf), return_final_states=True)
    assert rel(y, out[:, 0]) < TOL and rel(state, final) < TOL
    clamped = mamba2_chunk_scan(**kw)
    assert rel(y, clamped[:, 0]) > 1e-3

    state32 = kw["initial_states"].float()
    y32 = mamba2_step(state32, kw["x"][:, 0], kw["dt"][:, 0], kw["A"], kw["B"][:, 0], kw["C"][:, 0], D=kw["D"])
    assert state32.dtype == torch.float32 and y32.dtype == torch.float64
    assert rel(state32.double(), final) < 1e-6


def test_forms_have_the_same_gradients():
    kw = make_inputs(b=2, l=21, h=4, p=4, n=4, g=2, D="channel", z=True, dt_bias=True, init=True, raw_dt=True)
    kw["seq_idx"] = packed_seq_idx(21, ([5, 11], [8]), (0, 0))
    gen = torch.Generator().manual_seed(1)
    dout = torch.randn(kw["x"].shape, generator=gen, dtype=torch.float64)
    dfinal = torch.randn(kw["initial_states"].shape, generator=gen, dtype=torch.float64)
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]
    grads = {}
    for form in ("recurrent", "chunked"):
        leaves = {k: (v.clone().requires_grad_() if k in names else v) for k, v in kw.items()}
        out, final = mamba2_chunk_scan(**leaves, chunk_size=8, dt_softplus=True, dt_limit=(0.05, 0.6),
                                       return_final_states=True, form=form)
        grads[form] = torch.autograd.grad((out * dout).sum() + (final * dfinal).sum(),
                                          [leaves[k] for k in names])
    for name, g_rec, g_chunk in zip(names, grads["recurrent"], grads["chunked"]):
        assert g_rec.norm() > 0, name
        assert rel(g_chunk, g_rec) < TOL, name


@pytest.mark.parametrize("form,D", [("recurrent", "channel"), ("chunked", "head")])
def test_gradcheck_every_differentiable_input(form, D):
    kw = make_inputs(b=1, l=5, h=2, p=2, n=3, g=1, D=D, z=True, dt_bias=True, init=True, seed=3, raw_dt=True)
    seq_idx = torch.tensor([[0, 0, 0, 1, 1]], dtype=torch.int32) if form == "chunked" else None
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]

    def fn(*tensors):
        # dt_limit well away from the softplus outputs here, so that the clamp's kinks are not probed.
        return mamba2_chunk_scan(**dict(zip(names, tensors)), chunk_size=2, seq_idx=seq_idx, dt_softplus=True,
                                 dt_limit=(1e-3, 10.0), return_final_states=True, form=form)

    assert torch.autograd.gradcheck(fn, [kw[k].clone().requires_grad_() for k in names])


def test_bad_shapes_are_named():
    kw = make_inputs(l=4, h=4, g=1)
    with pytest.raises(ValueError, match="g dividing h"):
        mamba2_chunk_scan(**{**kw, "B": torch.zeros(2, 4, 3, 8), "C": torch.zeros(2, 4, 3, 8)})
    with pytest.raises(ValueError, match="D must be"):
        mamba2_chunk_scan(**kw, D=torch.zeros(3))
    with pytest.raises(ValueError, match="at least 1"):
        mamba2_chunk_scan(**{k: v[:, :0] if k in ("x", "dt", "B", "C") else v for k, v in kw.items()})
    with pytest.raises(ValueError, match="form"):
        mamba2_chunk_scan(**kw, form="quadratic")
