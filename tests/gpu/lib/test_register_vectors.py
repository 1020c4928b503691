"""Register vectors: initialisers, copy across dtypes and layouts (naive/ortho/align), named
maps, and whole-vector reductions. Outputs hold one row per replica lane (rt_io.cuh), so every
lane's copy of every element is checked."""
import pytest
import torch

from ..util import poison, rel_err


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8e4m3": torch.float8_e4m3fn}
LAYOUTS = ["naive", "ortho", "align"]
REPLICAS = {"naive": 1, "ortho": 4, "align": 8}
LENGTHS = [16, 48, 128]


def replicated(out, ref, what, exact=True, tol=0.0):
    """out: (replicas, n); every row must equal ref (bit-exact, or within tol relative)."""
    assert torch.equal(out.float(), out[:1].float().expand_as(out)), f"{what}: replica lanes disagree"
    if exact:
        assert torch.equal(out[0].float(), ref.to(out.dtype).float()), f"{what}: not bit-exact"
    else:
        err = rel_err(out[0], ref)
        assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"


INITS = {"zero": 0.0, "one": 1.0, "pos_infty": float("inf"), "neg_infty": float("-inf")}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [16, 48])
@pytest.mark.parametrize("which", list(INITS))
def test_init(tk, dtype, layout, n, which):
    out = poison(torch.empty(REPLICAS[layout], n, device="cuda", dtype=DTYPES[dtype]))
    tk.run(f"rv_init/{dtype}/{layout}/{n}", out, args=(list(INITS).index(which),))
    replicated(out, torch.full((n,), INITS[which], device="cuda"), which)


COPY_CASES = (
    [(t, ls, t, ld, n) for t in ["fp32", "bf16"] for ls in LAYOUTS for ld in LAYOUTS for n in LENGTHS]
    + [(s, l, d, l, 64) for l in LAYOUTS for s, d in [("fp32", "bf16"), ("bf16", "fp32"), ("fp32", "fp16"),
                                                       ("fp16", "fp32"), ("fp32", "fp8e4m3"), ("fp8e4m3", "fp32")]]
    + [("fp32", "naive", "bf16", "align", 64), ("bf16", "align", "fp32", "ortho", 64),
       ("fp16", "ortho", "fp32", "naive", 64), ("fp8e4m3", "naive", "bf16", "ortho", 64)])


@pytest.mark.parametrize("ts,ls,td,ld,n", COPY_CASES, ids=lambda v: str(v))
def test_copy(tk, ts, ls, td, ld, n):
    x = torch.randn(n, device="cuda").to(DTYPES[ts])
    out = poison(torch.empty(REPLICAS[ld], n, device="cuda", dtype=DTYPES[td]))
    tk.run(f"rv_copy/{ts}_{ls}_to_{td}_{ld}/{n}", x, out)
    ref = x.float().to(DTYPES[td])
    if td.startswith("fp8"):
        # CUDA's and torch's float -> fp8 rounding may part at a rare tie: allow one fp8 step on a
        # few values; a layout error moves values by far more, or moves most of them.
        assert torch.equal(out.float(), out[:1].float().expand_as(out)), "replica lanes disagree"
        o, r = out[0].float(), ref.float()
        assert ((o - r).abs() <= 0.125 * r.abs() + 2.0 ** -9).all(), "values off by more than one fp8 step"
        assert (out[0].view(torch.uint8) == ref.view(torch.uint8)).float().mean().item() >= 0.9
    else:
        replicated(out, ref, f"copy {ts}/{ls} -> {td}/{ld}")


MATH_DTYPES = ["fp32", "bf16", "fp16"]
TOL = {"fp32": 1e-5, "bf16": 8e-3, "fp16": 1e-3}
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
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "max": torch.maximum, "min": torch.minimum}
SCALAR = 0.375


@pytest.mark.parametrize("dtype", MATH_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(tk, dtype, layout, n, op):
    ref_fn, domain, exact = UNARY[op]
    x = domain(torch.randn(n, device="cuda")).to(DTYPES[dtype])
    out = poison(torch.empty(REPLICAS[layout], n, device="cuda", dtype=x.dtype))
    tk.run(f"rv_unary/{dtype}/{layout}/{n}", x, out, args=(list(UNARY).index(op),))
    replicated(out, ref_fn(x.double()), op, exact, TOL[dtype])


@pytest.mark.parametrize("dtype", MATH_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("form", ["vector", "scalar"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(tk, dtype, layout, n, form, op):
    a = torch.randn(n, device="cuda").to(DTYPES[dtype])
    b = torch.randn(n, device="cuda")
    if op == "div":
        b = torch.where(b < 0, b - 0.5, b + 0.5)
    b = b.to(DTYPES[dtype])
    s = torch.full((1,), SCALAR, device="cuda", dtype=a.dtype)
    out = poison(torch.empty(REPLICAS[layout], n, device="cuda", dtype=a.dtype))
    tk.run(f"rv_binary/{dtype}/{layout}/{n}", a, b, s, out, args=(list(BINARY).index(op), int(form == "scalar")))
    rhs = b.double() if form == "vector" else torch.full((n,), SCALAR, device="cuda", dtype=torch.float64)
    replicated(out, BINARY[op](a.double(), rhs), f"{op} ({form})", op in ("max", "min"), TOL[dtype])


REDUCE = ["max", "min", "sum", "prod"]


def reduction_data(op, n):
    """Data whose reduction is exact in every dtype and any order, so results compare bit for bit
    (see test_register_reductions.py)."""
    if op in ("max", "min"):
        return torch.randn(n, device="cuda")
    if op == "sum":
        return torch.randint(-2, 3, (n,), device="cuda").float()
    u = torch.rand(n, device="cuda")
    k = (u > 0.95).float() - (u < 0.05).float()
    sign = torch.randint(0, 2, (n,), device="cuda").float() * 2 - 1
    return sign * torch.exp2(k)


@pytest.mark.parametrize("dtype", MATH_DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("with_acc", [False, True], ids=["plain", "acc"])
@pytest.mark.parametrize("op", REDUCE)
def test_reduce(tk, dtype, layout, n, with_acc, op):
    x = reduction_data(op, n).to(DTYPES[dtype])
    acc = reduction_data(op, 1).to(DTYPES[dtype])
    out = poison(torch.empty(32, device="cuda", dtype=x.dtype))
    tk.run(f"rv_reduce/{dtype}/{layout}/{n}", x, acc, out, args=(REDUCE.index(op), int(with_acc)))
    xd = x.double()
    r = {"max": xd.max(), "min": xd.min(), "sum": xd.sum(), "prod": xd.prod()}[op]
    if with_acc:
        a = acc.double()[0]
        r = {"max": torch.maximum(a, r), "min": torch.minimum(a, r), "sum": a + r, "prod": a * r}[op]
    ref = r.reshape(1).expand(32)
    assert torch.equal(out.float(), out[:1].float().expand(32)), "lanes disagree"
    assert torch.equal(out.float(), ref.to(x.dtype).float()), f"{op}: {out[0].item()} != {ref[0].item()}"
