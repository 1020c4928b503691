"""Based API checks that need no GPU: the ops' argument rules (kernels/based/binding.cpp, run by their CPU and Meta
kernels as by the CUDA ones), the Meta kernels' output shapes and memory orders, the autograd formula
(kernels/based/autograd.cpp, run on CPU stand-ins for the kernels, against autograd through the float64 reference),
opcheck and torch.compile tracing of the three ops, and tk_ops.nn.BasedLinearAttention's plumbing (its kernels swapped
for CPU math: head order in the fused projection, in-place views, state, step, Based checkpoint names)."""
import inspect
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import torch

import tk_ops
import tk_ops.nn as tk_nn
from tk_ops import reference
from tk_ops.errors import DeviceMismatchError, DTypeError, InputError
from tk_ops.reference.based import feature_map

from ..util import cpu_linear, empty as t, read_in_place, skip_unless_built
from .example_loader import load_example

F = 273


@pytest.fixture
def built():
    """The ops, their rules, Meta kernels and autograd formula are C++, registered when the extension loads: the tests
    of those load it (no GPU needed), and have nothing to test where it was not built."""
    skip_unless_built("the Based ops")


def qkv(b=1, h=2, n=8, dv=64, dtype=torch.bfloat16, device="cpu"):
    return t(b, h, n, 16, dtype=dtype, device=device), t(b, h, n, 16, dtype=dtype, device=device), \
        t(b, h, n, dv, dtype=dtype, device=device)


def state(b=1, h=2, dv=64, dtype=torch.float32, device="cpu"):
    return t(b, h, dv, F, dtype=dtype, device=device), t(b, h, F, dtype=dtype, device=device)


# ---------------------------------------------------------------- tk_ops.based: argument rules

@pytest.mark.parametrize("make, kind, match", [
    (lambda: qkv(dtype=torch.float32), DTypeError, "q must be bfloat16 or float16, got torch.float32"),
    (lambda: (*qkv()[:2], t(1, 2, 8, 64, dtype=torch.float16)), DTypeError, "share one dtype"),
    (lambda: (t(2, 8, 16), t(2, 8, 16), t(2, 8, 64)), InputError, r"q must be 4-D \(batch, heads, seq_len, dim\)"),
    (lambda: (t(1, 2, 8, 16), t(1, 2, 9, 16), t(1, 2, 8, 64)), InputError, "q and k must have the same shape"),
    (lambda: (t(1, 2, 8, 16), t(1, 2, 8, 16), t(1, 3, 8, 64)), InputError,
     r"v must be \(B, H, N, Dv\) with q's \(B, H, N\) = \(1, 2, 8\)"),
    (lambda: (t(1, 2, 8, 8), t(1, 2, 8, 8), t(1, 2, 8, 64)), InputError, "feature dimension of q and k .* must be 16"),
    (lambda: qkv(dv=40), InputError, "value dimension of v .* must be a multiple of 16 from 16 to 128, got 40"),
    (lambda: qkv(dv=144), InputError, "multiple of 16 from 16 to 128, got 144"),
    (lambda: qkv(dv=8), InputError, "multiple of 16 from 16 to 128, got 8"),
])
def test_based_rejects_inputs(make, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.based(*make())


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale=float("nan")), "scale must be a finite number or None"),
    (dict(scale=float("inf")), "scale must be a finite number or None"),
    (dict(scale=True), "scale must be a finite number or None, got True"),
    (dict(scale="0.1"), "scale must be a number or None, got str"),
    (dict(eps=-1.0), "eps must be a finite number >= 0, got -1"),
    (dict(eps=float("nan")), "eps must be a finite number >= 0"),
    (dict(eps=True), "eps must be a finite number >= 0, got True"),
    (dict(normalize=1), "normalize must be a bool, got int"),
    (dict(output_final_state="yes"), "output_final_state must be a bool, got str"),
])
def test_based_rejects_arguments(kwargs, match, built):
    with pytest.raises(InputError, match=match):
        tk_ops.based(*qkv(), **kwargs)


@pytest.mark.parametrize("make, kind, match", [
    (lambda: t(1, 2, 64, F), InputError, r"initial_state must be a \(kv, k_sum\) pair .* got Tensor"),
    (lambda: (*state(), state()[1]), InputError, r"initial_state must be a \(kv, k_sum\) pair"),
    (lambda: (1, 2), InputError, r"initial_state must be a \(kv, k_sum\) pair .* got tuple of int, int"),
    (lambda: (t(1, 2, 64, 272, dtype=torch.float32), state()[1]), InputError,
     r"initial_state kv must be \(B, H, Dv, 273\) = \(1, 2, 64, 273\), got \(1, 2, 64, 272\)"),
    (lambda: (state()[0], t(2, 2, F, dtype=torch.float32)), InputError,
     r"initial_state k_sum must be \(B, H, 273\) = \(1, 2, 273\), got \(2, 2, 273\)"),
    (lambda: (t(1, 2, 32, F, dtype=torch.float32), state()[1]), InputError, r"= \(1, 2, 64, 273\)"),
    (lambda: state(dtype=torch.bfloat16), DTypeError, "initial_state kv must be float32 .* got torch.bfloat16"),
    (lambda: (state()[0], t(1, 2, F, dtype=torch.float64)), DTypeError, "initial_state k_sum must be float32"),
    (lambda: (t(1, 2, F, 64, dtype=torch.float32).transpose(2, 3), state()[1]), InputError,
     "initial_state kv must be contiguous"),
])
def test_based_rejects_initial_states(make, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.based(*qkv(), initial_state=make())


def test_based_op_wants_both_parts_of_a_state(built):
    q, k, v = qkv(device="meta")
    kv, _ = state(device="meta")
    with pytest.raises(ValueError, match=r"initial_state must be both tensors \(kv, k_sum\) or neither, got only kv"):
        torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, kv, None, False, False)


