"""Global <-> shared copies of tiles and vectors, per warp and per group<2>/<4>, synchronous
and through cp.async (kernels: mem_shared.cu).

Every run dumps the shared object element by element into a dense buffer of whole tiles (the
loaded values, and zeros past a ragged edge) and stores it back into a guarded output (equal to
the input, and not one byte written outside the tensor). The input's own guard bytes are not
zero, so a load that read outside the tensor would show up in the dump.
"""
import pytest
import torch

from ..util import poison
from .test_memory_helpers import DEVICE, DTYPES, Placed, ceil_to, same, tensor_cases, zero_padded, randn

MODES = {0: "load", 1: "load_async + load_async_wait", 2: "two load_async groups, load_async_wait<1>, <0>"}
WIDE = ("fp32", "bf16", "fp16")


def _tile_entries():
    for scope in ("warp", "group2", "group4"):
        shapes = [(16, 16), (64, 128)] + ([(32, 64), (128, 64), (16, 48)] if scope == "warp" else [])
        for d in WIDE:
            for s in shapes:
                yield scope, d, s
        for s in [(32, 64), (64, 128)] + ([(32, 96)] if scope == "warp" else []):
            yield scope, "fp8e4m3", s


def _vec_entries():
    for scope in ("warp", "group2", "group4"):
        for d in WIDE:
            for n in [16, 128] + ([64] if scope == "warp" else []):
                yield scope, d, n
        for n in (16, 64):
            yield scope, "fp8e4m3", n


def _run_all_modes(tk, name, x, rows, cols, aligned, unit_rows, unit_cols):
    src = Placed.holding(x, aligned)
    full_rows, full_cols = ceil_to(rows, unit_rows), ceil_to(cols, unit_cols)
    for mode, what in MODES.items():
        dump = poison(torch.empty(full_rows, full_cols, dtype=x.dtype, device=DEVICE))
        out = Placed.poisoned(rows, cols, x.dtype, aligned)
        tk.run(name, src.buf, out.buf, dump, args=(rows, cols, *src.args(), *out.args(), mode))
        assert same(dump, zero_padded(x, full_rows, full_cols)), f"{what}: shared contents wrong"
        assert same(out.view, x), f"{what}: stored tensor wrong"
        assert out.guard_intact(), f"{what}: store wrote outside the tensor"
        assert src.guard_intact()


def _tile_params():
    for scope, d, (r, c) in _tile_entries():
        for case in tensor_cases(r, c):
            yield pytest.param(scope, d, (r, c), case[1:], id=f"{scope}-{d}-{r}x{c}-{case[0]}")
    yield pytest.param("warp", "bf16", (32, 64), (100, 70, True), id="warp-bf16-32x64-100x70")
    yield pytest.param("warp", "fp32", (32, 64), (100, 70, False), id="warp-fp32-32x64-100x70_odd")


@pytest.mark.parametrize("scope,dtype,tile,case", list(_tile_params()))
def test_shared_tile_copies(tk, scope, dtype, tile, case):
    (R, C), (rows, cols, aligned) = tile, case
    x = randn(rows, cols, dtype=DTYPES[dtype])
    _run_all_modes(tk, f"mem_st/{scope}/{dtype}/{R}x{C}", x, rows, cols, aligned, R, C)


def _vec_params():
    for scope, d, n in _vec_entries():
        cases = [("exact", 3, 2 * n, True), ("ragged", 3, 2 * n - 5, True), ("ragged_odd", 2, 2 * n - 3, False),
                 ("short", 1, 5, True)]
        for cid, rows, cols, aligned in cases:
            yield pytest.param(scope, d, n, (rows, cols, aligned), id=f"{scope}-{d}-{n}-{cid}")


@pytest.mark.parametrize("scope,dtype,length,case", list(_vec_params()))
def test_shared_vector_copies(tk, scope, dtype, length, case):
    rows, cols, aligned = case
    x = randn(rows, cols, dtype=DTYPES[dtype])
    _run_all_modes(tk, f"mem_sv/{scope}/{dtype}/{length}", x, rows, cols, aligned, 1, length)
