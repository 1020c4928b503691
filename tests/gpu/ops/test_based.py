"""tk_ops.based (Based linear attention, causal forward) against the float64 reference on the GPU: every class of value
dimension (16, 48, 64, 112, 128), normalised and not, ragged and empty sequences, with and without an initial state,
the final state, chunked prefill followed by decoding steps against one pass, fp16, scales, strided views and views
that must be copied, torch.compile, CUDA graphs and the op's device errors (the argument rules themselves are tested
on the CPU, tests/cpu/test_based_api.py; the gradients in test_based_bwd.py). Skipped unless the 'based' family is in
the build."""
import pytest
import torch

import tk_ops
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError
from tk_ops.reference.based import based as based_ref, based_step as based_step_ref

from ...util import requires_families
from ..util import TOL as ROUNDING, assert_close, fresh_pool_with_nan

# The output, by the inputs' dtype: the kernels round the pair weights W, the query features and the state's images to
# that dtype before their products and o once more (3.5e-3 measured for bf16 against float64; fp16's unit roundoff is
# 8x smaller).
TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
# The final state (float32): sums of v phi(k) whose quadratic features k_a k_b are each rounded once to the inputs'
# dtype (a model of that: 1.6e-3 for bf16, 2e-4 for fp16); everything else in it is fp32 arithmetic.
STATE_TOL = {dtype: ROUNDING[dtype] for dtype in (torch.bfloat16, torch.float16)}
# den (float32): sums of fp32 pair weights, plus 16-bit query features against the state's 16-bit image.
DEN_TOL = 3e-3
DK = 16
F = 273


pytestmark = requires_families("based")


def qkv(b, h, n, dv, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, h, n, DK, device="cuda", generator=g).to(dtype)
    k = torch.randn(b, h, n, DK, device="cuda", generator=g).to(dtype)
    v = torch.randn(b, h, n, dv, device="cuda", generator=g).to(dtype)
    return q, k, v


def prior_state(b, h, dv, n=37, seed=100):
    """A state that some earlier tokens left (the reference's, float32): what a continued sequence starts from."""
    q, k, v = qkv(b, h, n, dv, seed=seed)
    _, (kv, k_sum) = based_ref(q, k, v, output_final_state=True)
    return kv.float(), k_sum.float()


def check(q, k, v, normalize=True, scale=None, eps=1e-6, state=None, what=""):
    """Runs tk_ops.based with the final state out and compares o, kv and k_sum with the reference, each row too."""
    b, h, n, dv = v.shape
    fresh_pool_with_nan(b * h * (n * dv + dv * F + F + n))
    o, (kv, k_sum) = tk_ops.based(q, k, v, scale, normalize, eps, initial_state=state, output_final_state=True)
    torch.cuda.synchronize()
    ref_o, (ref_kv, ref_k_sum) = based_ref(q, k, v, scale, normalize, eps, initial_state=state,
                                           output_final_state=True)
    assert o.dtype == v.dtype and o.shape == v.shape, what
    assert kv.dtype == k_sum.dtype == torch.float32 and kv.shape == (b, h, dv, F) and k_sum.shape == (b, h, F), what
    assert kv.is_contiguous() and k_sum.is_contiguous(), what
    for name, got, ref, tol in (("o", o, ref_o, TOL[v.dtype]), ("kv", kv, ref_kv, STATE_TOL[v.dtype]),
                                ("k_sum", k_sum, ref_k_sum, STATE_TOL[v.dtype])):
        if ref.numel():
            assert_close(got, ref, tol, f"{what}: {name}")
    return o, (kv, k_sum)


VALUE_DIMS = [16, 48, 64, 112, 128]
SEQ_LENS = [0, 1, 17, 64, 1000, 4097]


@pytest.mark.parametrize("with_state", [False, True], ids=["fresh", "continued"])
@pytest.mark.parametrize("n", SEQ_LENS)
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
@pytest.mark.parametrize("dv", VALUE_DIMS)
def test_forward(dv, normalize, n, with_state):
    b, h = (2, 3) if n < 4096 else (1, 2)
    state = prior_state(b, h, dv) if with_state else None
    check(*qkv(b, h, n, dv), normalize, state=state, what=f"dv={dv} normalize={normalize} n={n} state={with_state}")