def test_based_rejects_cpu_tensors(built):
    cpu = r"tk_ops.based_fwd: tk_ops kernels run on CUDA tensors, but q is on cpu; move it with \.cuda\(\)"
    with pytest.raises(DeviceMismatchError, match=cpu):
        tk_ops.based(*qkv())
    with pytest.raises(DeviceMismatchError, match=cpu):
        tk_ops.based(*qkv(), initial_state=state())


def test_python_types_need_no_extension():
    """normalize=1 would pass torch's argument parsing as True: refused before the op (and before loading it)."""
    with pytest.raises(InputError, match="normalize must be a bool, got int"):
        tk_ops.based(*qkv(), normalize=1)
    with pytest.raises(InputError, match="state must be a .* pair"):
        tk_ops.based_step(t(1, 2, 16), t(1, 2, 16), t(1, 2, 64), None)


def test_value_dims_come_from_the_build(built):
    from tk_ops.based import value_dims
    assert value_dims() == [16, 32, 48, 64, 80, 96, 112, 128]


# ---------------------------------------------------------------- the testing ops: the algorithm per call

def test_the_algorithm_is_no_public_setting(built):
    """The public ops choose their kernels by shape; tests choose per call, through the tk_ops_testing ops."""
    assert not hasattr(torch.ops.tk_ops, "based_quadratic_max_len")
    assert hasattr(torch.ops.tk_ops_testing, "based_fwd") and hasattr(torch.ops.tk_ops_testing, "based_bwd")


@pytest.mark.parametrize("algorithm", ["auto", "chunked", "quadratic"])
def test_testing_ops_follow_the_public_rules(algorithm, built):
    """tk_ops_testing.based_fwd / based_bwd are the public ops plus the algorithm: the same rules and outputs."""
    from tk_ops._testing.based import based_bwd, based_fwd
    q, k, v = qkv(2, 3, 40, 48, device="meta")
    o, kv, k_sum, den = based_fwd(q, k, v, save_den=True, algorithm=algorithm)
    assert o.shape == v.shape and kv.shape == k_sum.shape == (0,) and den.shape == (2, 3, 40)
    dq, dk, dv, d_kv0, _ = based_bwd(q, k, v, o, o, den, algorithm=algorithm)
    assert (dq.shape, dk.shape, dv.shape, d_kv0.shape) == (q.shape, k.shape, v.shape, (0,))
    with pytest.raises(TypeError, match="q must be bfloat16 or float16"):
        based_fwd(q.float(), k, v, algorithm=algorithm)
    with pytest.raises(ValueError, match="den .* is needed when normalize is set"):
        based_bwd(q, k, v, o, o, None, algorithm=algorithm)


def test_testing_ops_refuse_what_the_algorithm_cannot_run(built):
    from tk_ops._testing.based import based_bwd, based_fwd
    q, k, v = qkv(device="meta")
    kv0, k_sum0 = state(device="meta")
    with pytest.raises(ValueError, match='tk_ops_testing.based_fwd: algorithm must be "auto", "chunked" or '
                                         '"quadratic", got "fast"'):
        based_fwd(q, k, v, algorithm="fast")
    no_state = 'algorithm "quadratic" takes no state in or out'
    with pytest.raises(ValueError, match="tk_ops_testing.based_fwd: " + no_state):
        based_fwd(q, k, v, kv0=kv0, k_sum0=k_sum0, algorithm="quadratic")
    with pytest.raises(ValueError, match=no_state):
        based_fwd(q, k, v, output_final_state=True, algorithm="quadratic")
    o = t(1, 2, 8, 64, device="meta")
    with pytest.raises(ValueError, match="tk_ops_testing.based_bwd: " + no_state):
        based_bwd(q, k, v, o, o, None, normalize=False, d_kv=kv0, d_k_sum=k_sum0, algorithm="quadratic")
    # The chunked kernels carry the state.
    based_fwd(q, k, v, kv0=kv0, k_sum0=k_sum0, output_final_state=True, algorithm="chunked")
    based_bwd(q, k, v, o, o, None, normalize=False, kv0=kv0, k_sum0=k_sum0, d_kv=kv0, d_k_sum=k_sum0,
              initial_state_grad=True, algorithm="chunked")


def test_testing_ops_refuse_cpu_tensors(built):
    from tk_ops._testing.based import based_bwd, based_fwd
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"tk_ops_testing.based_fwd: tk_ops kernels run on CUDA tensors, but q is on "
                                         r"cpu; move it with \.cuda\(\)"):
        based_fwd(q, k, v, algorithm="quadratic")
    with pytest.raises(ValueError, match="tk_ops_testing.based_bwd: tk_ops kernels run on CUDA tensors, but q is on"):
        based_bwd(q, k, v, v, v, None, normalize=False, algorithm="chunked")


# ---------------------------------------------------------------- based_step: argument rules

def step_args(b=2, h=3, dv=64, rank=3, dtype=torch.bfloat16, device="cpu"):
    mid = (1,) if rank == 4 else ()
    q, k = t(b, h, *mid, 16, dtype=dtype, device=device), t(b, h, *mid, 16, dtype=dtype, device=device)
    return q, k, t(b, h, *mid, dv, dtype=dtype, device=device), state(b, h, dv, device=device)


