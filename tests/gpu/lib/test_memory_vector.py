"""Register vectors to and from global and shared memory, naive / ortho / align layouts
(kernels: mem_vector.cu). Block (x, y) moves chunk x (length N) of tensor row y.

Load paths: global -> register, global -> shared -> register. Store paths: register -> global,
register -> shared -> global, and a dump in which every lane writes every element it holds into
its own row, so the replicas of the ortho and align layouts are checked lane by lane.
"""
import pytest
import torch

from ..util import poison
from .test_memory_helpers import DEVICE, DTYPES, Placed, ceil_to, same, zero_padded, randn

ENTRIES = [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "bf16"), ("bf16", "fp32")]
LENGTHS = [16, 48, 64]
LOAD_PATHS = {0: "load(rv, gl)", 1: "load(sv, gl) + load(rv, sv)"}
STORE_PATHS = {0: "store(gl, rv)", 1: "store(sv, rv) + store(gl, sv)"}
DUMP = 2


def owned(layout: str, length: int) -> torch.Tensor:
    """(32, length) mask: which vector elements each lane holds, as rv_layout.cuh describes."""
    lane = torch.arange(32).view(32, 1)
    i = torch.arange(length).view(1, length)
    if layout == "naive":
        return (i % 32) == lane
    if layout == "ortho":
        return (i % 8) == lane // 4
    return (i % 8) // 2 == lane % 4


def _params():
    for reg, mem in ENTRIES:
        for layout in ("naive", "ortho", "align"):
            for n in LENGTHS:
                for cid, rows, cols, aligned in [("exact", 2, 2 * n, True), ("ragged", 3, 2 * n - 6, True),
                                                 ("ragged_odd", 2, n + 3, False)]:
                    yield pytest.param(reg, mem, layout, n, (rows, cols, aligned), id=f"{reg}-{mem}-{layout}-{n}-{cid}")


@pytest.mark.parametrize("reg,mem,layout,length,case", list(_params()))
def test_register_vector_paths(tk, reg, mem, layout, length, case):
    rows, cols, aligned = case
    name = f"mem_rv/{reg}/{mem}/{layout}/{length}"
    x = randn(rows, cols, dtype=DTYPES[mem])
    expect = x.to(DTYPES[reg]).to(DTYPES[mem])
    src = Placed.holding(x, aligned)
    chunks = ceil_to(cols, length) // length
    padded = zero_padded(expect, rows, chunks * length).view(rows, chunks, 1, length).expand(rows, chunks, 32, length)
    mask = owned(layout, length).to(DEVICE).view(1, 1, 32, length).expand(rows, chunks, 32, length)

    for lp, what in LOAD_PATHS.items():
        dump = poison(torch.empty(rows, chunks, 32, length, dtype=DTYPES[mem], device=DEVICE))
        unused = Placed.poisoned(rows, cols, DTYPES[mem], aligned)
        tk.run(name, src.buf, unused.buf, dump, args=(rows, cols, *src.args(), *unused.args(), lp, DUMP))
        assert same(dump[mask], padded[mask]), f"{what}: a lane holds a wrong element"

    for lp, lwhat in LOAD_PATHS.items():
        for sp, swhat in STORE_PATHS.items():
            out = Placed.poisoned(rows, cols, DTYPES[mem], aligned)
            tk.run(name, src.buf, out.buf, out.buf, args=(rows, cols, *src.args(), *out.args(), lp, sp))
            assert same(out.view, expect), f"{lwhat} then {swhat}: wrong values"
            assert out.guard_intact(), f"{lwhat} then {swhat}: wrote outside the tensor"
