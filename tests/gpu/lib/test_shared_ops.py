"""Shared-tile and shared-vector ops against torch, per warp (kernels: shared_ops.cu; the group
versions reuse this table from test_group_shared_ops.py).

The kernel loads tiles A, B (R x C), row vector VR (R), column vectors VC, V2 (C) into shared
memory, runs one op and writes D (R x C), OR (R), OC (C). References are computed in float64
from the same (already rounded) inputs and compared element-wise with a tolerance of about two
units in the last place of the element type (exact for ops that only select or move values).
"""
from __future__ import annotations

import pytest
import torch

from ..util import poison
from .test_memory_helpers import DEVICE, DTYPES, float_bits, randn

SCALAR = 0.75  # exactly representable in every element type, fp8 included

# name -> (op id, output: "D" | "OR" | "OC", exact?, reference(a, b, vr, vc, v2, s) in float64)
_BIN = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "max": torch.maximum, "min": torch.minimum}
_RED = {"sum": lambda x, d: x.sum(d), "max": lambda x, d: x.amax(d), "min": lambda x, d: x.amin(d)}
_COMBINE = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum}

OPS: dict[str, tuple] = {
    "zero": (0, "D", True, lambda a, *_: torch.zeros_like(a)),
    "one": (1, "D", True, lambda a, *_: torch.ones_like(a)),
    "pos_infty": (2, "D", True, None),  # reference depends on the dtype (fp8 e4m3 has no inf)
    "neg_infty": (3, "D", True, None),
    "copy": (4, "D", True, lambda a, *_: a),
    "copy_via_float": (5, "D", True, lambda a, *_: a),
    "exp": (6, "D", False, lambda a, *_: a.exp()),
    "exp2": (7, "D", False, lambda a, *_: a.exp2()),
    "log": (8, "D", False, lambda a, *_: a.log()),
    "abs": (9, "D", True, lambda a, *_: a.abs()),
    "relu": (10, "D", True, lambda a, *_: a.relu()),
    "neg": (11, "D", True, lambda a, *_: -a),
    "add_inplace": (48, "D", False, lambda a, b, *_: a + b),
    "row_max_inplace_acc": (49, "OR", True, lambda a, b, vr, *_: torch.maximum(vr, a.amax(1))),
}
for i, (n, f) in enumerate(_BIN.items()):
    exact = n in ("max", "min")
    OPS[n] = (12 + i, "D", exact, lambda a, b, vr, vc, v2, s, f=f: f(a, b))
    OPS[f"{n}_scalar"] = (18 + i, "D", exact, lambda a, b, vr, vc, v2, s, f=f: f(a, torch.full_like(a, s)))
    OPS[f"{n}_row"] = (24 + i, "D", exact, lambda a, b, vr, vc, v2, s, f=f: f(a, vr.view(-1, 1).expand_as(a)))
    OPS[f"{n}_col"] = (30 + i, "D", exact, lambda a, b, vr, vc, v2, s, f=f: f(a, vc.view(1, -1).expand_as(a)))
    OPS[f"vec_{n}"] = (72 + i, "OC", exact, lambda a, b, vr, vc, v2, s, f=f: f(vc, v2))
    OPS[f"vec_{n}_scalar"] = (78 + i, "OC", exact, lambda a, b, vr, vc, v2, s, f=f: f(vc, torch.full_like(vc, s)))
for i, (n, f) in enumerate(_RED.items()):
    exact = n != "sum"
    c = _COMBINE[n]
    OPS[f"row_{n}"] = (36 + i, "OR", exact, lambda a, b, vr, vc, v2, s, f=f: f(a, 1))
    OPS[f"col_{n}"] = (39 + i, "OC", exact, lambda a, b, vr, vc, v2, s, f=f: f(a, 0))
    OPS[f"row_{n}_acc"] = (42 + i, "OR", exact, lambda a, b, vr, vc, v2, s, f=f, c=c: c(vr, f(a, 1)))
    OPS[f"col_{n}_acc"] = (45 + i, "OC", exact, lambda a, b, vr, vc, v2, s, f=f, c=c: c(vc, f(a, 0)))
OPS.update({
    "vec_zero": (60, "OC", True, lambda a, b, vr, vc, *_: torch.zeros_like(vc)),
    "vec_one": (61, "OC", True, lambda a, b, vr, vc, *_: torch.ones_like(vc)),
    "vec_pos_infty": (62, "OC", True, None),
    "vec_neg_infty": (63, "OC", True, None),
    "vec_copy": (64, "OC", True, lambda a, b, vr, vc, *_: vc),
    "vec_copy_via_float": (65, "OC", True, lambda a, b, vr, vc, *_: vc),
    "vec_exp": (66, "OC", False, lambda a, b, vr, vc, *_: vc.exp()),
    "vec_exp2": (67, "OC", False, lambda a, b, vr, vc, *_: vc.exp2()),
    "vec_log": (68, "OC", False, lambda a, b, vr, vc, *_: vc.log()),
    "vec_abs": (69, "OC", True, lambda a, b, vr, vc, *_: vc.abs()),
    "vec_relu": (70, "OC", True, lambda a, b, vr, vc, *_: vc.relu()),
    "vec_neg": (71, "OC", True, lambda a, b, vr, vc, *_: -vc),
})

