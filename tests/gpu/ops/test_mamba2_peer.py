"""tk_ops.mamba2_chunk_scan against mamba_ssm's mamba_chunk_scan_combined, what users would pick instead, on the GPU:
the same tensors and arguments into both, the output, the final states and every gradient (x, dt, A, B, C, D, z,
dt_bias, initial states, from the output's gradient and the final states') compared with the float64 reference in the
same test; tk_ops must be within a small multiple of the peer's own error, and the peer itself near the reference, so
that a difference between mamba_ssm's semantics and tk_ops' fails. Cases: the Mamba2 module's options, a gate with
per-channel D and a dt_limit that clamps, slowly decaying heads over many chunks, packed sequences, and fp16. The peer
runs where its Triton sources import (docs/mamba2.md: carried with PYTHONPATH=.peers); the decoding step's comparison
with selective_state_update is in test_mamba2_step.py. Skipped unless the 'mamba2' family is in the build, and, with
the reason, where mamba_ssm does not import."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.mamba2 import mamba2_chunk_scan as scan_ref

from ...util import requires_families
from ..util import ROW_SLACK, assert_close, rel_err, worst_row
from .test_mamba2 import FINAL_TOL, OUT_TOL
from .test_mamba2_bwd import (DT_LIMIT, ROWS, autograd_grads, compare, grad_err, inputs, names_of, out_grads,
                              packed_ids, ref_grads, tk_grads)

pytestmark = requires_families("mamba2")

# tk_ops may be this many times further from the float64 reference than the peer. Both round the same operands to 16
# bits in the forward (the decayed C B^T, the weighted inputs of a chunk's state, the carried state's image), so their
# forward errors are alike; in the backward the peer hands its states to the products as single 16-bit images, where
# tk_ops uses two (docs/mamba2.md, "Precision of ddt and dA"), so tk_ops' gradients should be the closer.
PEER_MULTIPLE = 2.0
# Beside the multiple, one rounding to the inputs' 16-bit type (its unit roundoff): where the peer keeps a result in
# fp32 that tk_ops forms from a 16-bit operand (dD under a gate: the peer recomputes d_out silu(z) in fp32, tk_ops
# rounds it to x's dtype like its other operands), the peer's error can be a thousandth of such a rounding.
ROUNDING = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
# The peer against the reference, so that the multiple is not taken of a peer computing something else: its forward
# rounds like tk_ops' (a few 1e-3 in bf16); its ddt and dA, from single 16-bit state images, may be a few 1e-2 off (as
# tk_ops' own first design was); another dt chain, clamp, gate or sequence mask is off by order 1.
PEER_AGREES = {"out": 2e-2, "final": 2e-2, "grad": 1e-1}
CHUNK = 256  # one chunk size for every case: the peer's kernels autotune once per (chunk, head_dim, d_state)


def chunk_scan_combined():
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except ImportError as e:  # the peer is optional: its sources (or triton, einops) are not on the path here
        pytest.skip(f"mamba_ssm's mamba_chunk_scan_combined does not import here: {e}")
    return mamba_chunk_scan_combined


# name: (dtype, l, g, input options, scan flags)
CASES = {
    "module_options": (torch.bfloat16, 1000, 1, {"D": "head", "dt_bias": True, "init": True, "softplus": True},
                       {"dt_softplus": True}),
    "gate_D_per_channel_dt_limit": (torch.bfloat16, 700, 2,
                                    {"D": "channel", "z": True, "dt_bias": True, "init": True, "softplus": True},
                                    {"dt_softplus": True, "dt_limit": DT_LIMIT}),
    "slow_decay": (torch.bfloat16, 2048, 2, {"D": "head", "z": True, "dt_bias": True, "init": True, "decay": "slow"},
                   {}),
    "packed_sequences": (torch.bfloat16, 1000, 2, {"D": "head", "z": True, "dt_bias": True, "init": True,
                                                   "softplus": True, "seq": packed_ids(2, 1000)},
                         {"dt_softplus": True}),
    "module_options_fp16": (torch.float16, 1000, 1, {"D": "head", "dt_bias": True, "init": True, "softplus": True},
                            {"dt_softplus": True}),
}


def assert_near_peer(name, got, theirs, ref, dtype, measure, rows=True):
    """got (tk_ops) and theirs (the peer) against ref: the peer within PEER_AGREES, tk_ops within PEER_MULTIPLE of the
    peer's error plus one rounding, as a whole and, with `rows`, in its worst row."""
    kind = name if name in ("out", "final") else "grad"
    peer_err = measure(theirs, ref)
    assert peer_err <= PEER_AGREES[kind], (
        f"{name}: mamba_ssm is {peer_err:.3e} from tk_ops' reference: the two disagree on the op")
    ours_err = measure(got, ref)
    bound = PEER_MULTIPLE * peer_err + ROUNDING[dtype]
    assert ours_err <= bound, f"{name}: tk_ops {ours_err:.3e} from the reference, mamba_ssm {peer_err:.3e}"
    if rows and got.dim() > 1:
        _, peer_row = worst_row(theirs, ref)
        _, ours_row = worst_row(got, ref)
        row_bound = PEER_MULTIPLE * max(peer_row, ROW_SLACK * peer_err) + ROW_SLACK * ROUNDING[dtype]
        assert ours_row <= row_bound, f"{name}: tk_ops' worst row {ours_row:.3e}, mamba_ssm's {peer_row:.3e}"


@pytest.mark.parametrize("case", list(CASES))
def test_matches_mamba_chunk_scan_combined(case):
    peer = chunk_scan_combined()  # skips here, before any work, where the peer does not import
    dtype, l, g, opts, flags = CASES[case]
    b, h, p, n = 2, 4, 64, 128
    kw = inputs(b, l, h, g, p, n, dtype, **opts)
    flags = {"dt_softplus": False, "dt_limit": (0.0, math.inf), **flags}

    with torch.no_grad():
        out, final = tk_ops.mamba2_chunk_scan(**kw, chunk_size=CHUNK, return_final_states=True, **flags)
        peer_out, peer_final = peer(**kw, chunk_size=CHUNK, return_final_states=True, **flags)
        ref_out, ref_final = scan_ref(**kw, chunk_size=CHUNK, return_final_states=True, form="chunked", **flags)
    torch.cuda.synchronize()
    assert peer_out.dtype == out.dtype == dtype and peer_final.dtype == final.dtype == torch.float32
    assert_close(out, ref_out, OUT_TOL[dtype], f"{case}: output")
    assert_close(final, ref_final, FINAL_TOL[dtype], f"{case}: final state")
    assert_near_peer("out", out, peer_out, ref_out, dtype, rel_err)
    assert_near_peer("final", final, peer_final, ref_final, dtype, rel_err)

    dy, dfinal = out_grads(kw, "grad", **flags)
    got = tk_grads(kw, dy, dfinal, True, CHUNK, **flags)
    theirs = autograd_grads(lambda **args: peer(**args, chunk_size=CHUNK, return_final_states=True, **flags), kw, dy,
                            dfinal)
    torch.cuda.synchronize()
    ref = ref_grads(kw, dy, dfinal, True, **flags)
    compare(got, ref, kw, dy, flags, case)
    for name in names_of(kw):
        assert theirs[name] is not None and theirs[name].shape == kw[name].shape, f"mamba_ssm's d{name}"
        assert_near_peer(f"d{name}", got[name], theirs[name], ref[name], dtype,
                         lambda t, r, name=name: grad_err(name, t, r, ref), rows=name in ROWS)