@pytest.mark.parametrize("with_state", [False, True], ids=["fresh", "continued"])
@pytest.mark.parametrize("n", [17, 1000])
@pytest.mark.parametrize("dv", [64, 128])
def test_fp16(dv, n, with_state):
    state = prior_state(2, 2, dv) if with_state else None
    check(*qkv(2, 2, n, dv, torch.float16), True, state=state, what=f"fp16 dv={dv} n={n}")


def test_output_only_by_default():
    q, k, v = qkv(1, 2, 50, 64)
    o = tk_ops.based(q, k, v)
    assert isinstance(o, torch.Tensor)
    assert_close(o, based_ref(q, k, v), TOL[torch.bfloat16], "o")


@pytest.mark.parametrize("with_state", [False, True], ids=["fresh", "continued"])
def test_empty_sequence_returns_the_initial_state(with_state):
    q, k, v = qkv(2, 3, 0, 48)
    state = prior_state(2, 3, 48) if with_state else None
    o, (kv, k_sum) = tk_ops.based(q, k, v, initial_state=state, output_final_state=True)
    assert o.shape == (2, 3, 0, 48)
    if with_state:
        assert torch.equal(kv, state[0]) and torch.equal(k_sum, state[1])
        assert kv.data_ptr() != state[0].data_ptr(), "the final state is a new tensor"
    else:
        assert (kv == 0).all() and (k_sum == 0).all() and kv.shape == (2, 3, 48, F)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 300, 1500])
@pytest.mark.parametrize("dv", [48, 128])
def test_initial_state_without_final_state(dv, n, dtype):
    """A continued sequence whose final state is not asked for: o alone comes back, it sees the initial state, the op
    returns no state (empty outputs) and leaves the initial one as it was."""
    b, h = 2, 3
    q, k, v = qkv(b, h, n, dv, dtype)
    kv0, k_sum0 = prior_state(b, h, dv)
    before = kv0.clone(), k_sum0.clone()
    fresh_pool_with_nan(b * h * n * dv)
    o = tk_ops.based(q, k, v, initial_state=(kv0, k_sum0))
    torch.cuda.synchronize()
    assert isinstance(o, torch.Tensor) and o.shape == v.shape and o.dtype == dtype
    assert_close(o, based_ref(q, k, v, initial_state=(kv0, k_sum0)), TOL[dtype], f"o dv={dv} n={n} {dtype}")
    assert torch.equal(kv0, before[0]) and torch.equal(k_sum0, before[1]), "the initial state must not change"
    o_op, kv, k_sum, _ = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, kv0, k_sum0, False, False)
    assert kv.shape == k_sum.shape == (0,)
    assert torch.equal(o_op, o)


@pytest.mark.parametrize("dv", [16, 64, 112])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_chunked_prefill_then_steps_equal_one_pass(dv, normalize):
    """Three prefill chunks of ragged lengths, each continuing from the last one's state, then decoding steps:
    the outputs and the final state are those of one pass over the whole sequence."""
    b, h, n = 2, 3, 300
    q, k, v = qkv(b, h, n, dv)
    cuts = [0, 100, 229, 280]
    outs, state = [], None
    for start, end in zip(cuts, cuts[1:]):
        o, state = tk_ops.based(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], normalize=normalize,
                                initial_state=state, output_final_state=True)
        outs.append(o)
    for t in range(cuts[-1], n):
        outs.append(tk_ops.based_step(q[:, :, t], k[:, :, t], v[:, :, t], state, normalize=normalize)[:, :, None])
    torch.cuda.synchronize()
    ref_o, (ref_kv, ref_k_sum) = based_ref(q, k, v, normalize=normalize, output_final_state=True)
    got = torch.cat(outs, dim=2)
    assert_close(got, ref_o, TOL[torch.bfloat16], "o")
    assert_close(state[0], ref_kv, STATE_TOL[torch.bfloat16], "kv")
    assert_close(state[1], ref_k_sum, STATE_TOL[torch.bfloat16], "k_sum")
    # the steps' outputs alone (where an error in the state handover would show most)
    assert_close(got[:, :, cuts[-1]:], ref_o[:, :, cuts[-1]:], TOL[torch.bfloat16], "the steps' o")


