"""tk_ops.based_step (one decoding token of Based linear attention, the state updated in place) against the float64
reference's based_step on the GPU: every value dimension, normalised and not, bf16 and fp16, (B, H, D) and
(B, H, 1, D) tokens, strided token views, a state at an unaligned offset, many steps in a row, CUDA graphs and
torch.compile. Skipped unless the 'based' family is in the build."""
import pytest
import torch

import tk_ops
from tk_ops.errors import DeviceMismatchError
from tk_ops.reference.based import based as based_ref, based_step as based_step_ref

from ...util import requires_families
from ..util import TOL as ROUNDING, assert_close
from .test_based import STATE_TOL as PREFILL_STATE_TOL, TOL as PREFILL_TOL

# The step's output: fp32 arithmetic on the 16-bit token and the fp32 state, rounded once to v's dtype.
TOL = {dtype: ROUNDING[dtype] for dtype in (torch.bfloat16, torch.float16)}
STATE_TOL = 1e-5  # the fp32 state after one token: fp32 arithmetic on exact inputs
DK, F = 16, 273


pytestmark = requires_families("based")


def token(b, h, dv, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(b, h, DK, device="cuda", generator=g).to(dtype),
            torch.randn(b, h, DK, device="cuda", generator=g).to(dtype),
            torch.randn(b, h, dv, device="cuda", generator=g).to(dtype))


def prior_state(b, h, dv, n=40, seed=100):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).bfloat16() for d in (DK, DK, dv))
    _, (kv, k_sum) = based_ref(q, k, v, output_final_state=True)
    return kv.float(), k_sum.float()


def check_step(q, k, v, state, normalize=True, scale=None, eps=1e-6, what=""):
    expect_state = tuple(x.double().clone() for x in state)
    squeeze = q.dim() == 4
    ref = based_step_ref(*(x[:, :, 0] if squeeze else x for x in (q, k, v)), expect_state, scale, normalize, eps)
    pointers = [x.data_ptr() for x in state]
    o = tk_ops.based_step(q, k, v, state, scale, normalize, eps)
    torch.cuda.synchronize()
    assert o.shape == v.shape and o.dtype == v.dtype and o.is_contiguous(), what
    assert [x.data_ptr() for x in state] == pointers, f"{what}: the state must be updated in place"
    assert_close(o[:, :, 0] if squeeze else o, ref, TOL[v.dtype], f"{what}: output")
    for name, got, exp in zip(("kv", "k_sum"), state, expect_state):
        assert_close(got, exp, STATE_TOL, f"{what}: {name}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
@pytest.mark.parametrize("dv", [16, 32, 48, 64, 80, 96, 112, 128])
def test_step(dv, normalize, dtype):
    check_step(*token(3, 5, dv, dtype), prior_state(3, 5, dv), normalize, what=f"dv={dv} {dtype}")


def test_from_a_zero_state():
    q, k, v = token(2, 4, 64)
    state = (torch.zeros(2, 4, 64, F, device="cuda"), torch.zeros(2, 4, F, device="cuda"))
    check_step(q, k, v, state, what="zero state")


@pytest.mark.parametrize("scale", [0.5, -0.3, 0.0])
def test_scale_and_eps(scale):
    check_step(*token(2, 3, 64), prior_state(2, 3, 64), True, scale=scale, eps=0.25, what=f"scale={scale}")


def test_tokens_with_a_sequence_axis():
    q, k, v = (x[:, :, None] for x in token(2, 3, 48))
    check_step(q, k, v, prior_state(2, 3, 48), what="(B, H, 1, D)")


def test_strided_token_views():
    """Slices of one fused projection output, (B, H, D) views with any strides: read in place."""
    b, h, dv = 4, 6, 64
    y = torch.randn(b, h * (DK + DK + dv) + 8, device="cuda", dtype=torch.bfloat16)
    q, k, v = (x.unflatten(-1, (h, -1)) for x in y[:, 8:].split([h * DK, h * DK, h * dv], dim=-1))
    assert not q.is_contiguous()
    check_step(q, k, v, prior_state(b, h, dv), what="fused projection slices")
    qt = torch.randn(b, DK, h, device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # feature axis strided
    check_step(qt, k, v, prior_state(b, h, dv), what="strided feature axis")


def test_state_slices_of_a_cache():
    """A per-layer slice of a larger cache, and a state view at an offset that breaks 16-byte alignment."""
    b, h, dv = 2, 3, 64
    kv0, k_sum0 = prior_state(b, h, dv)
    cache = torch.zeros(3, b, h, dv, F, device="cuda")
    cache[1].copy_(kv0)
    check_step(*token(b, h, dv), (cache[1], k_sum0.clone()), what="cache layer")
    buf = torch.zeros(kv0.numel() + 1, device="cuda")
    buf[1:].copy_(kv0.flatten())
    check_step(*token(b, h, dv, seed=3), (buf[1:].view_as(kv0), k_sum0.clone()), what="unaligned state")


def test_many_heads():
    check_step(*token(8, 48, 128), prior_state(8, 48, 128, n=8), what="8 x 48 heads")


def test_steps_continue_a_prefill():
    b, h, dv, n, prefill = 2, 4, 112, 160, 100
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).bfloat16() for d in (DK, DK, dv))
    _, state = tk_ops.based(q[:, :, :prefill], k[:, :, :prefill], v[:, :, :prefill], output_final_state=True)
    outs = [tk_ops.based_step(q[:, :, t], k[:, :, t], v[:, :, t], state) for t in range(prefill, n)]
    ref_o, (ref_kv, ref_k_sum) = based_ref(q, k, v, output_final_state=True)
    # The prefill's state carries the chunked kernel's 16-bit key features, and through it every step's output.
    assert_close(torch.stack(outs, dim=2), ref_o[:, :, prefill:], PREFILL_TOL[torch.bfloat16], "steps' o")
    assert_close(state[0], ref_kv, PREFILL_STATE_TOL[torch.bfloat16], "kv")
    assert_close(state[1], ref_k_sum, PREFILL_STATE_TOL[torch.bfloat16], "k_sum")