@pytest.mark.parametrize("change, kind, match", [
    (lambda q, k, v, s: (q.float(), k.float(), v.float(), s), DTypeError, "q must be bfloat16 or float16"),
    (lambda q, k, v, s: (q, k, v.half(), s), DTypeError, "share one dtype"),
    (lambda q, k, v, s: (q[0], k[0], v[0], s), InputError, r"q must be \(batch, heads, 16\) or \(batch, heads, 1, 16\)"),
    (lambda q, k, v, s: (q[:, :, None].expand(2, 3, 2, 16), k[:, :, None].expand(2, 3, 2, 16),
                         v[:, :, None].expand(2, 3, 2, 64), s), InputError, "one token per sequence"),
    (lambda q, k, v, s: (q, k[:1], v, s), InputError, "q and k must have the same shape"),
    (lambda q, k, v, s: (q, k, v[:, None], s), InputError, r"v must be \(B, H, Dv\)"),
    (lambda q, k, v, s: (q, k, v[:1], s), InputError, r"v must be \(B, H, Dv\) with q's \(2, 3\) in front"),
    (lambda q, k, v, s: (q, k, t(2, 3, 40), s), InputError, "multiple of 16 from 16 to 128, got 40"),
    (lambda q, k, v, s: (q, k, v, state(2, 3, 32)), InputError, r"state kv must be \(B, H, Dv, 273\) = \(2, 3, 64, 273\)"),
    (lambda q, k, v, s: (q, k, v, (s[0], s[1].double())), DTypeError, "state k_sum must be float32"),
    (lambda q, k, v, s: (q, k, v, (s[0], t(2, F, 3, dtype=torch.float32).transpose(1, 2))), InputError,
     "state k_sum must be contiguous"),
    (lambda q, k, v, s: (q, k, v, s[0]), InputError, r"state must be a \(kv, k_sum\) pair"),
])
def test_step_rejects(change, kind, match, built):
    with pytest.raises(kind, match=match):
        tk_ops.based_step(*change(*step_args()))


def test_step_rejects_cpu_tensors(built):
    with pytest.raises(DeviceMismatchError, match=r"tk_ops.based_step: tk_ops kernels run on CUDA tensors, but q is on "
                                                  r"cpu; move it with \.cuda\(\)"):
        tk_ops.based_step(*step_args())


# ---------------------------------------------------------------- Meta kernels: shapes and memory orders

def test_forward_meta_shapes(built):
    q, k, v = qkv(2, 3, 100, 112, dtype=torch.float16, device="meta")
    o, kv, k_sum, den = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, None, None, False, False)
    assert o.shape == (2, 3, 100, 112) and o.dtype == torch.float16 and o.is_contiguous()
    assert kv.shape == k_sum.shape == den.shape == (0,) and kv.dtype == torch.float32
    o, kv, k_sum, den = torch.ops.tk_ops.based_fwd(q, k, v, 0.5, False, 0.0, *state(2, 3, 112, device="meta"), True,
                                                   True)
    assert kv.shape == (2, 3, 112, F) and k_sum.shape == (2, 3, F) and den.shape == (2, 3, 100)
    assert all(x.dtype == torch.float32 and x.is_contiguous() for x in (kv, k_sum, den))


def test_forward_output_follows_v_memory_order(built):
    """(B, N, H, D) projections viewed (B, H, N, D) give o laid out (B, N, H, Dv), so that the reshape back to
    (B, N, H * Dv) is a view."""
    y = t(2, 50, 4 * (16 + 16 + 64), device="meta")
    q, k, v = (x.unflatten(-1, (4, -1)).transpose(1, 2) for x in y.split([64, 64, 256], dim=-1))
    o = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, None, None, False, False)[0]
    assert o.shape == (2, 4, 50, 64) and o.transpose(1, 2).is_contiguous() and not o.is_contiguous()
    assert o.transpose(1, 2).reshape(2, 50, 256)._base is not None


def test_empty_sequence_meta(built):
    q, k, v = qkv(2, 3, 0, 64, device="meta")
    o, kv, k_sum, den = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, None, None, True, True)
    assert o.shape == (2, 3, 0, 64) and kv.shape == (2, 3, 64, F) and den.shape == (2, 3, 0)


