"""The Based backward (tk_ops.based through autograd) against float64 reference gradients on the GPU: dq, dk, dv and
the initial state's (kv0, k_sum0), from the output's gradient and the final state's (and from either alone: an initial
state without a final state, a final state with the output unused), normalized and not, eps, ragged lengths, every
value dimension class (one task per (batch, head) up to 64, two value splits above), bf16 and fp16. Skipped unless
the 'based' family is in the build."""
import pytest
import torch

import tk_ops
from tk_ops.reference.based import based as based_ref

from ...util import requires_families
from ..util import fresh_pool_with_nan

# ||grad - ref|| / ||ref||: the backward rounds to 16 bits once more than the forward (dS, W and dN go to 16 bits
# before their products, and the states' images are 16-bit), in the inputs' dtype: a model of those roundings gives
# 0.6-6e-3 for bf16 (docs/based.md), and fp16's unit roundoff is 8x smaller (a model of the quadratic kernels: 2.5-3e-3
# for bf16, 0.3-0.4e-3 for fp16).
TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}
# The denominator is floored at this RMS per element: with one token and normalization, dq and dk are eps-sized in
# exact arithmetic (o = v w / (w + eps)), and what the kernel leaves there is fp32 cancellation, not an error.
RMS_FLOOR = 1e-4
DK = 16
GRADS = ("dq", "dk", "dv", "d_kv0", "d_k_sum0")


pytestmark = requires_families("based")