# Relative tolerance: about two units in the last place (fp32 transcendental: the fast __expf /
# __logf intrinsics). Sums get an extra absolute allowance for float accumulation order.
RTOL = {"fp32": 3e-7, "bf16": 2 ** -7, "fp16": 2 ** -10, "fp8e4m3": 2 ** -3}
RTOL_TRANSCENDENTAL_FP32 = 2e-6
# Absolute allowance: the spacing of subnormals, where relative precision runs out.
ATOL = {"fp32": 1e-37, "bf16": 1e-37, "fp16": 2 ** -24, "fp8e4m3": 2 ** -9}
ATOL_LOG = 1e-6  # __logf is accurate to an absolute 2^-21.4 near 1, where log(x) is near 0
# fp8 has no infinity; the library's "infinities" are its largest finite values.
INFINITY = {"fp8e4m3": 448.0}


def _inputs(R, C, dtype, op):
    """Random inputs; divisors (B, VR, VC, V2) stay away from zero, log gets a positive A."""
    def away_from_zero(*shape):
        x = torch.randn(*shape, device=DEVICE)
        return (x.sign() * (x.abs() + 0.5)).to(dtype)
    a = randn(R, C, dtype=dtype)
    if op.endswith("log"):
        a = (a.float().abs() + 0.1).to(dtype)
    vc = away_from_zero(C)
    if op == "vec_log":
        vc = (vc.float().abs() + 0.1).to(dtype)
    return a, away_from_zero(R, C), away_from_zero(R), vc, away_from_zero(C)


def _reference(op, dtype_name, a, b, vr, vc, v2):
    op_id, out, exact, fn = OPS[op]
    if fn is None:  # infinities
        shape = vc.shape if out == "OC" else a.shape
        v = INFINITY.get(dtype_name, float("inf"))
        return torch.full(shape, -v if "neg" in op else v, dtype=torch.float64, device=DEVICE)
    d = [t.double() for t in (a, b, vr, vc, v2)]
    return fn(*d, SCALAR)


def check_op(tk, name, dtype_name, R, C, op):
    dtype = DTYPES[dtype_name]
    op_id, out_name, exact, _ = OPS[op]
    a, b, vr, vc, v2 = _inputs(R, C, dtype, op)
    outs = {"D": poison(torch.empty(R, C, dtype=dtype, device=DEVICE)),
            "OR": poison(torch.empty(R, dtype=dtype, device=DEVICE)),
            "OC": poison(torch.empty(C, dtype=dtype, device=DEVICE))}
    tk.run(name, a, b, vr, vc, v2, outs["D"], outs["OR"], outs["OC"], args=(op_id, float_bits(SCALAR)))
    got = outs[out_name].double()
    ref = _reference(op, dtype_name, a, b, vr, vc, v2)
    if exact:
        # Values the op only selects or moves: equal to the reference rounded to the dtype.
        assert torch.equal(got, ref.to(dtype).double()), f"{op}: differs from torch"
        return
    rtol = RTOL[dtype_name]
    if dtype_name == "fp32" and any(k in op for k in ("exp", "log")):
        rtol = RTOL_TRANSCENDENTAL_FP32
    atol = ATOL[dtype_name] + (ATOL_LOG if op.endswith("log") else 0.0)
    if "sum" in op:  # float accumulation in another order than torch's
        atol += 1e-6 * float(a.double().abs().sum(1 if out_name == "OR" else 0).max())
    assert torch.isfinite(got).all(), f"{op}: non-finite output"
    err = (got - ref).abs()
    bound = atol + rtol * ref.abs()
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), (
        f"{op}: element {worst} = {got.flatten()[worst].item()} vs {ref.flatten()[worst].item()}")


WARP_ENTRIES = [(d, s) for d in ("fp32", "bf16", "fp16") for s in ((16, 16), (32, 64), (64, 128))] + [
    ("bf16", (128, 64)), ("fp8e4m3", (32, 64))]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype,shape", WARP_ENTRIES, ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else v)
def test_shared_op_per_warp(tk, dtype, shape, op):
    R, C = shape
    check_op(tk, f"shared_ops/warp/{dtype}/{R}x{C}", dtype, R, C, op)