def test_backward_meta_shapes_and_rules(built):
    q, k, v = qkv(2, 3, 40, 48, device="meta")
    o = t(2, 3, 40, 48, device="meta")
    den = t(2, 3, 40, dtype=torch.float32, device="meta")
    kv0, k_sum0 = state(2, 3, 48, device="meta")
    bwd = torch.ops.tk_ops.based_bwd
    dq, dk, dv, d_kv0, d_k_sum0 = bwd(q, k, v, o, o, den, None, True, 1e-6, kv0, k_sum0, kv0, k_sum0, True)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape and dq.dtype == torch.bfloat16
    assert d_kv0.shape == kv0.shape and d_k_sum0.shape == k_sum0.shape and d_kv0.dtype == torch.float32
    _, _, _, d_kv0, _ = bwd(q, k, v, o, o, None, None, False, 1e-6, None, None, None, None, False)
    assert d_kv0.shape == (0,)
    with pytest.raises(ValueError, match=r"o must have v's shape \(2, 3, 40, 48\), got \(2, 3, 39, 48\)"):
        bwd(q, k, v, o[:, :, 1:], o, den, None, True, 1e-6, None, None, None, None, False)
    with pytest.raises(TypeError, match="d_o must have v's dtype torch.bfloat16, got torch.float16"):
        bwd(q, k, v, o, o.half(), den, None, True, 1e-6, None, None, None, None, False)
    with pytest.raises(ValueError, match="den .* is needed when normalize is set"):
        bwd(q, k, v, o, o, None, None, True, 1e-6, None, None, None, None, False)
    with pytest.raises(TypeError, match="den must be float32"):
        bwd(q, k, v, o, o, den.bfloat16(), None, True, 1e-6, None, None, None, None, False)
    with pytest.raises(ValueError, match=r"den must be \(B, H, N\) = \(2, 3, 40\)"):
        bwd(q, k, v, o, o, den[..., 1:], None, True, 1e-6, None, None, None, None, False)
    with pytest.raises(ValueError, match="initial_state_grad needs the initial state"):
        bwd(q, k, v, o, o, den, None, True, 1e-6, None, None, None, None, True)
    with pytest.raises(ValueError, match=r"the final state's gradient kv must be \(B, H, Dv, 273\)"):
        bwd(q, k, v, o, o, den, None, True, 1e-6, None, None, kv0[:, :, 1:], k_sum0, False)


@pytest.mark.parametrize("rank", [3, 4])
def test_step_meta_shapes(rank, built):
    q, k, v, (kv, k_sum) = step_args(rank=rank, dtype=torch.float16, device="meta")
    o = torch.ops.tk_ops.based_step(q, k, v, kv, k_sum, None, True, 1e-6)
    assert o.shape == v.shape and o.dtype == torch.float16 and o.is_contiguous()


# ---------------------------------------------------------------- autograd on CPU stand-ins for the kernels

# The stand-ins' defaults are the schemas': the dispatcher leaves out trailing arguments that equal them.

def in_order_of(x, like):
    """x laid out as the kernels lay out an output that follows `like` (common/bhnd_tensors.h): (B, N, H, D) memory
    order for a (B, N, H, D) view, else contiguous."""
    if like.shape[1] > 1 and like.shape[2] > 1 and like.stride(1) < like.stride(2):
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    return x.contiguous()


def _standin_forward(q, k, v, scale=None, normalize=True, eps=1e-6, kv0=None, k_sum0=None, output_final_state=False,
                     save_den=False):
    """What the CUDA forward returns, from the float64 reference; den computed here independently (quadratic form)."""
    init = None if kv0 is None else (kv0, k_sum0)
    o, (kv, k_sum) = reference.based(q, k, v, scale, normalize, eps, initial_state=init, output_final_state=True)
    empty = q.new_empty(0, dtype=torch.float32)
    den = empty
    if save_den:
        sc = q.shape[-1] ** -0.5 if scale is None else scale
        s = sc * q.double() @ k.double().transpose(-1, -2)
        w = (1 + s + s * s / 2).tril()
        den = w.sum(-1)
        if kv0 is not None:
            den = den + (feature_map(q, sc) @ k_sum0.double()[..., :, None]).squeeze(-1)
        den = den.float()
    if not output_final_state:
        kv, k_sum = empty, empty.clone()
    return in_order_of(o.to(v.dtype), v), kv.float(), k_sum.float(), den


def _standin_backward(q, k, v, o, d_o, den, scale=None, normalize=True, eps=1e-6, kv0=None, k_sum0=None, d_kv=None,
                      d_k_sum=None, initial_state_grad=False):
    """The gradients the CUDA backward computes, by autograd through the float64 reference. The kernel is called from
    below the autograd layer (autograd's dispatch keys are off on this thread while it runs), so the reference's
    autograd runs on a thread of its own."""
    def grads():
        leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
        init = None if kv0 is None else tuple(x.detach().double().requires_grad_() for x in (kv0, k_sum0))
        out, (kv, k_sum) = reference.based(*leaves, scale, normalize, eps, initial_state=init, output_final_state=True)
        loss = (out * d_o.double()).sum()
        if d_kv is not None:
            loss = loss + (kv * d_kv.double()).sum() + (k_sum * d_k_sum.double()).sum()
        wrt = leaves + (list(init) if init is not None else [])
        found = torch.autograd.grad(loss, wrt, allow_unused=True)
        return [torch.zeros_like(w) if g is None else g for g, w in zip(found, wrt)]
    with ThreadPoolExecutor(1) as pool:
        g = pool.submit(grads).result()
    dq, dk, dv = (in_order_of(x.to(y.dtype), y) for x, y in zip(g[:3], (q, k, v)))
    if initial_state_grad:
        return dq, dk, dv, g[3].float(), g[4].float()
    empty = q.new_empty(0, dtype=torch.float32)
    return dq, dk, dv, empty, empty.clone()


def _standin_step(q, k, v, kv, k_sum, scale=None, normalize=True, eps=1e-6):
    squeeze = q.dim() == 4
    q3, k3, v3 = (x.squeeze(2) if squeeze else x for x in (q, k, v))
    o = reference.based_step(q3, k3, v3, (kv, k_sum), scale, normalize, eps).to(v.dtype)
    return o.unsqueeze(2) if squeeze else o


