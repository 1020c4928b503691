"""tk_ops.mamba2_step (one Mamba-2 decoding token, the state updated in place) against the float64 reference's
mamba2_step on the GPU: every state dimension, ragged and usual head dimensions, bf16 and fp16, every option (D per
head and per channel, z, dt_bias, softplus, dt in float32 or x's dtype), g in {1, 2, h}, strided token views, states
that are slices of a cache or not 16-byte aligned, outputs poisoned before the run; and a chunked prefill
(tk_ops.mamba2_chunk_scan with return_final_states) followed by steps equals one pass of the reference, also with
slowly decaying heads whose steps read mostly the prefill's state; and, where mamba_ssm's Triton kernels import, the
same state and output as its selective_state_update. The argument rules are tested on the CPU
(tests/cpu/test_mamba2_step_api.py). Skipped unless the 'mamba2' family is in the build."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.mamba2 import mamba2_chunk_scan as scan_ref, mamba2_step as step_ref

from ...util import requires_families
from ..util import assert_close, fresh_pool_with_nan, rel_err

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # the output, rounded once to x's dtype
STATE_TOL = 1e-5  # the fp32 state after one token: fp32 arithmetic on exact inputs
SCAN_TOL = 1e-2   # prefill (bf16 operands, fp32 accumulation) then steps, against one float64 pass


pytestmark = requires_families("mamba2")


def token(b, h, g, p, n, dtype=torch.bfloat16, softplus=True, dt_dtype=torch.float32, seed=0):
    """x, dt, A, B, C of one token, at the scales of a trained Mamba-2 layer (decays between about 0.3 and 1)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    x = rnd(b, h, p).to(dtype)
    dt = (rnd(b, h) * 0.5 - 2.0) if softplus else torch.rand(b, h, device="cuda", generator=gen) * 0.1
    A = -torch.exp(torch.rand(h, device="cuda", generator=gen) * math.log(16.0))
    B = (rnd(b, g, n) / math.sqrt(n) * 2).to(dtype)
    C = (rnd(b, g, n) / math.sqrt(n) * 2).to(dtype)
    return x, dt.to(dt_dtype), A, B, C


def prior_state(b, h, p, n, seed=100):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(b, h, p, n, device="cuda", generator=gen) * 0.5


def options(b, h, p, dtype, D=None, z=False, dt_bias=False, seed=7):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    kw = {}
    if D == "head":
        kw["D"] = rnd(h)
    elif D == "channel":
        kw["D"] = rnd(h, p)
    if z:
        kw["z"] = rnd(b, h, p).to(dtype)
    if dt_bias:
        kw["dt_bias"] = rnd(h) * 0.5
    return kw


def check_step(state, x, dt, A, B, C, what="", **kw):
    expect_state = state.double().clone()
    ref = step_ref(expect_state, x, dt, A, B, C, **kw)
    pointer = state.data_ptr()
    fresh_pool_with_nan(x.numel())
    y = tk_ops.mamba2_step(state, x, dt, A, B, C, **kw)
    torch.cuda.synchronize()
    assert y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous(), what
    assert state.data_ptr() == pointer, f"{what}: the state must be updated in place"
    assert_close(y, ref, TOL[x.dtype], f"{what}: output")
    assert_close(state, expect_state, STATE_TOL, f"{what}: state")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("p", [64, 128, 37])
def test_step(p, n, dtype):
    b, h, g = 3, 4, 2
    check_step(prior_state(b, h, p, n), *token(b, h, g, p, n, dtype), what=f"p={p} n={n} {dtype}",
               **options(b, h, p, dtype, D="head", z=True, dt_bias=True), dt_softplus=True)


