"""tk_ops.based against flash-linear-attention's parallel_based, what users would pick instead, on the GPU: the same
(B, N, H, D) tensors into both, the outputs and the gradients of q, k and v held to a small multiple of the peer's own
error against the float64 reference computed in the same test, and the peer itself to that reference, so that a
difference between FLA's semantics and tk_ops' (scale, the 1 + s + s^2 / 2 weights, the normaliser) fails. Both of
tk_ops' algorithms are compared, forced through the testing ops, and the public op through autograd. Skipped unless the
'based' family is in the build, and, with the reason, where fla does not import."""
import pytest
import torch

import tk_ops
from tk_ops._testing.based import gradients
from tk_ops.reference.based import based as based_ref

from ...util import requires_families
from ..util import ROW_SLACK, assert_close, rel_err, worst_row

pytestmark = requires_families("based")

DK = 16
# tk_ops may be this many times further from the float64 reference than the peer, as a whole and in its worst row.
# A model of both sides' 16-bit roundings puts tk_ops at 0.6-0.9x the peer's error (the peer rounds its unnormalised
# output and its normaliser before dividing); the chunked kernels' extra 16-bit state images add about half again.
PEER_MULTIPLE = 2.0
# The peer's own distance from the reference: 3-5e-3 (bf16) and 4-6e-4 (fp16) in that model. Another formula (the
# scale on both q and k, no linear term, another normaliser) is off by far more.
PEER_AGREES = {torch.bfloat16: 2e-2, torch.float16: 3e-3}


def parallel_based():
    try:
        from fla.ops.based import parallel_based as peer
    except ImportError as e:
        pytest.skip(f"flash-linear-attention (fla-core) does not import here: {e}")
    return peer


def ours(path, q, k, v, d_o, scale, normalize):
    """tk_ops on the (B, N, H, D) leaves, read as (B, H, N, D) views: o and (dq, dk, dv), all (B, N, H, .)."""
    views = [t.transpose(1, 2) for t in (q, k, v)]
    if path == "public":
        o = tk_ops.based(*views, scale=scale, normalize=normalize)
        grads = torch.autograd.grad(o, (q, k, v), d_o.transpose(1, 2))
        return o.detach().transpose(1, 2), grads
    o, grads = gradients(*(t.detach() for t in views), d_o.transpose(1, 2), scale, normalize, algorithm=path)
    return o.transpose(1, 2), [g.transpose(1, 2) for g in grads]


def peer(q, k, v, d_o, scale, normalize):
    o = parallel_based()(q, k, v, scale=scale, use_norm=normalize)
    o = o[0] if isinstance(o, tuple) else o
    return o.detach(), torch.autograd.grad(o, (q, k, v), d_o)


def reference(q, k, v, d_o, scale, normalize):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o = based_ref(*(t.transpose(1, 2) for t in leaves), scale=scale, normalize=normalize)
    grads = torch.autograd.grad(o, leaves, d_o.double().transpose(1, 2))
    return o.detach().transpose(1, 2), grads


# (path, N, dtype, Dv, scale, normalize). Without a state the public op runs N = 700 on the quadratic kernels and
# N = 2048 on the chunked ones; Dv = 128 is two value blocks on tk_ops' side.
CASES = [
    ("public", 700, torch.bfloat16, 64, None, True),
    ("public", 2048, torch.bfloat16, 64, None, True),
    ("quadratic", 700, torch.bfloat16, 64, None, True),
    ("chunked", 700, torch.bfloat16, 64, None, True),
    ("public", 700, torch.bfloat16, 128, None, True),
    ("public", 700, torch.bfloat16, 64, 0.5, True),
    ("public", 700, torch.bfloat16, 64, None, False),
    ("public", 700, torch.float16, 64, None, True),
    ("chunked", 700, torch.float16, 64, None, True),
]


def case_id(case):
    path, n, dtype, dv, scale, normalize = case
    return f"{path}-n{n}-{str(dtype).removeprefix('torch.')}-dv{dv}-scale{scale}-{'norm' if normalize else 'num'}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matches_fla_parallel_based(case):
    path, n, dtype, dv, scale, normalize = case
    parallel_based()  # skips here, before any work, where the peer does not import
    b, h = 2, 4
    q, k, v = (torch.randn(b, n, h, d, device="cuda").to(dtype).requires_grad_() for d in (DK, DK, dv))
    d_o = torch.randn(b, n, h, dv, device="cuda").to(dtype)
    got_o, got_grads = ours(path, q, k, v, d_o, scale, normalize)
    peer_o, peer_grads = peer(q, k, v, d_o, scale, normalize)
    ref_o, ref_grads = reference(q, k, v, d_o, scale, normalize)
    torch.cuda.synchronize()
    for name, got, theirs, ref in zip(("o", "dq", "dk", "dv"), (got_o, *got_grads), (peer_o, *peer_grads),
                                      (ref_o, *ref_grads)):
        assert got.shape == theirs.shape == ref.shape and got.dtype == theirs.dtype == dtype, name
        peer_err, (_, peer_row_err) = rel_err(theirs, ref), worst_row(theirs, ref)
        assert peer_err <= PEER_AGREES[dtype], (
            f"{name}: fla's parallel_based is {peer_err:.3e} from tk_ops' reference: the two disagree on the op")
        assert_close(got, ref, PEER_MULTIPLE * peer_err, f"{case_id(case)} {name} (fla: {peer_err:.3e})",
                     row_tol=PEER_MULTIPLE * max(peer_row_err, ROW_SLACK * peer_err))
