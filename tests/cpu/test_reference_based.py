"""The float64 reference of Based linear attention (tk_ops/reference/based.py), checked on CPU: its two forms agree,
the feature map gives the Taylor inner product, the scale convention is flash-linear-attention's (queries only),
the recurrent state chains calls and decoding steps into one pass, empty sequences, gradients, and a plain loop
over scalars that shares no code with either form."""
import math

import pytest
import torch

from tk_ops.reference.based import based, based_step, feature_map, feature_size


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These shapes are far too small to split across threads; on a loaded 2-core machine two threads per op made
    the recurrent form many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def inputs(b, h, n, dk, dv, seed=0):
    return rand(b, h, n, dk, seed=seed), rand(b, h, n, dk, seed=seed + 1), rand(b, h, n, dv, seed=seed + 2)


def rel(out, ref):
    return ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def assert_close(out, ref, tol=1e-10):
    assert out.dtype == torch.float64 and out.shape == ref.shape
    assert torch.isfinite(out).all()
    assert rel(out, ref) <= tol, rel(out, ref)


def state_of(q, k, v):
    """The state a real prefix leaves: a valid initial state (its denominators stay positive)."""
    return based(q, k, v, output_final_state=True)[1]


@pytest.mark.parametrize("n", [1, 17, 64])
@pytest.mark.parametrize("dv", [16, 64, 112])
@pytest.mark.parametrize("dk", [8, 16])
@pytest.mark.parametrize("normalize", [True, False])
def test_quadratic_and_recurrent_forms_agree(normalize, dk, dv, n):
    q, k, v = inputs(2, 2, n, dk, dv, seed=n + dv + dk)
    oq, (kvq, ksq) = based(q, k, v, normalize=normalize, output_final_state=True, form="quadratic")
    orec, (kvr, ksr) = based(q, k, v, normalize=normalize, output_final_state=True, form="recurrent")
    assert oq.shape == (2, 2, n, dv)
    assert kvq.shape == (2, 2, dv, feature_size(dk)) and ksq.shape == (2, 2, feature_size(dk))
    assert_close(orec, oq)
    assert_close(kvr, kvq)
    assert_close(ksr, ksq)
    # Without an initial state each denominator counts (i + 1) keys of weight >= 1/2: its 0th-order part is exact.
    assert torch.allclose(ksq[..., 0], torch.full_like(ksq[..., 0], n))


@pytest.mark.parametrize("dk", [8, 16])
@pytest.mark.parametrize("normalize", [True, False])
def test_forms_agree_from_an_initial_state(normalize, dk):
    state = state_of(*inputs(1, 3, 9, dk, 32, seed=5))
    q, k, v = inputs(1, 3, 13, dk, 32, seed=7)
    oq, (kvq, ksq) = based(q, k, v, normalize=normalize, initial_state=state, output_final_state=True)
    orec, (kvr, ksr) = based(q, k, v, normalize=normalize, initial_state=state, output_final_state=True,
                             form="recurrent")
    assert_close(orec, oq)
    assert_close(kvr, kvq)
    assert_close(ksr, ksq)


@pytest.mark.parametrize("dk", [8, 16])
def test_feature_map_gives_the_taylor_inner_product(dk):
    scale = dk ** -0.5
    q, k = rand(40, dk, seed=1), rand(30, dk, seed=2)
    phi_q, phi_k = feature_map(q, scale), feature_map(k)
    assert phi_q.shape == (40, 1 + dk + dk * dk) and feature_size(16) == 273
    s = scale * (q @ k.T)
    assert_close(phi_q @ phi_k.T, 1 + s + s * s / 2, tol=1e-13)
    # Layout [1, x, x_a x_b / sqrt(2) at 1 + dk + a*dk + b], which the kernels' state must share.
    x = scale * q[3]
    a, b = 2, dk - 1
    assert phi_q[3, 0] == 1
    assert torch.equal(phi_q[3, 1:1 + dk], x)
    assert math.isclose(phi_q[3, 1 + dk + a * dk + b].item(), (x[a] * x[b]).item() / math.sqrt(2), rel_tol=1e-14)


def test_scale_multiplies_the_queries_only():
    q, k, v = inputs(1, 2, 12, 16, 16, seed=3)
    c = 0.37
    o, (kv, ks) = based(q, k, v, scale=c, output_final_state=True)
    assert_close(o, based(c * q, k, v, scale=1.0), tol=1e-12)
    # The state holds phi of the unscaled keys: the scale does not reach it.
    _, (kv2, ks2) = based(q, k, v, scale=0.9, output_final_state=True)
    assert torch.equal(kv, kv2) and torch.equal(ks, ks2)
    # Scaling keys as well (s = scale^2 q.k) is a different op, so the check above can fail.
    assert rel(based(c * q, c * k, v, scale=1.0), o) > 1e-3
    # Default scale is Dk^-1/2.
    assert torch.equal(based(q, k, v), based(q, k, v, scale=16 ** -0.5))