def test_state_continues_across_calls_of_one_token():
    """N = 1 calls chained through the state equal the decoding step of the reference."""
    q, k, v = qkv(2, 2, 5, 64)
    state = prior_state(2, 2, 64)
    ref_state = tuple(x.double().clone() for x in state)
    for t in range(5):
        o, state = tk_ops.based(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], initial_state=state,
                                output_final_state=True)
        ref = based_step_ref(q[:, :, t], k[:, :, t], v[:, :, t], ref_state)
        assert_close(o[:, :, 0], ref, TOL[torch.bfloat16], f"token {t}")
    assert_close(state[0], ref_state[0], STATE_TOL[torch.bfloat16], "kv")
    assert_close(state[1], ref_state[1], STATE_TOL[torch.bfloat16], "k_sum")


@pytest.mark.parametrize("scale", [0.5, -0.3, 0.0])
def test_scale(scale):
    # The state holds phi of the unscaled keys: the same with any scale.
    check(*qkv(1, 2, 200, 64), True, scale=scale, state=prior_state(1, 2, 64), what=f"scale={scale}")


def test_eps():
    check(*qkv(1, 2, 100, 64), True, eps=0.5, what="eps=0.5")


def test_many_heads():
    # More (batch, head) tasks than SMs: the persistent grid walks several per block.
    check(*qkv(4, 48, 130, 64), True, state=prior_state(4, 48, 64), what="4 x 48 heads")


def test_transposed_views_are_read_in_place():
    # (B, N, H, D) tensors viewed as (B, H, N, D), as a fused projection gives them; o takes v's memory order.
    b, n, h = 2, 300, 4
    y = torch.randn(b, n, h * (DK + DK + 64), device="cuda", dtype=torch.bfloat16)
    q, k, v = (x.unflatten(-1, (h, -1)).transpose(1, 2) for x in y.split([h * DK, h * DK, h * 64], dim=-1))
    o, _ = check(q, k, v, True, state=prior_state(b, h, 64), what="transposed views")
    assert o.stride() == (n * h * 64, 64, h * 64, 1), "the output takes v's memory order"
    assert o.transpose(1, 2).reshape(b, n, h * 64)._base is not None


def test_views_that_must_be_copied():
    """A feature dimension with stride 2, a base that breaks 16-byte alignment and an initial state at an odd offset
    are copied first, never misread."""
    q = torch.randn(2, 3, 90, 2 * DK, device="cuda").bfloat16()[..., ::2]
    big = torch.randn(2 * 3 * 90 * DK + 3, device="cuda").bfloat16()
    k = big[3:].view(2, 3, 90, DK)
    v = torch.randn(2, 3, 90, 48, device="cuda").bfloat16()
    kv0, k_sum0 = prior_state(2, 3, 48)
    kv_buf = torch.empty(kv0.numel() + 1, device="cuda")
    kv_buf[1:].copy_(kv0.flatten())
    state = (kv_buf[1:].view_as(kv0), k_sum0)
    check(q, k, v, True, state=state, what="copied views")


def test_outputs_not_asked_for_are_empty():
    q, k, v = qkv(1, 2, 30, 64)
    o, kv, k_sum, den = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, None, None, False, False)
    assert kv.shape == k_sum.shape == den.shape == (0,)
    o2, kv, k_sum, den = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, None, None, True, True)
    # Without a state out, a short sequence runs on the quadratic kernels, with it on the chunked ones: the two
    # round differently (test_based_quadratic.py holds each to the reference).
    assert_close(o2, o.double(), TOL[torch.bfloat16], "o with and without the state out")
    assert den.shape == (1, 2, 30) and kv.shape == (1, 2, 64, F) and k_sum.shape == (1, 2, F)


