"""tk_ops.based's two algorithms on the GPU: the quadratic kernels (pair weights, as attention; short sequences with no
state in or out) and the chunked ones (the 160-feature state), each forced per call through the testing ops
(tk_ops._testing.based), against the float64 reference and against each other: forward, den, gradients, every value
dimension class, ragged lengths around the 128-row blocks, fp16, scales, strided views, many heads, and where the
public op routes calls with a state. Skipped unless the 'based' family is in the build."""
import pytest
import torch

import tk_ops
from tk_ops._testing.based import ALGORITHMS, based_fwd, gradients
from tk_ops.reference.based import based as based_ref

from ...util import requires_families
from ..util import assert_close, fresh_pool_with_nan
from .test_based import DEN_TOL, STATE_TOL, TOL
from .test_based_bwd import TOL as GRAD_TOL, err as grad_err

pytestmark = requires_families("based")

DK = 16


@pytest.fixture(params=ALGORITHMS)
def algorithm(request):
    """The kernels every call of the test runs on."""
    return request.param


def qkv(b, h, n, dv, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, h, n, d, device="cuda", generator=g).to(dtype) for d in (DK, DK, dv)]


def forward_and_grads(algorithm, q, k, v, normalize=True, scale=None, seed=1):
    d_o = torch.randn(v.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)).to(v.dtype)
    fresh_pool_with_nan(4 * sum(t.numel() for t in (q, k, v)))
    o, grads = gradients(q, k, v, d_o, scale, normalize, algorithm=algorithm)
    torch.cuda.synchronize()
    return o, grads, d_o


def before_cancellation(q, k, v, d_o, scale):
    """The gradients of one token's normalized output without the normalization's own term: the numerator's,
    divided by the denominator. With one token and no state the two terms cancel to eps-sized dq and dk, and this is
    the scale the 16-bit rounding of o (and of dN in the chunked kernels) leaves its residue at."""
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    num = based_ref(*leaves, scale=scale, normalize=False)
    den = based_ref(*(t.double() for t in (q, k)), torch.ones_like(v[..., :1], dtype=torch.float64), scale=scale,
                    normalize=False)
    return torch.autograd.grad(num, leaves, d_o.double() / (den + 1e-6))


def check(algorithm, b, h, n, dv, dtype=torch.bfloat16, normalize=True, scale=None, what=""):
    q, k, v = qkv(b, h, n, dv, dtype)
    o, grads, d_o = forward_and_grads(algorithm, q, k, v, normalize, scale)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    o_ref = based_ref(*ref_leaves, scale=scale, normalize=normalize)
    ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
    floors = before_cancellation(q, k, v, d_o, scale) if normalize and n == 1 else (None, None, None)
    assert o.shape == v.shape and o.dtype == v.dtype, what
    assert_close(o, o_ref.detach(), TOL[dtype], f"{what}: o")
    for name, g, r, leaf, floor in zip(("dq", "dk", "dv"), grads, ref, (q, k, v), floors):
        assert g.shape == leaf.shape and g.dtype == leaf.dtype, f"{what} {name}"
        e = grad_err(g, r, floor)
        assert e <= GRAD_TOL[dtype], f"{what} {name}: relative error {e:.3e} > {GRAD_TOL[dtype]:.1e}"


@pytest.mark.parametrize("dv", [16, 48, 64, 80, 112, 128])
@pytest.mark.parametrize("n", [1, 17, 64, 127, 128, 129, 255, 1000, 1025])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_forward_and_gradients(algorithm, normalize, n, dv):
    # One normalized token and no state: dq and dk cancel to eps-sized values (o = v w / (w + eps)), so they are
    # measured against their size before that cancellation (check).
    check(algorithm, 2, 2, n, dv, normalize=normalize, what=f"{algorithm} normalize={normalize} n={n} dv={dv}")


@pytest.mark.parametrize("dv", [64, 128])
@pytest.mark.parametrize("n", [17, 1000])
def test_fp16(algorithm, n, dv):
    check(algorithm, 2, 2, n, dv, torch.float16, what=f"{algorithm} fp16 n={n} dv={dv}")