def test_cuda_graph_decoding_loop():
    """A captured step replayed token after token: the state advances in place at every replay."""
    b, h, dv, n = 2, 4, 64, 12
    g = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=g).bfloat16() for d in (DK, DK, dv))
    state = (torch.zeros(b, h, dv, F, device="cuda"), torch.zeros(b, h, F, device="cuda"))
    q_t, k_t, v_t = q[:, :, 0].clone(), k[:, :, 0].clone(), v[:, :, 0].clone()
    tk_ops.based_step(q_t, k_t, v_t, tuple(x.clone() for x in state))  # warm up outside capture
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        o_t = tk_ops.based_step(q_t, k_t, v_t, state)
    outs = []
    for t in range(n):
        q_t.copy_(q[:, :, t])
        k_t.copy_(k[:, :, t])
        v_t.copy_(v[:, :, t])
        graph.replay()
        outs.append(o_t.clone())
    torch.cuda.synchronize()
    ref_o, (ref_kv, ref_k_sum) = based_ref(q, k, v, output_final_state=True)
    assert_close(torch.stack(outs, dim=2), ref_o, TOL[torch.bfloat16], "o")
    assert_close(state[0], ref_kv, STATE_TOL, "kv")
    assert_close(state[1], ref_k_sum, STATE_TOL, "k_sum")


def test_compiles_fullgraph():
    def decode(q, k, v, kv, k_sum):
        return tk_ops.based_step(q * 1.5, k, v, (kv, k_sum)).float() + 1

    q, k, v = token(2, 3, 64)
    eager_state = prior_state(2, 3, 64)
    compiled_state = tuple(x.clone() for x in eager_state)
    eager = decode(q, k, v, *eager_state)
    compiled = torch.compile(decode, fullgraph=True)(q, k, v, *compiled_state)
    torch.testing.assert_close(compiled, eager)
    for c, e in zip(compiled_state, eager_state):
        torch.testing.assert_close(c, e)


def test_device_errors():
    q, k, v = token(1, 2, 64)
    kv, k_sum = prior_state(1, 2, 64)
    with pytest.raises(DeviceMismatchError, match="state kv is on cpu"):
        tk_ops.based_step(q, k, v, (kv.cpu(), k_sum))
    with pytest.raises(DeviceMismatchError, match="k is on cpu"):
        tk_ops.based_step(q, k.cpu(), v, (kv, k_sum))
