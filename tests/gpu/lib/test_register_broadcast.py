"""Register tiles: row/column broadcasts of a register vector (add_row ... div_col, max/min,
broadcast_row/col)."""
import pytest
import torch

from ..util import poison, rel_err

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [(16, 16), (32, 64), (64, 32), (16, 128)]
LAYOUTS = ["row", "col"]
TOL = {"fp32": 1e-6, "bf16": 8e-3, "fp16": 1e-3}
OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
       "max": torch.maximum, "min": torch.minimum, "broadcast": None}


def shape_id(s):
    return f"{s[0]}x{s[1]}"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("axis", ["row", "col"])
@pytest.mark.parametrize("op", list(OPS))
def test_broadcast(tk, layout, dtype, shape, axis, op):
    """axis=row: one vector value per tile row (col_vec, *_row); axis=col: one per column."""
    rows, cols = shape
    x = torch.randn(rows, cols, device="cuda").to(DTYPES[dtype])
    v = torch.randn(rows if axis == "row" else cols, device="cuda")
    if op == "div":
        v = torch.where(v < 0, v - 0.5, v + 0.5)
    v = v.to(DTYPES[dtype])
    out = poison(torch.empty_like(x))
    tk.run(f"rt_bcast_{axis}/{dtype}/{layout}/{shape_id(shape)}", x, v, out, args=(list(OPS).index(op),))
    vb = (v[:, None] if axis == "row" else v[None, :]).double().expand(rows, cols)
    ref = vb if op == "broadcast" else OPS[op](x.double(), vb)
    if op in ("broadcast", "max", "min"):
        assert torch.equal(out.float(), ref.to(out.dtype).float()), f"{op}_{axis}: not bit-exact"
    else:
        err = rel_err(out, ref)
        assert err <= TOL[dtype], f"{op}_{axis}: relative error {err:.2e}"