@contextmanager
def cpu_kernels(calls=None):
    """CPU stand-ins for the CUDA kernels, registered for the duration of the block; `calls` (a list) records the
    arguments of each backward call by name."""
    lib = torch.library.Library("tk_ops", "IMPL")

    def backward(*args, **kwargs):
        if calls is not None:
            bound = inspect.signature(_standin_backward).bind(*args, **kwargs)
            bound.apply_defaults()
            calls.append(bound.arguments)
        return _standin_backward(*args, **kwargs)
    try:
        torch.library.register_kernel("tk_ops::based_fwd", "cpu", _standin_forward, lib=lib)
        torch.library.register_kernel("tk_ops::based_bwd", "cpu", backward, lib=lib)
        torch.library.register_kernel("tk_ops::based_step", "cpu", _standin_step, lib=lib)
        yield
    finally:
        lib._destroy()


def rand(*shape, dtype=torch.float64, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)


def inputs(b, h, n, dv, with_state, dtype=torch.float64):
    q, k = rand(b, h, n, 16, dtype=dtype, scale=0.5), rand(b, h, n, 16, dtype=dtype, scale=0.5)
    v = rand(b, h, n, dv, dtype=dtype)
    init = None
    if with_state:  # a state some tokens long, so that den stays well away from zero
        _, init = reference.based(rand(b, h, 5, 16, scale=0.5), rand(b, h, 5, 16, scale=0.5), rand(b, h, 5, dv),
                                  output_final_state=True)
        init = tuple(x.float() for x in init)
    return q, k, v, init


def expected_grads(q, k, v, init, d_o, d_kv, d_k_sum, normalize, scale=None):
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    init64 = None if init is None else tuple(x.detach().double().requires_grad_() for x in init)
    out, (kv, k_sum) = reference.based(*leaves, scale, normalize, 1e-6, initial_state=init64, output_final_state=True)
    loss = (out * d_o).sum() if d_o is not None else 0.0
    if d_kv is not None:
        loss = loss + (kv * d_kv).sum()
    if d_k_sum is not None:
        loss = loss + (k_sum * d_k_sum).sum()
    wrt = leaves + (list(init64) if init64 else [])
    found = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [torch.zeros_like(w) if g is None else g for g, w in zip(found, wrt)]


@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "initial-state"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
@pytest.mark.parametrize("through", ["o", "state", "o+state", "o+kv", "k_sum"])
def test_autograd_formula_on_cpu_standins(through, normalize, with_state, built):
    """Gradients through torch.ops.tk_ops.based_fwd (kernels replaced by CPU stand-ins) equal autograd through the
    float64 reference, for a loss through o, the final state or both; the initial state gets its gradient; a part of
    the state outside the loss arrives as zeros."""
    torch.manual_seed(0)
    q, k, v, init = inputs(2, 2, 7, 16, with_state)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    init = None if init is None else tuple(x.requires_grad_() for x in init)
    d_o = torch.randn(2, 2, 7, 16, dtype=torch.float64)
    d_kv, d_k_sum = torch.randn(2, 2, 16, F, dtype=torch.float64), torch.randn(2, 2, F, dtype=torch.float64)
    use_o, use_kv, use_k_sum = "o" in through, "state" in through or "kv" in through.replace("k_sum", ""), \
        "state" in through or "k_sum" in through
    calls = []
    with cpu_kernels(calls):
        o, (kv, k_sum) = tk_ops.based(q, k, v, None, normalize, 1e-6, initial_state=init, output_final_state=True)
        loss = (o * d_o).sum() if use_o else 0.0
        if use_kv:
            loss = loss + (kv * d_kv.float()).sum()
        if use_k_sum:
            loss = loss + (k_sum * d_k_sum.float()).sum()
        wrt = (q, k, v) + (init if init is not None else ())
        got = torch.autograd.grad(loss, wrt)
    assert len(calls) == 1
    expect = expected_grads(q, k, v, init, d_o if use_o else None, d_kv if use_kv else None,
                            d_k_sum if use_k_sum else None, normalize)
    for name, g, e in zip(["q", "k", "v", "kv0", "k_sum0"], got, expect):
        assert g.shape == e.shape, name
        torch.testing.assert_close(g.double(), e, rtol=1e-4, atol=1e-4, msg=f"d{name} through {through}")


def test_state_sum_gives_a_broadcast_gradient(built):
    """kv.sum() hands autograd a zero-stride gradient; the formula makes it dense for the kernel."""
    q, k, v, init = inputs(1, 2, 5, 32, True)
    init = tuple(x.requires_grad_() for x in init)
    with cpu_kernels():
        _, (kv, k_sum) = tk_ops.based(q, k, v, initial_state=init, output_final_state=True)
        got = torch.autograd.grad(kv.sum() + k_sum.sum(), init)
    expect = expected_grads(q, k, v, init, None, torch.ones(1, 2, 32, F, dtype=torch.float64),
                            torch.ones(1, 2, F, dtype=torch.float64), True)[3:]
    for g, e in zip(got, expect):
        torch.testing.assert_close(g.double(), e, rtol=1e-4, atol=1e-4)