@pytest.mark.parametrize("D", [None, "head", "channel"])
@pytest.mark.parametrize("z", [False, True], ids=["no_z", "z"])
@pytest.mark.parametrize("dt_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("softplus", [False, True], ids=["raw_dt", "softplus"])
def test_options(D, z, dt_bias, softplus):
    b, h, g, p, n = 2, 6, 3, 64, 128
    check_step(prior_state(b, h, p, n), *token(b, h, g, p, n, softplus=softplus),
               what=f"D={D} z={z} dt_bias={dt_bias} softplus={softplus}",
               **options(b, h, p, torch.bfloat16, D=D, z=z, dt_bias=dt_bias), dt_softplus=softplus)


@pytest.mark.parametrize("g", [1, 2, 8])
def test_groups(g):
    b, h, p, n = 2, 8, 64, 64
    check_step(prior_state(b, h, p, n), *token(b, h, g, p, n), what=f"g={g}", dt_softplus=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_dt_in_the_inputs_dtype(dtype):
    b, h, g, p, n = 2, 4, 1, 64, 128
    x, dt, A, B, C = token(b, h, g, p, n, dtype, dt_dtype=dtype)
    assert dt.dtype == dtype
    check_step(prior_state(b, h, p, n), x, dt, A, B, C, what=f"dt {dtype}",
               **options(b, h, p, dtype, dt_bias=True), dt_softplus=True)


def test_negative_dt_is_not_clamped():
    """As in mamba_ssm's step, no dt_limit: a raw negative dt (no softplus) is used as it is (the reference agrees)."""
    b, h, g, p, n = 2, 4, 1, 64, 64
    x, dt, A, B, C = token(b, h, g, p, n, softplus=False)
    check_step(prior_state(b, h, p, n), x, -dt, A, B, C, what="negative dt")


def test_large_dt_takes_softplus_identity():
    b, h, g, p, n = 1, 4, 1, 64, 64
    x, dt, A, B, C = token(b, h, g, p, n)
    dt = torch.tensor([[19.0, 20.0, 21.0, 30.0]], device="cuda")
    check_step(prior_state(b, h, p, n), x, dt, A * 0.01, B, C, what="dt around the softplus threshold",
               dt_softplus=True)


def test_from_a_zero_state():
    b, h, g, p, n = 2, 4, 1, 64, 128
    check_step(torch.zeros(b, h, p, n, device="cuda"), *token(b, h, g, p, n), what="zero state", dt_softplus=True)


def test_strided_token_views():
    """Slices of one fused projection output, as the Mamba2 module's step hands them over: read in place."""
    b, h, g, p, n = 4, 6, 2, 64, 128
    width = h * p + 2 * g * n + h + h * p
    y = torch.randn(b, width + 8, device="cuda").bfloat16()
    z, x, B, C, dt = y[:, 8:].split([h * p, h * p, g * n, g * n, h], dim=-1)
    with torch.no_grad():  # scaled in place, so that they stay views of y
        B.mul_(1 / math.sqrt(n))
        C.mul_(1 / math.sqrt(n))
        dt.mul_(0.5).sub_(2.0)
    z, x = z.unflatten(-1, (h, p)), x.unflatten(-1, (h, p))
    B, C = B.unflatten(-1, (g, n)).contiguous(), C.unflatten(-1, (g, n))  # one copied, one a strided view
    assert not x.is_contiguous() and not C.is_contiguous() and not dt.is_contiguous()
    A = -torch.rand(h, device="cuda") * 4
    check_step(prior_state(b, h, p, n), x, dt, A, B, C, z=z, dt_bias=torch.randn(h, device="cuda"), dt_softplus=True,
               what="fused projection slices (dt in bf16)")
    xt = torch.randn(b, p, h, device="cuda").bfloat16().transpose(1, 2)  # head_dim axis strided
    check_step(prior_state(b, h, p, n), xt, dt.float(), A, B, C, dt_softplus=True, what="strided head_dim axis")


def test_state_slices_of_a_cache():
    """A layer's slice of a larger cache, batch slots picked by a stride, a state view at an offset that breaks 16-byte
    alignment, and one whose state_dim axis is strided: all updated in place."""
    b, h, g, p, n = 2, 3, 1, 64, 64
    cache = torch.zeros(3, b, h, p, n, device="cuda")
    cache[1].copy_(prior_state(b, h, p, n))
    check_step(cache[1], *token(b, h, g, p, n), what="cache layer", dt_softplus=True)
    slots = torch.zeros(2 * b, h, p, n, device="cuda")
    slots[::2].copy_(prior_state(b, h, p, n))
    check_step(slots[::2], *token(b, h, g, p, n, seed=2), what="every other batch slot", dt_softplus=True)
    buf = torch.zeros(b * h * p * n + 1, device="cuda")
    buf[1:].copy_(prior_state(b, h, p, n).flatten())
    check_step(buf[1:].view(b, h, p, n), *token(b, h, g, p, n, seed=3), what="unaligned state", dt_softplus=True)
    transposed = prior_state(b, h, n, p).transpose(2, 3)  # (b, h, p, n) with the state_dim axis strided
    check_step(transposed, *token(b, h, g, p, n, seed=4), what="strided state_dim axis", dt_softplus=True)


def test_many_heads():
    b, h, g, p, n = 8, 64, 1, 64, 128
    check_step(prior_state(b, h, p, n), *token(b, h, g, p, n), what="8 x 64 heads", dt_softplus=True,
               **options(b, h, p, torch.bfloat16, D="head", dt_bias=True))


def test_no_gradient():
    b, h, g, p, n = 2, 4, 1, 64, 64
    x, dt, A, B, C = token(b, h, g, p, n)
    y = tk_ops.mamba2_step(prior_state(b, h, p, n), x.requires_grad_(), dt, A, B, C)
    assert not y.requires_grad
    with pytest.raises(ValueError, match="the state requires grad"):
        tk_ops.mamba2_step(prior_state(b, h, p, n).requires_grad_(), x, dt, A, B, C)


def test_cuda_graph_replay():
    b, h, g, p, n = 2, 4, 1, 64, 128
    state = prior_state(b, h, p, n)
    x, dt, A, B, C = token(b, h, g, p, n)
    expect = state.double().clone()
    refs = [step_ref(expect, x, dt, A, B, C, dt_softplus=True) for _ in range(3)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        tk_ops.mamba2_step(state.clone(), x, dt, A, B, C, dt_softplus=True)  # warm-up: loads the extension
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tk_ops.mamba2_step(state, x, dt, A, B, C, dt_softplus=True)
    for ref in refs:  # capture ran nothing: three replays are three steps
        graph.replay()
        torch.cuda.synchronize()
        assert_close(y, ref, TOL[torch.bfloat16], "replayed step's output")
    assert_close(state, expect, STATE_TOL * 3, "state after three replays")


@pytest.mark.parametrize("decay", ["fast", "slow"])
@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize("p, n", [(64, 128), (128, 64)])
def test_steps_continue_a_chunked_prefill(p, n, g, decay):
    """Prefill by the chunked scan (its final states), then decode token by token: one float64 pass agrees. With
    slowly decaying heads (A from -1e-3 to -0.1) the steps' outputs are mostly the prefill's state: decoding from a
    zero state instead is off by more than 10 times the bound (checked on the reference)."""
    b, h, l, prefill = 2, 4, 150, 130
    gen = torch.Generator(device="cuda").manual_seed(5)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    x = rnd(b, l, h, p).bfloat16()
    z = rnd(b, l, h, p).bfloat16()
    dt = rnd(b, l, h) * 0.5 - 2.0
    if decay == "slow":
        A = -torch.logspace(-3, -1, h, device="cuda")
    else:
        A = -torch.exp(torch.rand(h, device="cuda", generator=gen) * math.log(16.0))
    B = (rnd(b, l, g, n) / math.sqrt(n) * 2).bfloat16()
    C = (rnd(b, l, g, n) / math.sqrt(n) * 2).bfloat16()
    D, dt_bias = rnd(h), rnd(h) * 0.5
    kw = dict(D=D, dt_bias=dt_bias, dt_softplus=True)  # softplus: dt > 0, where the scan's clamp changes nothing
    ref_out, ref_state = scan_ref(x, dt, A, B, C, z=z, return_final_states=True, **kw)
    with torch.no_grad():
        out, state = tk_ops.mamba2_chunk_scan(x[:, :prefill], dt[:, :prefill], A, B[:, :prefill], C[:, :prefill],
                                              chunk_size=64, z=z[:, :prefill], return_final_states=True, **kw)
        steps = [tk_ops.mamba2_step(state, x[:, t], dt[:, t], A, B[:, t], C[:, t], z=z[:, t], **kw)
                 for t in range(prefill, l)]
    torch.cuda.synchronize()
    assert_close(out, ref_out[:, :prefill], SCAN_TOL, "prefill")
    assert_close(torch.stack(steps, dim=1), ref_out[:, prefill:], SCAN_TOL, "steps after the prefill")
    assert_close(state, ref_state, SCAN_TOL, "final state")
    if decay == "slow":
        fresh = scan_ref(x[:, prefill:], dt[:, prefill:], A, B[:, prefill:], C[:, prefill:], z=z[:, prefill:], **kw)
        assert rel_err(fresh, ref_out[:, prefill:]) > 10 * SCAN_TOL, "the prefill's state hardly shows in the steps"


@pytest.mark.parametrize("dtype, D", [(torch.bfloat16, "head"), (torch.float16, "channel")], ids=["bf16", "fp16"])
def test_matches_mamba_ssms_selective_state_update(dtype, D):
    """The drop-in promise, when mamba_ssm's Triton kernels import (docs/mamba2.md: carried with PYTHONPATH): the same
    state and output as selective_state_update given the per-head arguments expanded, as the Mamba2 module does. Both
    compute the token in fp32 from the same 16-bit inputs: the states agree to fp32 rounding, the outputs to one
    rounding to x's dtype (where the two fp32 values fall on either side of a rounding boundary), and each is held to
    the float64 reference as well."""
    try:
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    except ImportError as e:  # the peer is optional: its sources (or triton, einops) are not on the path here
        pytest.skip(f"mamba_ssm's selective_state_update does not import here: {e}")
    b, h, g, p, n = 3, 8, 2, 64, 128
    x, dt, A, B, C = token(b, h, g, p, n, dtype)
    kw = options(b, h, p, dtype, D=D, z=True, dt_bias=True)
    ours_state, peer_state = prior_state(b, h, p, n), prior_state(b, h, p, n)
    expect_state = prior_state(b, h, p, n).double()
    ref = step_ref(expect_state, x, dt, A, B, C, dt_softplus=True, **kw)
    y = tk_ops.mamba2_step(ours_state, x, dt, A, B, C, dt_softplus=True, **kw)
    peer_D = kw["D"] if D == "channel" else kw["D"][:, None].expand(h, p)
    y_peer = selective_state_update(peer_state, x, dt[..., None].expand(b, h, p), A[:, None, None].expand(h, p, n), B,
                                    C, peer_D, z=kw["z"], dt_bias=kw["dt_bias"][:, None].expand(h, p),
                                    dt_softplus=True)
    torch.cuda.synchronize()
    assert y_peer.dtype == y.dtype == dtype
    assert_close(peer_state, expect_state, STATE_TOL, "peer's state against the reference")
    assert_close(y_peer, ref, TOL[dtype], "peer's output against the reference")
    assert_close(ours_state, peer_state, STATE_TOL, "state against the peer's")
    assert_close(y, y_peer, TOL[dtype], "output against the peer's")