def test_normalize_divides_the_numerator_by_the_weight_sum_plus_eps():
    q, k, v = inputs(2, 2, 15, 8, 16, seed=11)
    ones = torch.ones_like(v[..., :1])
    # A column of ones among the values makes the numerator carry the denominator.
    num = based(q, k, torch.cat([v, ones], -1), normalize=False)
    den = num[..., -1:]
    assert (den >= (torch.arange(15, dtype=torch.float64)[:, None] + 1) / 2).all()
    for eps in (1e-6, 0.5):
        assert_close(based(q, k, v, eps=eps), num[..., :-1] / (den + eps), tol=1e-13)


@pytest.mark.parametrize("normalize", [True, False])
def test_chunked_prefill_and_steps_equal_one_pass(normalize):
    b, h, dk, dv, n = 2, 2, 16, 24, 23
    q, k, v = inputs(b, h, n, dk, dv, seed=21)
    full, (kv_full, ks_full) = based(q, k, v, normalize=normalize, output_final_state=True)
    o1, state = based(q[:, :, :10], k[:, :, :10], v[:, :, :10], normalize=normalize, output_final_state=True)
    o2, state = based(q[:, :, 10:18], k[:, :, 10:18], v[:, :, 10:18], normalize=normalize, initial_state=state,
                      output_final_state=True)
    kv, ks = state
    steps = [based_step(q[:, :, t], k[:, :, t], v[:, :, t], (kv, ks), normalize=normalize) for t in range(18, n)]
    assert all(o.shape == (b, h, dv) for o in steps)
    assert_close(torch.cat([o1, o2, torch.stack(steps, dim=2)], dim=2), full)
    # The steps updated the state tensors themselves.
    assert_close(kv, kv_full)
    assert_close(ks, ks_full)


def test_step_stores_into_a_float32_state():
    q, k, v = inputs(1, 2, 6, 16, 16, seed=4)
    kv64, ks64 = state_of(q[:, :, :5], k[:, :, :5], v[:, :, :5])
    kv, ks = kv64.float(), ks64.float()
    ptr = kv.data_ptr()
    o = based_step(q[:, :, 5], k[:, :, 5], v[:, :, 5], (kv, ks))
    _, (kv_ref, ks_ref) = based(q, k, v, output_final_state=True)
    assert kv.dtype == torch.float32 and kv.data_ptr() == ptr
    assert_close(kv.double(), kv_ref, tol=1e-6)
    assert_close(ks.double(), ks_ref, tol=1e-6)
    assert_close(o, based(q, k, v)[:, :, 5], tol=1e-6)


def test_initial_state_continues_a_prefix():
    q, k, v = inputs(1, 2, 30, 16, 16, seed=31)
    full, (kv_full, ks_full) = based(q, k, v, output_final_state=True)
    state = state_of(q[:, :, :12], k[:, :, :12], v[:, :, :12])
    rest, (kv, ks) = based(q[:, :, 12:], k[:, :, 12:], v[:, :, 12:], initial_state=state, output_final_state=True)
    assert_close(rest, full[:, :, 12:])
    assert_close(kv, kv_full)
    assert_close(ks, ks_full)
    # A zero state is no state; a float32 state is read as given.
    zeros = tuple(torch.zeros_like(t) for t in state)
    assert torch.equal(based(q, k, v, initial_state=zeros), full)
    assert_close(based(q[:, :, 12:], k[:, :, 12:], v[:, :, 12:], initial_state=tuple(t.float() for t in state)),
                 rest, tol=1e-6)


def test_initial_state_adds_to_every_numerator_and_denominator():
    b, h, n, dk, dv = 1, 2, 9, 8, 16
    q, k, v = inputs(b, h, n, dk, dv, seed=41)
    f = feature_size(dk)
    kv0, ks0 = rand(b, h, dv, f, seed=42), rand(b, h, f, seed=43).abs() + 1  # not from tokens, any values
    phi_q = feature_map(q, dk ** -0.5)
    num = based(q, k, torch.cat([v, torch.ones_like(v[..., :1])], -1), normalize=False)
    num_state = num[..., :-1] + phi_q @ kv0.transpose(-1, -2)
    den_state = num[..., -1:] + phi_q @ ks0[..., :, None]
    assert_close(based(q, k, v, normalize=False, initial_state=(kv0, ks0)), num_state, tol=1e-13)
    assert_close(based(q, k, v, initial_state=(kv0, ks0)), num_state / (den_state + 1e-6), tol=1e-13)


