"""Register tiles: named unary maps and binary maps (tile-tile in place, tile-scalar)."""

import pytest
import torch

from ..util import poison, rel_err

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [(16, 16), (32, 64), (64, 32), (16, 128)]
LAYOUTS = ["row", "col"]
# Results rounded once to the output type; fp32 transcendentals use the fast hardware forms.
TOL = {"fp32": 1e-5, "bf16": 8e-3, "fp16": 1e-3}


def shape_id(s):
    return f"{s[0]}x{s[1]}"


# name -> (reference on float64, input transform making the domain valid, exact?)
UNARY = {
    "exp": (torch.exp, lambda x: x, False),
    "exp2": (torch.exp2, lambda x: x, False),
    "log": (torch.log, lambda x: x.abs() + 0.1, False),
    "log2": (torch.log2, lambda x: x.abs() + 0.1, False),
    "abs": (torch.abs, lambda x: x, True),
    "relu": (torch.relu, lambda x: x, True),
    "neg": (torch.neg, lambda x: x, True),
    "sqrt": (torch.sqrt, lambda x: x.abs() + 0.01, False),
    "rsqrt": (torch.rsqrt, lambda x: x.abs() + 0.1, False),
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "max": torch.maximum, "min": torch.minimum,
}
SCALAR = 0.375  # exact in every dtype; splits random data for max/min


def check(out, ref64, dtype, exact, what):
    if exact:
        assert torch.equal(out.float(), ref64.to(out.dtype).float()), f"{what}: not bit-exact"
    else:
        err = rel_err(out, ref64)
        assert err <= TOL[dtype], f"{what}: relative error {err:.2e} > {TOL[dtype]:.0e}"


def away_from_zero(x):
    return torch.where(x < 0, x - 0.5, x + 0.5)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(tk, layout, dtype, shape, op):
    ref_fn, domain, exact = UNARY[op]
    x = domain(torch.randn(*shape, device="cuda")).to(DTYPES[dtype])
    out = poison(torch.empty_like(x))
    tk.run(f"rt_unary/{dtype}/{layout}/{shape_id(shape)}", x, out, args=(list(UNARY).index(op),))
    check(out, ref_fn(x.double()), dtype, exact, op)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("form", ["tile", "scalar"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(tk, layout, dtype, shape, form, op):
    a = torch.randn(*shape, device="cuda").to(DTYPES[dtype])
    b = torch.randn(*shape, device="cuda")
    b = (away_from_zero(b) if op == "div" else b).to(DTYPES[dtype])
    s = torch.full((1,), SCALAR, device="cuda", dtype=DTYPES[dtype])
    out = poison(torch.empty_like(a))
    tk.run(f"rt_binary/{dtype}/{layout}/{shape_id(shape)}", a, b, s, out,
           args=(list(BINARY).index(op), int(form == "scalar")))
    rhs = b.double() if form == "tile" else torch.full_like(a, SCALAR, dtype=torch.float64)
    ref = BINARY[op](a.double(), rhs)
    check(out, ref, dtype, op in ("max", "min") or (dtype == "fp32" and op != "div"), f"{op} ({form})")