def test_den_is_the_normaliser():
    """den (what the backward divides by) is the reference's den_i, without eps."""
    q, k, v = qkv(2, 2, 150, 64)
    state = prior_state(2, 2, 64)
    _, _, _, den = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, *state, False, True)
    ones = torch.ones(2, 2, 150, 16, device="cuda", dtype=torch.float64)
    # With v = 1 the unnormalised output is den itself (the state's kv then carries k_sum in every row).
    ref = based_ref(q, k, ones, normalize=False,
                    initial_state=(state[1][:, :, None, :].expand(2, 2, 16, F), state[1]))[..., 0]
    assert_close(den, ref, DEN_TOL, "den")


def test_compiles_fullgraph():
    class Block(torch.nn.Module):
        def forward(self, q, k, v, kv0, k_sum0):
            o, (kv, k_sum) = tk_ops.based(q * 2, k, v, initial_state=(kv0, k_sum0), output_final_state=True)
            return o.float().sum(-1), kv, k_sum

    q, k, v = qkv(2, 4, 333, 64)
    state = prior_state(2, 4, 64)
    eager = Block()(q, k, v, *state)
    compiled = torch.compile(Block(), fullgraph=True)(q, k, v, *state)
    for c, e in zip(compiled, eager):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-4)


def test_cuda_graph_capture():
    q, k, v = qkv(2, 4, 1000, 64, torch.float16)
    kv0, k_sum0 = prior_state(2, 4, 64)
    tk_ops.based(q, k, v, initial_state=(kv0, k_sum0), output_final_state=True)  # warm up outside capture
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        o, (kv, k_sum) = tk_ops.based(q, k, v, initial_state=(kv0, k_sum0), output_final_state=True)
    q.copy_(torch.randn_like(q))
    new_kv0, new_k_sum0 = prior_state(2, 4, 64, seed=7)
    kv0.copy_(new_kv0)
    k_sum0.copy_(new_k_sum0)
    graph.replay()
    torch.cuda.synchronize()
    ref_o, (ref_kv, ref_k_sum) = based_ref(q, k, v, initial_state=(kv0, k_sum0), output_final_state=True)
    assert_close(o, ref_o, TOL[torch.float16], "o")
    assert_close(kv, ref_kv, STATE_TOL[torch.float16], "kv")
    assert_close(k_sum, ref_k_sum, STATE_TOL[torch.float16], "k_sum")


def test_errors():
    """The rules (tested one by one on the CPU) hold for CUDA tensors too, before any kernel runs."""
    q, k, v = qkv(1, 2, 32, 64)
    kv0, k_sum0 = prior_state(1, 2, 64)
    with pytest.raises(DTypeError, match="bfloat16 or float16"):
        tk_ops.based(q.float(), k.float(), v.float())
    with pytest.raises(InputError, match="feature dimension"):
        tk_ops.based(q[..., :8], k[..., :8], v)
    with pytest.raises(InputError, match=r"initial_state kv must be \(B, H, Dv, 273\)"):
        tk_ops.based(q, k, v, initial_state=(kv0[:, :, :32], k_sum0))
    with pytest.raises(DTypeError, match="initial_state k_sum must be float32"):
        tk_ops.based(q, k, v, initial_state=(kv0, k_sum0.double()))
    with pytest.raises(DeviceMismatchError, match="initial_state kv is on cpu"):
        tk_ops.based(q, k, v, initial_state=(kv0.cpu(), k_sum0))
    with pytest.raises(DeviceMismatchError, match="v is on cpu"):
        tk_ops.based(q, k, v.cpu())
    with pytest.raises(InputError, match="initial_state kv must be contiguous"):
        tk_ops.based(q, k, v, initial_state=(kv0.transpose(2, 3).contiguous().transpose(2, 3), k_sum0))
    with pytest.raises(InputError, match="value dimension"):
        tk_ops.based(q, k, v[..., :40])
