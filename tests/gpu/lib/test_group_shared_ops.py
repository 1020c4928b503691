"""Shared-tile and shared-vector ops at group scope (group<2>, group<4>; kernels:
group_shared_ops.cu), checked with the op table and references of test_shared_ops.py."""
import pytest

from .test_shared_ops import OPS, check_op

ENTRIES = [(n, d, s) for d in ("fp32", "bf16", "fp16") for n, s in ((4, (16, 16)), (4, (128, 64)), (2, (64, 128)))]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("n,dtype,shape", ENTRIES, ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else str(v))
def test_shared_op_per_group(tk, n, dtype, shape, op):
    R, C = shape
    check_op(tk, f"shared_ops/group{n}/{dtype}/{R}x{C}", dtype, R, C, op)