def err(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """||got - ref|| over ||ref||, floored at RMS_FLOOR per element and at ||scale|| where given (the size the
    gradient has before a cancellation that leaves ref itself near zero)."""
    got64, ref64 = got.double(), ref.double()
    if not torch.isfinite(got64).all():
        return float("inf")
    floor = max(RMS_FLOOR * ref64.numel() ** 0.5, 0.0 if scale is None else scale.double().norm().item())
    return (got64 - ref64).norm().item() / max(ref64.norm().item(), floor)


def inputs(b, h, n, dv, dtype, initial):
    q = torch.randn(b, h, n, DK, device="cuda").to(dtype)
    k = torch.randn(b, h, n, DK, device="cuda").to(dtype)
    v = torch.randn(b, h, n, dv, device="cuda").to(dtype)
    state = None
    if initial:
        # The state after a 100-token prefix: positive denominators and realistic magnitudes, as a model sees them.
        pre = [torch.randn(b, h, 100, d, device="cuda", dtype=torch.float64) for d in (DK, DK, dv)]
        _, (kv0, k_sum0) = based_ref(*pre, output_final_state=True)
        state = (kv0.float(), k_sum0.float())
    return q, k, v, state


def check(b, h, n, dv, dtype, normalize, initial, final, scale=None, eps=1e-6, use_o=True, what=""):
    """Gradients of every leaf from o (unless not use_o: the output is computed and left unused) and, with `final`,
    from the final state, which is only asked for then (output_final_state=final)."""
    q, k, v, state = inputs(b, h, n, dv, dtype, initial)
    leaves = [q, k, v] + (list(state) if state else [])
    for t in leaves:
        t.requires_grad_()
    result = tk_ops.based(q, k, v, scale=scale, normalize=normalize, eps=eps, initial_state=state,
                          output_final_state=final)
    o, (kv, k_sum) = result if final else (result, (None, None))
    outs, grads_out = ([o], [torch.randn_like(o)]) if use_o else ([], [])
    if final:  # scaled like the output's gradient per element of the state it reaches
        outs += [kv, k_sum]
        grads_out += [torch.randn_like(kv) / max(n, 1) ** 0.5, torch.randn_like(k_sum) / max(n, 1) ** 0.5]
    fresh_pool_with_nan(2 * sum(t.numel() for t in leaves))
    got = torch.autograd.grad(outs, leaves, grads_out, allow_unused=True)
    torch.cuda.synchronize()

    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref_state = tuple(ref_leaves[3:]) if state else None
    o_ref, (kv_ref, k_sum_ref) = based_ref(*ref_leaves[:3], scale=scale, normalize=normalize, eps=eps,
                                           initial_state=ref_state, output_final_state=True)
    ref_outs = ([o_ref] if use_o else []) + ([kv_ref, k_sum_ref] if final else [])
    ref = torch.autograd.grad(ref_outs, ref_leaves, [g.double() for g in grads_out], allow_unused=True)

    for name, leaf, g, r in zip(GRADS, leaves, got, ref):
        r = torch.zeros_like(leaf, dtype=torch.float64) if r is None else r
        if g is None:  # unnormalized, k_sum0 reaches nothing but the final state; q nothing but o
            assert not r.any(), f"{what} {name}: no gradient"
            continue
        if not r.any():  # a leaf the used outputs do not depend on: its gradient, if any, is exactly zero
            assert g.shape == leaf.shape and not g.any(), f"{what} {name}: nonzero gradient where none flows"
            continue
        assert g.shape == leaf.shape and g.dtype == leaf.dtype, f"{what} {name}: {tuple(g.shape)} {g.dtype}"
        e = err(g, r)
        assert e <= TOL[dtype], f"{what} {name}: relative error {e:.3e} > {TOL[dtype]:.1e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("dv", [16, 64, 112, 128])
@pytest.mark.parametrize("n", [1, 17, 64, 1000, 4097])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_gradients_with_state(normalize, n, dv, dtype):
    """Initial state in, the final state's gradient in: every gradient of the op."""
    b, h = (2, 2) if n < 4096 else (1, 2)
    check(b, h, n, dv, dtype, normalize, True, True, what=f"normalize={normalize} n={n} dv={dv} {dtype}")


@pytest.mark.parametrize("initial,final", [(False, False), (True, False), (False, True)],
                         ids=["plain", "initial", "final"])
@pytest.mark.parametrize("dv", [32, 48, 64, 128])
@pytest.mark.parametrize("n", [17, 1000])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_gradients(normalize, n, dv, initial, final):
    check(2, 2, n, dv, torch.bfloat16, normalize, initial, final,
          what=f"normalize={normalize} n={n} dv={dv} initial={initial} final={final}")


@pytest.mark.parametrize("n", [63, 64, 65, 127, 128, 129, 255, 256, 384])
@pytest.mark.parametrize("dv", [16, 64, 128])
def test_chunk_edges(n, dv):
    """Lengths around the passes' chunks of 128 tokens and their halves of 64 (each half one consumer's rows)."""
    check(2, 2, n, dv, torch.bfloat16, True, True, True, what=f"n={n} dv={dv}")


@pytest.mark.parametrize("scale", [0.5, -0.3, 0.0])
def test_scale(scale):
    check(1, 2, 200, 64, torch.bfloat16, True, True, True, scale=scale, what=f"scale={scale}")


def test_many_heads():
    # More (batch, head, value split) tasks than SMs: the persistent grid walks several per block.
    check(4, 40, 130, 128, torch.bfloat16, True, True, True, what="4 x 40 heads")


def test_strided_views():
    # (B, N, H, D) leaves viewed as (B, H, N, D): read in place, gradients in the leaves' own layout.
    b, n, h, dv = 2, 300, 4, 64
    leaves = [torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for d in (DK, DK, dv)]
    q, k, v = (t.transpose(1, 2) for t in leaves)
    o = tk_ops.based(q, k, v)
    d_o = torch.randn_like(o)
    got = torch.autograd.grad(o, leaves, d_o)
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    o_ref = based_ref(*(t.transpose(1, 2) for t in ref_leaves))
    ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
    for name, g, r in zip(GRADS, got, ref):
        assert g.shape == r.shape, name
        e = err(g, r)
        assert e <= TOL[torch.bfloat16], f"transposed views {name}: relative error {e:.3e}"


def test_empty_sequence():
    # No token: the initial state's gradient is the final state's.
    q, k, v, state = inputs(1, 2, 0, 64, torch.bfloat16, True)
    for t in state:
        t.requires_grad_()
    _, (kv, k_sum) = tk_ops.based(q, k, v, initial_state=state, output_final_state=True)
    g_kv, g_sum = torch.randn_like(kv), torch.randn_like(k_sum)
    d_kv0, d_k_sum0 = torch.autograd.grad([kv, k_sum], list(state), [g_kv, g_sum])
    assert torch.equal(d_kv0, g_kv) and torch.equal(d_k_sum0, g_sum)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 17, 300, 1500])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_initial_state_without_final_state(normalize, n, dtype):
    """A continued sequence whose final state is not asked for: the forward writes no state and the backward gets no
    state gradient, yet q, k, v and the initial state all get theirs from o."""
    check(2, 2, n, 64, dtype, normalize, True, False, what=f"initial only normalize={normalize} n={n} {dtype}")


@pytest.mark.parametrize("initial", [False, True], ids=["fresh", "continued"])
@pytest.mark.parametrize("n", [17, 300])
def test_final_state_alone(n, initial):
    """The output computed and left unused, the final state's gradient alone: dq is exactly zero (q reaches only o),
    k, v and the initial state get theirs from the state."""
    check(2, 2, n, 64, torch.bfloat16, True, initial, True, use_o=False, what=f"state only n={n} initial={initial}")


# eps = 64 moves 1 / (den_i + eps) by about 30% even after the initial state's 100-token prefix (den_i ~ 150 + 1.5 i),
# far past the tolerance where the backward used another eps than the forward's (with eps = 4 a wrong eps in the
# chunked backward stayed under the bf16 bound); eps = 0 divides by den itself.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("initial,final", [(False, False), (True, True), (True, False)],
                         ids=["plain", "initial_final", "initial"])
@pytest.mark.parametrize("eps", [0.0, 64.0])
def test_eps(eps, initial, final, dtype):
    # Without a state, 200 tokens run on the quadratic kernels; with one, on the chunked kernels.
    check(2, 2, 200, 64, dtype, True, initial, final, eps=eps, what=f"eps={eps} initial={initial} final={final}")
