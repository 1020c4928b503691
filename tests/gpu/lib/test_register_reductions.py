"""Register tiles: row_/col_ max, min, sum, prod, plain and accumulating. Every lane's copy of
each result is checked (the kernels store one row per replica lane)."""
import pytest
import torch

from ..util import poison

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [(16, 16), (32, 64), (64, 32), (16, 128)]
LAYOUTS = ["row", "col"]
OPS = ["max", "min", "sum", "prod"]


def shape_id(s):
    return f"{s[0]}x{s[1]}"


def replicas(tile_layout, axis):
    # Row reductions give the col_vec: ortho (4 copies, one per quad lane) for row-layout tiles,
    # align (8 copies, one per quad) for col-layout tiles; column reductions the other way round.
    return 4 if (tile_layout == "row") == (axis == "row") else 8


def reduction_data(op, shape):
    """Data whose reductions are exact in every dtype and in any order, so the results compare bit
    for bit and a wrong or missing element cannot hide inside a rounding tolerance:
      max/min: normals (exact anyway);
      sum: integers in [-2, 2]: partial sums of up to 128 terms stay within 256, exact in bf16;
      prod: signed powers of two, mostly +-1: products stay far inside fp16's exponent range."""
    if op in ("max", "min"):
        return torch.randn(*shape, device="cuda")
    if op == "sum":
        return torch.randint(-2, 3, shape, device="cuda").float()
    u = torch.rand(*shape, device="cuda")
    k = (u > 0.95).float() - (u < 0.05).float()
    sign = torch.randint(0, 2, shape, device="cuda").float() * 2 - 1
    return sign * torch.exp2(k)


def reference(x, acc, op, axis, with_acc):
    dim = 1 if axis == "row" else 0
    x = x.double()
    if op == "max":
        r = x.amax(dim)
    elif op == "min":
        r = x.amin(dim)
    elif op == "sum":
        r = x.sum(dim)
    else:
        r = x.prod(dim)
    if with_acc:
        a = acc.double()
        r = {"max": torch.maximum, "min": torch.minimum, "sum": torch.add, "prod": torch.mul}[op](a, r)
    return r


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("axis", ["row", "col"])
@pytest.mark.parametrize("with_acc", [False, True], ids=["plain", "acc"])
@pytest.mark.parametrize("op", OPS)
def test_reduce(tk, layout, dtype, shape, axis, with_acc, op):
    rows, cols = shape
    n = rows if axis == "row" else cols
    x = reduction_data(op, (rows, cols)).to(DTYPES[dtype])
    acc = reduction_data(op, (n,)).to(DTYPES[dtype])
    reps = replicas(layout, axis)
    out = poison(torch.empty(reps, n, device="cuda", dtype=x.dtype))
    tk.run(f"rt_reduce_{axis}/{dtype}/{layout}/{shape_id(shape)}", x, acc, out,
           args=(OPS.index(op), int(with_acc)))
    ref = reference(x, acc, op, axis, with_acc)
    assert torch.equal(out, out[:1].expand_as(out)), "lanes holding the same element disagree"
    bad = (out[0].float() != ref.to(x.dtype).float()).sum().item()
    assert bad == 0, f"{axis}_{op}: {bad} of {n} results differ from the exact reduction"