def test_autograd_only_where_required(built):
    q, k, v, init = inputs(1, 2, 6, 16, True)
    k.requires_grad_()
    init[1].requires_grad_()
    calls = []
    with cpu_kernels(calls):
        o = tk_ops.based(q, k, v, initial_state=init)
        o.sum().backward()
    assert q.grad is None and v.grad is None and init[0].grad is None
    assert k.grad is not None and init[1].grad is not None and init[1].grad.shape == (1, 2, F)
    assert calls[0]["initial_state_grad"] is True, "the initial state's gradient was asked of the kernel"
    expect = expected_grads(q, k, v, init, torch.ones(1, 2, 6, 16, dtype=torch.float64), None, None, True)
    torch.testing.assert_close(k.grad, expect[1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(init[1].grad.double(), expect[4], rtol=1e-4, atol=1e-4)


def test_no_grad_needed_skips_the_formula(built):
    q, k, v, _ = inputs(1, 1, 4, 16, False)
    with cpu_kernels():
        o = tk_ops.based(q, k, v)
        assert not o.requires_grad
        with torch.no_grad():
            assert not tk_ops.based(q.requires_grad_(), k, v).requires_grad


def test_den_output_keeps_the_requested_shape_under_autograd(built):
    """The formula saves den for the backward even when the caller did not ask for it; what the op returns still
    follows save_den, as the Meta kernel says."""
    q, k, v, _ = inputs(1, 2, 6, 16, False)
    with cpu_kernels():
        for save_den, shape in ((False, (0,)), (True, (1, 2, 6))):
            out = torch.ops.tk_ops.based_fwd(q.requires_grad_(), k, v, None, True, 1e-6, None, None, False, save_den)
            assert out[3].shape == shape and not out[3].requires_grad


def test_opcheck_ops(built):
    """Schema, fake-vs-real metadata, autograd registration and AOT dispatch (torch.compile's path) of the three ops,
    with the CPU stand-ins in place of the kernels (in bfloat16: the Meta kernels hold the dtype rule too)."""
    torch.manual_seed(0)
    q, k, v, init = inputs(2, 2, 9, 32, True, dtype=torch.bfloat16)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    with cpu_kernels():
        torch.library.opcheck(torch.ops.tk_ops.based_fwd, (q, k, v, None, True, 1e-6, None, None, False, False))
        torch.library.opcheck(torch.ops.tk_ops.based_fwd, (q, k, v, 0.3, False, 0.0, *init, True, True))
        o, _, _, den = (x.detach() for x in torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6, *init, True, True))
        d_kv, d_k_sum = torch.randn_like(init[0]), torch.randn_like(init[1])
        torch.library.opcheck(torch.ops.tk_ops.based_bwd,
                              (q.detach(), k.detach(), v.detach(), o, torch.randn_like(o), den, None, True, 1e-6,
                               *init, d_kv, d_k_sum, True))
        sq, sk, sv, (kv, k_sum) = step_args(2, 2, 32)
        sq, sk, sv = (torch.randn_like(x) for x in (sq, sk, sv))
        torch.library.opcheck(torch.ops.tk_ops.based_step,
                              (sq, sk, sv, torch.zeros_like(kv), torch.zeros_like(k_sum), None, True, 1e-6))


def test_compiled_forward_backward_and_step_trace(built):
    """torch.compile(fullgraph=True) traces the forward with its state, the C++ formula's backward, and the mutating
    step (functionalised, the state still updated in place); results equal eager."""
    torch.manual_seed(0)
    q, k, v, init = inputs(1, 2, 10, 16, True, dtype=torch.bfloat16)
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    def prefill(q, k, v, kv0, k_sum0):
        o, (kv, k_sum) = tk_ops.based(q * 2, k, v, initial_state=(kv0, k_sum0), output_final_state=True)
        return o.float().square().sum() + kv.sum(), kv, k_sum

    def step(q, k, v, kv, k_sum):
        return tk_ops.based_step(q, k, v, (kv, k_sum)) * 2

    calls = []
    with cpu_kernels(calls):
        loss, kv_e, _ = prefill(q, k, v, *init)
        eager = torch.autograd.grad(loss, (q, k, v))
        calls.clear()
        compiled = torch.compile(prefill, fullgraph=True, backend="aot_eager")
        loss_c, kv_c, _ = compiled(q, k, v, *init)
        got = torch.autograd.grad(loss_c, (q, k, v))
        assert len(calls) == 1
        torch.testing.assert_close(kv_c, kv_e)
        for g, e in zip(got, eager):
            torch.testing.assert_close(g, e)

        sq, sk, sv = (x.detach()[:, :, 0] for x in (q, k, v))
        state_e = tuple(x.clone() for x in init)
        o_e = step(sq, sk, sv, *state_e)
        state_c = tuple(x.clone() for x in init)
        o_c = torch.compile(step, fullgraph=True, backend="aot_eager")(sq, sk, sv, *state_c)
        torch.testing.assert_close(o_c, o_e)
        for c, e in zip(state_c, state_e):
            torch.testing.assert_close(c, e)
            assert not torch.equal(c, init[0] if c.dim() == 4 else init[1]), "the state was not updated in place"


def test_step_on_cpu_standin_continues_a_prefill(built):
    """based_step after based(..., output_final_state=True) equals one pass (the plumbing: 3-D and 4-D tokens, the
    state updated in place through the op)."""
    torch.manual_seed(0)
    q, k, v, _ = inputs(2, 2, 9, 16, False)
    full = reference.based(q, k, v)
    with cpu_kernels():
        o, st = tk_ops.based(q[:, :, :6], k[:, :, :6], v[:, :, :6], output_final_state=True)
        outs = [tk_ops.based_step(q[:, :, 6], k[:, :, 6], v[:, :, 6], st)]
        outs += [tk_ops.based_step(q[:, :, i:i + 1], k[:, :, i:i + 1], v[:, :, i:i + 1], st).squeeze(2)
                 for i in (7, 8)]
    torch.testing.assert_close(torch.cat([o, torch.stack(outs, 2)], 2), full)


# ---------------------------------------------------------------- nn.BasedLinearAttention

@pytest.mark.parametrize("args, kwargs, match", [
    ((512, 3), {}, "multiple of num_heads"),
    ((512, 16), {}, "value dimension d_model / num_heads = 32"),  # allowed: checked below not to raise
    ((512, 64), {}, "value dimension d_model / num_heads = 8 must be a multiple of 16 from 16 to 128"),
    ((512, 2), {}, "value dimension d_model / num_heads = 256"),
    ((240, 2), {}, "value dimension d_model / num_heads = 120"),
    ((512, 0), {}, "num_heads must be a positive int"),
    ((512.0, 8), {}, "d_model must be a positive int"),
    ((512, 8), dict(feature_dim=8), "feature_dim must be 16"),
    ((512, 8), dict(normalize=1), "normalize must be a bool"),
    ((512, 8), dict(eps=-1.0), "eps must be a finite number >= 0"),
])
def test_nn_based_rejects_bad_arguments(args, kwargs, match, built):
    if match.endswith("= 32"):
        tk_nn.BasedLinearAttention(*args, device="meta", **kwargs)
        return
    with pytest.raises(InputError, match=match):
        tk_nn.BasedLinearAttention(*args, device="meta", **kwargs)


def test_nn_based_shapes(built):
    m = tk_nn.BasedLinearAttention(1792, 16, device="meta")  # the Based 1.3B layer: Dv = 112
    assert m.value_dim == 112 and m.qkv.weight.dtype == torch.bfloat16 and m.qkv.bias is None
    assert m.qkv.weight.shape == (2 * 16 * 16 + 1792, 1792) and m.proj.weight.shape == (1792, 1792)
    assert isinstance(m.qkv, tk_nn.Linear) and isinstance(m.proj, tk_nn.Linear)
    assert tk_nn.BasedLinearAttention(256, 4, bias=True, device="meta").qkv.bias.shape == (2 * 64 + 256,)
    kv, k_sum = m.init_state(3)
    assert kv.shape == (3, 16, 112, F) and k_sum.shape == (3, 16, F) and kv.dtype == torch.float32
    assert kv.device.type == "meta" and (m.init_state(1, device="cpu")[0] == 0).all()
    with pytest.raises(InputError, match=r"\(batch, seq_len, 1792\)"):
        m(t(2, 5, 512, device="meta"))
    with pytest.raises(InputError, match=r"one token per sequence"):
        m.step(t(2, 5, 1792, device="meta"), m.init_state(2))
    assert "value_dim=112" in repr(m)


@pytest.fixture
def cpu_math(monkeypatch):
    """Swap the module's kernels for CPU math; record what the Based ops receive."""
    seen = []

    def based(q, k, v, scale=None, normalize=True, eps=1e-6, initial_state=None, output_final_state=False):
        seen.append((q, k, v))
        out = reference.based(q, k, v, scale, normalize, eps, initial_state=initial_state,
                              output_final_state=output_final_state)
        if output_final_state:
            return out[0].to(v.dtype), tuple(x.float() for x in out[1])
        return out.to(v.dtype)

    def based_step(q, k, v, state, scale=None, normalize=True, eps=1e-6):
        seen.append((q, k, v))
        return reference.based_step(q, k, v, state, scale, normalize, eps).to(v.dtype)
    monkeypatch.setattr(tk_ops.nn.gemm, "_linear", cpu_linear)
    monkeypatch.setattr(tk_ops.nn.based, "based", based)
    monkeypatch.setattr(tk_ops.nn.based, "based_step", based_step)
    return seen


def textbook(x, qkv_w, qkv_b, proj_w, proj_b, h, normalize, eps):
    """The Based linear attention the module documents, in float64: w = 1 + s + s^2/2 over visible keys."""
    b, n, e = x.shape
    dv = e // h
    y = torch.nn.functional.linear(x, qkv_w, qkv_b)
    q, k, v = y.split([h * 16, h * 16, e], dim=-1)
    q, k = (z.view(b, n, h, 16).transpose(1, 2) for z in (q, k))
    v = v.view(b, n, h, dv).transpose(1, 2)
    s = q @ k.transpose(-1, -2) / 4.0
    w = (1 + s + s * s / 2).tril()
    o = w @ v
    if normalize:
        o = o / (w.sum(-1, keepdim=True) + eps)
    return torch.nn.functional.linear(o.transpose(1, 2).reshape(b, n, e), proj_w, proj_b)


def small_module(bias, normalize, heads=4, dv=16):
    torch.manual_seed(0)
    m = tk_nn.BasedLinearAttention(heads * dv, heads, normalize=normalize, bias=bias)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_nn_based_matches_textbook(cpu_math, bias, normalize, built):
    m = small_module(bias, normalize)
    x = torch.randn(2, 11, 64, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    params = [m.qkv.weight, m.qkv.bias, m.proj.weight, m.proj.bias]
    x64 = x.detach().double().requires_grad_()
    p64 = [None if p is None else p.detach().double().requires_grad_() for p in params]
    expect = textbook(x64, *p64, 4, normalize, 1e-6)
    assert (y.double() - expect).norm() / expect.norm() < 2e-2
    dy = torch.randn_like(expect)
    y.backward(dy.to(y.dtype))
    expect.backward(dy)
    for name, got, ref in [("x", x, x64)] + [(f"param{i}", p, r) for i, (p, r) in enumerate(zip(params, p64))]:
        if got is None:
            continue
        rel = (got.grad.double() - ref.grad).norm() / ref.grad.norm()
        assert rel < 3e-2, f"d{name}: relative error {rel:.2e}"
    (q, k, v), = cpu_math
    assert q.shape == k.shape == (2, 4, 11, 16) and v.shape == (2, 4, 11, 16)
    assert not q.is_contiguous() and all(read_in_place(z) for z in (q, k, v))
    assert q.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()


def test_nn_based_prefill_chunks_and_steps_equal_one_pass(cpu_math, built):
    m = small_module(False, True)
    x = torch.randn(2, 12, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        full = m(x)
        y1, st = m(x[:, :5], output_final_state=True)
        y2, st = m(x[:, 5:9], state=st, output_final_state=True)
        steps = [m.step(x[:, 9], st), m.step(x[:, 10:11], st).squeeze(1), m.step(x[:, 11], st)]
        fresh = m.init_state(2)
        first = m.step(x[:, 0], fresh)
    got = torch.cat([y1, y2, torch.stack(steps, 1)], 1)
    assert (got.double() - full.double()).norm() / full.double().norm() < 1e-2
    assert (first.double() - full[:, 0].double()).norm() / full[:, 0].double().norm() < 1e-2


def test_nn_based_loads_based_checkpoint_names(built):
    """The Based model's parameter names (separate projections) load into the fused module."""
    m = tk_nn.BasedLinearAttention(256, 4, bias=False)
    theirs = {"proj_q.weight": torch.randn(64, 256), "proj_k.weight": torch.randn(64, 256),
              "proj_v.weight": torch.randn(256, 256), "out_proj.weight": torch.randn(256, 256)}
    m.load_state_dict(theirs)
    torch.testing.assert_close(m.qkv.weight.float(), torch.cat([theirs[f"proj_{x}.weight"] for x in "qkv"]).bfloat16().float())
    torch.testing.assert_close(m.proj.weight.float(), theirs["out_proj.weight"].bfloat16().float())
    nested = torch.nn.ModuleDict({"mixer": tk_nn.BasedLinearAttention(256, 4)})
    nested.load_state_dict({"mixer." + name.replace("out_proj", "proj_o"): w for name, w in theirs.items()})
    torch.testing.assert_close(nested["mixer"].proj.weight, m.proj.weight)
    m.load_state_dict(m.state_dict())  # its own names still load


def test_step_in_grad_mode_has_no_gradient_and_marks_the_state(built):
    """A decoding step outside torch.no_grad(): the output says it has no gradient (rather than a silent zero one),
    and the state's version moves, so a forward that saved it for its backward would notice the change."""
    q, k, v, _ = inputs(2, 3, 1, 64, False, dtype=torch.bfloat16)
    q = q[:, :, 0].requires_grad_()
    kv, k_sum = torch.zeros(2, 3, 64, F), torch.zeros(2, 3, F)
    versions = kv._version, k_sum._version
    with cpu_kernels():
        o = tk_ops.based_step(q * 1, k[:, :, 0], v[:, :, 0], (kv, k_sum))
    assert not o.requires_grad and o.grad_fn is None
    assert kv._version > versions[0] and k_sum._version > versions[1]


def test_step_refuses_a_state_in_a_graph(built):
    """A final state that carries gradients cannot be changed in place without a record: refused, with the fix."""
    q, k, v, init = inputs(1, 2, 4, 16, True)
    init = tuple(x.requires_grad_() for x in init)
    with cpu_kernels():
        _, state = tk_ops.based(q, k, v, initial_state=init, output_final_state=True)
        with pytest.raises(InputError, match=r"the state requires grad .* torch.no_grad\(\)"):
            tk_ops.based_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state)
        with torch.no_grad():
            tk_ops.based_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], state)
        tk_ops.based_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], tuple(x.detach() for x in state))


