"""group<N> register slices (kernels: group_register.cu). A group block has N * RT::rows rows;
warp w's register row block h is rows 16*(N*h + w) .. +15, the wgmma accumulator order.

The dump path writes each lane's registers at the positions that convention and rt_layout.cuh
give, so it pins group::load(rt, st) and group::load(rt, gl) to the convention; the round trips
then check the stores (and that nothing is written outside a ragged tensor).
"""
import pytest
import torch

from ..util import poison
from .test_memory_helpers import DEVICE, DTYPES, Placed, ceil_to, same, zero_padded, randn

ENTRIES = [("fp32", "bf16", "row"), ("fp32", "bf16", "col"), ("bf16", "bf16", "row"), ("bf16", "bf16", "col"),
           ("fp32", "fp32", "row")]
SHAPES = [(16, 16), (16, 64), (32, 64)]
LOAD_PATHS = {0: "group::load(rt, gl)", 1: "group::load(st, gl) + group::load(rt, st)"}
STORE_PATHS = {0: "group::store(gl, rt)", 1: "group::store(st, rt) + group::store(gl, st)"}
DUMP = 2


def _params():
    for n in (2, 4):
        for reg, mem, layout in ENTRIES:
            for r, c in SHAPES:
                block = n * r
                for cid, rows, cols, aligned in [("exact", 2 * block, 2 * c, True),
                                                 ("ragged", 2 * block - 21, 2 * c - 6, True),
                                                 ("ragged_odd", block + 9, c + 3, False)]:
                    yield pytest.param(n, reg, mem, layout, (r, c), (rows, cols, aligned),
                                       id=f"group{n}-{reg}-{mem}-{layout}-{r}x{c}-{cid}")


@pytest.mark.parametrize("n,reg,mem,layout,tile,case", list(_params()))
def test_group_register_slices(tk, n, reg, mem, layout, tile, case):
    (R, C), (rows, cols, aligned) = tile, case
    name = f"group_rt/group{n}/{reg}/{mem}/{layout}/{R}x{C}"
    x = randn(rows, cols, dtype=DTYPES[mem])
    expect = x.to(DTYPES[reg]).to(DTYPES[mem])
    src = Placed.holding(x, aligned)
    full_rows, full_cols = ceil_to(rows, n * R), ceil_to(cols, C)

    for lp, what in LOAD_PATHS.items():
        dump = poison(torch.empty(full_rows, full_cols, dtype=DTYPES[mem], device=DEVICE))
        unused = Placed.poisoned(rows, cols, DTYPES[mem], aligned)
        tk.run(name, src.buf, unused.buf, dump, args=(rows, cols, *src.args(), *unused.args(), lp, DUMP))
        assert same(dump, zero_padded(expect, full_rows, full_cols)), f"{what}: slices differ from the row convention"

    for lp, lwhat in LOAD_PATHS.items():
        for sp, swhat in STORE_PATHS.items():
            out = Placed.poisoned(rows, cols, DTYPES[mem], aligned)
            tk.run(name, src.buf, out.buf, out.buf, args=(rows, cols, *src.args(), *out.args(), lp, sp))
            assert same(out.view, expect), f"{lwhat} then {swhat}: wrong values"
            assert out.guard_intact(), f"{lwhat} then {swhat}: wrote outside the tensor"
