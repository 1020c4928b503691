"""Register tiles to and from global and shared memory (kernels: mem_register*.cu).

Each entry mem_rt/<reg dtype>/<memory dtype>/<layout>/<RxC> loads tiles by one of two paths
(global -> register, or global -> shared -> register) and stores them by one of three
(register -> global, register -> shared -> global, or a dump of every lane's registers at the
positions rt_layout.cuh documents). Values go memory dtype -> register dtype -> memory dtype,
so the expected result is x.to(reg).to(mem), which torch rounds the same way (to nearest even).
"""
import pytest
import torch

from ..util import poison
from .test_memory_helpers import DEVICE, DTYPES, Placed, ceil_to, same, tensor_cases, zero_padded, randn

SAME_TYPE_SHAPES = [(16, 16), (32, 64), (64, 32), (64, 64)]
ENTRIES = [(d, d, shape) for d in ("fp32", "bf16", "fp16") for shape in SAME_TYPE_SHAPES] + [
    ("fp32", "bf16", (16, 16)), ("fp32", "bf16", (32, 64)), ("fp32", "bf16", (64, 32)),
    ("fp32", "fp16", (16, 16)), ("fp32", "fp16", (32, 64)),
    ("bf16", "fp32", (16, 16)), ("bf16", "fp32", (64, 32)),
    ("fp32", "fp8e4m3", (32, 64)), ("fp32", "fp8e4m3", (64, 32)),
    ("fp16", "fp8e4m3", (32, 32)),
]
LOAD_PATHS = {0: "load(rt, gl)", 1: "load(st, gl) + load(rt, st)"}
STORE_PATHS = {0: "store(gl, rt)", 1: "store(st, rt) + store(gl, st)"}
DUMP = 2


def _params():
    for reg, mem, (r, c) in ENTRIES:
        cases = tensor_cases(r, c)
        if (r, c) == (32, 64):
            cases.append(("100x70", 100, 70, True))
            cases.append(("100x70_odd", 100, 70, False))
        for layout in ("row", "col"):
            for case in cases:
                yield pytest.param(reg, mem, layout, (r, c), case[1:],
                                   id=f"{reg}-{mem}-{layout}-{r}x{c}-{case[0]}")


@pytest.mark.parametrize("reg,mem,layout,tile,case", list(_params()))
def test_register_tile_paths(tk, reg, mem, layout, tile, case):
    (R, C), (rows, cols, aligned) = tile, case
    name = f"mem_rt/{reg}/{mem}/{layout}/{R}x{C}"
    x = randn(rows, cols, dtype=DTYPES[mem])
    expect = x.to(DTYPES[reg]).to(DTYPES[mem])
    src = Placed.holding(x, aligned)

    # Dump: both load paths must put every element where the layout says, zeros past the edge.
    full_rows, full_cols = ceil_to(rows, R), ceil_to(cols, C)
    for lp, what in LOAD_PATHS.items():
        dump = poison(torch.empty(full_rows, full_cols, dtype=DTYPES[mem], device=DEVICE))
        unused = Placed.poisoned(rows, cols, DTYPES[mem], aligned)
        tk.run(name, src.buf, unused.buf, dump, args=(rows, cols, *src.args(), *unused.args(), lp, DUMP))
        assert same(dump, zero_padded(expect, full_rows, full_cols)), f"{what}: registers differ from the documented layout"
        assert unused.guard_intact() and src.guard_intact()

    # Round trips: the stored tensor equals the input and nothing outside it was written.
    for lp, lwhat in LOAD_PATHS.items():
        for sp, swhat in STORE_PATHS.items():
            out = Placed.poisoned(rows, cols, DTYPES[mem], aligned)
            tk.run(name, src.buf, out.buf, out.buf, args=(rows, cols, *src.args(), *out.args(), lp, sp))
            assert same(out.view, expect), f"{lwhat} then {swhat}: wrong values"
            assert out.guard_intact(), f"{lwhat} then {swhat}: wrote outside the tensor"


OFFSET_ENTRIES = [
    ("bf16", "bf16", 32, 64), ("fp32", "fp32", 16, 16), ("fp32", "fp16", 32, 32),
]


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("reg,mem,R,C", OFFSET_ENTRIES, ids=lambda v: str(v))
@pytest.mark.parametrize("corner", [(1, 1, 0, 0), (0, 1, 1, 0), (1, 0, 1, 1)], ids=["rc-to-00", "0c-to-r0", "r0-to-rc"])
def test_register_tile_inside_larger_shared_tile(tk, reg, mem, R, C, layout, corner):
    """load(rt, st, r, c) reads block (r0, c0) of a 2R x 2C shared tile; store(st, rt, r, c) writes it over (r1, c1)."""
    r0, c0, r1, c1 = corner[0] * R, corner[1] * C, corner[2] * R, corner[3] * C
    x = randn(2 * R, 2 * C, dtype=DTYPES[mem])
    out = poison(torch.empty_like(x))
    tk.run(f"mem_rt_offset/{reg}/{mem}/{layout}/{R}x{C}", x, out, args=(r0, c0, r1, c1))
    expect = x.clone()
    expect[r1:r1 + R, c1:c1 + C] = x[r0:r0 + R, c0:c0 + C].to(DTYPES[reg]).to(DTYPES[mem])
    assert same(out, expect)