# ---------------------------------------------------------------- examples/train_based.py, its PyTorch side

@pytest.fixture(scope="module")
def train_based():
    yield from load_example("train_based")


@pytest.mark.parametrize("n, chunk", [(1, 64), (64, 64), (150, 64), (203, 32)])
def test_example_torch_based_matches_the_reference(train_based, n, chunk):
    """The chunked float32 Based mixing the example trains its PyTorch model with: forward and gradients equal the
    float64 reference's (ragged lengths, chunk boundaries)."""
    g = torch.Generator().manual_seed(n)
    q, k = (torch.randn(2, 3, n, 16, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2))
    v = torch.randn(2, 3, n, 32, generator=g, dtype=torch.float64).requires_grad_()
    got = train_based.based_chunked(q, k, v, chunk=chunk)
    ref = reference.based(q, k, v)
    assert got.dtype == torch.float64 and got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    dy = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad((got * dy).sum(), (q, k, v)), torch.autograd.grad((ref * dy).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_example_models_share_parameter_names(train_based, built):
    ours = train_based.HybridLM("BABA", 512, 8, 8, 256, use_tk=True).to("meta")
    theirs = train_based.HybridLM("BABA", 512, 8, 8, 256, use_tk=False).to("meta")
    assert {n: p.shape for n, p in ours.state_dict().items()} == {n: p.shape for n, p in theirs.state_dict().items()}
    assert isinstance(ours.blocks[0].mixer, tk_nn.BasedLinearAttention)
    assert isinstance(ours.blocks[1].mixer, tk_nn.Attention)
    assert train_based.parse_args(["--quick"]).pattern == "BA"