@pytest.mark.parametrize("form", ["quadratic", "recurrent"])
def test_empty_sequence(form):
    q, k, v = inputs(2, 3, 0, 16, 64)
    o, (kv, ks) = based(q, k, v, output_final_state=True, form=form)
    assert o.shape == (2, 3, 0, 64) and o.dtype == torch.float64
    assert kv.shape == (2, 3, 64, 273) and not kv.any() and ks.shape == (2, 3, 273) and not ks.any()
    state = state_of(*inputs(2, 3, 4, 16, 64, seed=9))
    o, (kv, ks) = based(q, k, v, initial_state=state, output_final_state=True, form=form)
    assert o.shape == (2, 3, 0, 64)
    assert torch.equal(kv, state[0]) and torch.equal(ks, state[1])


@pytest.mark.parametrize("form,normalize", [("quadratic", True), ("quadratic", False), ("recurrent", True)])
def test_gradients(form, normalize):
    b, h, n, dk, dv = 1, 2, 5, 4, 3
    q, k, v = (t.requires_grad_() for t in inputs(b, h, n, dk, dv, seed=51))
    kv0, ks0 = (t.detach().requires_grad_() for t in state_of(*inputs(b, h, 3, dk, dv, seed=52)))

    def run(q, k, v, kv0, ks0):
        o, (kv, ks) = based(q, k, v, normalize=normalize, initial_state=(kv0, ks0), output_final_state=True,
                            form=form)
        return o, kv, ks

    assert torch.autograd.gradcheck(run, (q, k, v, kv0, ks0))
    # Every input reaches the output (a gradient that is silently zero would pass gradcheck too).
    o = run(q, k, v, kv0, ks0)[0]
    grads = torch.autograd.grad(o.square().sum(), (q, k, v, kv0, ks0), allow_unused=True)
    assert all(g.abs().sum() > 0 for g in grads[:4])
    # k_sum0 only enters the denominator.
    assert (grads[4] is not None and grads[4].abs().sum() > 0) if normalize else grads[4] is None


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_a_plain_loop_over_scalars(normalize, with_state):
    b, h, n, dk, dv = 1, 2, 7, 16, 3
    scale, eps = 0.3, 1e-6
    q, k, v = inputs(b, h, n, dk, dv, seed=61)
    f = feature_size(dk)
    kv0, ks0 = rand(b, h, dv, f, seed=62), rand(b, h, f, seed=63).abs() + 1
    out = based(q, k, v, scale=scale, normalize=normalize, eps=eps,
                initial_state=(kv0, ks0) if with_state else None)
    Q, K, V, KV0, KS0 = q.tolist(), k.tolist(), v.tolist(), kv0.tolist(), ks0.tolist()
    for bi in range(b):
        for hi in range(h):
            for i in range(n):
                qs = [scale * x for x in Q[bi][hi][i]]
                num, den = [0.0] * dv, 0.0
                if with_state:
                    # phi(scale q_i) written out: 1, then the linear terms, then the products / sqrt(2).
                    phi = [1.0] + qs + [qs[a] * qs[c] / math.sqrt(2) for a in range(dk) for c in range(dk)]
                    den += sum(phi[x] * KS0[bi][hi][x] for x in range(f))
                    for d in range(dv):
                        num[d] += sum(phi[x] * KV0[bi][hi][d][x] for x in range(f))
                for j in range(i + 1):
                    s = sum(qs[a] * K[bi][hi][j][a] for a in range(dk))
                    w = 1 + s + s * s / 2
                    den += w
                    for d in range(dv):
                        num[d] += w * V[bi][hi][j][d]
                for d in range(dv):
                    want = num[d] / (den + eps) if normalize else num[d]
                    assert math.isclose(out[bi, hi, i, d].item(), want, rel_tol=1e-11, abs_tol=1e-12)


def test_transposed_and_low_precision_inputs():
    q, k, v = inputs(2, 5, 11, 16, 32, seed=71)
    ref = based(q, k, v)
    # (B, N, H, D) memory viewed as (B, H, N, D), as models produce it.
    bnhd = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert not bnhd[0].is_contiguous()
    assert_close(based(*bnhd), ref, tol=1e-14)
    low = [t.to(torch.bfloat16) for t in (q, k, v)]
    o = based(*low)
    assert o.dtype == torch.float64
    assert torch.equal(o, based(*[t.double() for t in low]))


def test_rejects_bad_shapes():
    q, k, v = inputs(1, 2, 4, 16, 16)
    with pytest.raises(ValueError, match="form"):
        based(q, k, v, form="chunked")
    with pytest.raises(ValueError, match=r"\(B, H, N, Dk\)"):
        based(q, k[..., :8], v)
    with pytest.raises(ValueError, match="state must be"):
        based(q, k, v, initial_state=(torch.zeros(1, 2, 16, 272), torch.zeros(1, 2, 273)))
    with pytest.raises(ValueError, match="state must be"):
        based_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], (torch.zeros(1, 2, 16, 273), torch.zeros(2, 273)))