@pytest.mark.parametrize("scale", [0.5, -0.3, 0.0])
def test_scale(algorithm, scale):
    check(algorithm, 1, 2, 300, 64, scale=scale, what=f"{algorithm} scale={scale}")


def test_long_sequence(algorithm):
    # The quadratic kernels past their default length: several key tiles per task and many tasks per block.
    check(algorithm, 1, 2, 4097, 64, what=f"{algorithm} n=4097")


def test_many_heads(algorithm):
    # More tasks than SMs: the persistent grid walks several per block, heaviest first.
    check(algorithm, 4, 40, 300, 128, what=f"{algorithm} 4 x 40 heads")


def test_strided_views(algorithm):
    # (B, N, H, D) leaves viewed as (B, H, N, D) are read in place; the gradients come back in the leaves' layout.
    b, n, h, dv = 2, 300, 4, 64
    leaves = [torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for d in (DK, DK, dv)]
    views = [t.transpose(1, 2) for t in leaves]
    d_o = torch.randn_like(views[2])
    o, got = gradients(*views, d_o, algorithm=algorithm)
    ref_leaves = [t.double().requires_grad_() for t in leaves]
    o_ref = based_ref(*(t.transpose(1, 2) for t in ref_leaves))
    ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
    assert_close(o, o_ref.detach(), TOL[torch.bfloat16], f"{algorithm} transposed views: o")
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        g = g.transpose(1, 2)
        assert g.shape == r.shape and g.is_contiguous(), name
        e = grad_err(g, r)
        assert e <= GRAD_TOL[torch.bfloat16], f"{algorithm} transposed views {name}: relative error {e:.3e}"


def test_den_matches_the_reference(algorithm):
    # den (what the backward divides by) from either forward: the sum of the visible pair weights.
    q, k, v = qkv(2, 3, 200, 64)
    _, _, _, den = based_fwd(q, k, v, save_den=True, algorithm=algorithm)
    s = (q.double() @ k.double().transpose(-1, -2)) * DK ** -0.5
    w = (1 + s + s * s / 2).tril()
    # sums of fp32 pair weights (quadratic), with 16-bit state images past the first chunk (chunked)
    assert_close(den, w.sum(-1), DEN_TOL, f"{algorithm} den")


def test_algorithms_agree():
    """The two algorithms on the same inputs: forward and gradients within the 16-bit roundings they make."""
    q, k, v = qkv(2, 4, 700, 64)
    (o1, g1, _), (o2, g2, _) = [forward_and_grads(algorithm, q, k, v) for algorithm in ("quadratic", "chunked")]
    assert_close(o1, o2.double(), TOL[torch.bfloat16], "o of the two algorithms")
    for name, a, b in zip(("dq", "dk", "dv"), g1, g2):
        assert grad_err(a, b) <= GRAD_TOL[torch.bfloat16], name


def test_states_take_the_chunked_kernels():
    # A sequence short enough for the quadratic kernels, with a state in and out, must still be exact: the quadratic
    # form has no state, so the public op routes such calls to the chunked kernels; forced, the quadratic kernels
    # refuse them.
    q, k, v = qkv(2, 2, 200, 64)
    pre = qkv(2, 2, 50, 64, seed=5)
    _, state = based_ref(*[t.double() for t in pre], output_final_state=True)
    state = tuple(s.float() for s in state)
    o, (kv, k_sum) = tk_ops.based(q, k, v, initial_state=state, output_final_state=True)
    ref_o, (ref_kv, ref_k_sum) = based_ref(q, k, v, initial_state=state, output_final_state=True)
    for name, got, ref, tol in (("o", o, ref_o, TOL[torch.bfloat16]), ("kv", kv, ref_kv, STATE_TOL[torch.bfloat16]),
                                ("k_sum", k_sum, ref_k_sum, STATE_TOL[torch.bfloat16])):
        assert_close(got, ref, tol, name)
    with pytest.raises(ValueError, match="quadratic.* takes no state"):
        based_fwd(q, k, v, kv0=state[0], k_sum0=state[1], algorithm="quadratic")
