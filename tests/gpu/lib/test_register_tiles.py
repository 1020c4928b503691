"""Register tiles: layout round trip, initialisers, copy across dtypes, swap_layout, transpose_sep."""
import pytest
import torch

from ..util import poison

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}
SHAPES = [(16, 16), (32, 64), (64, 32), (16, 128)]
LAYOUTS = ["row", "col"]


def shape_id(s):
    return f"{s[0]}x{s[1]}"


def rand(shape, dtype):
    return torch.randn(*shape, device="cuda").to(DTYPES[dtype])


def close_in_fp8(out, ref, what):
    """CUDA's and torch's float -> fp8 rounding may part at a rare tie, so allow one fp8 step on a
    few values; a layout or conversion error moves values by far more, or moves most of them."""
    step_rel, step_abs = (0.125, 2.0 ** -9) if out.dtype == torch.float8_e4m3fn else (0.25, 2.0 ** -16)
    o, r = out.float(), ref.float()
    assert torch.isfinite(o).all(), f"{what}: non-finite values"
    far = ((o - r).abs() > step_rel * r.abs() + step_abs).sum().item()
    assert far == 0, f"{what}: {far} values off by more than one fp8 step"
    same = (out.view(torch.uint8) == ref.view(torch.uint8)).float().mean().item()
    assert same >= 0.9, f"{what}: only {same:.3f} of the values are bit-identical"


def exact(out, ref, what):
    assert out.shape == ref.shape, what
    # Through float: exact for every dtype here, and a NaN (poison) never compares equal.
    assert torch.equal(out.float(), ref.float()), f"{what}: {(out.float() != ref.float()).sum().item()} elements differ"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "fp8e4m3"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_layout_roundtrip(tk, layout, dtype, shape):
    x = rand(shape, dtype)
    out = poison(torch.empty_like(x))
    tk.run(f"rt_io/{dtype}/{layout}/{shape_id(shape)}", x, out)
    exact(out, x, "load/store through the documented fragment order")


INITS = {"zero": 0.0, "one": 1.0, "pos_infty": float("inf"), "neg_infty": float("-inf")}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("which", list(INITS))
def test_init(tk, layout, dtype, shape, which):
    out = poison(torch.empty(*shape, device="cuda", dtype=DTYPES[dtype]))
    tk.run(f"rt_init/{dtype}/{layout}/{shape_id(shape)}", out, args=(list(INITS).index(which),))
    exact(out, torch.full_like(out, INITS[which]), which)


COPY_PAIRS = [("fp32", "bf16"), ("bf16", "fp32"), ("fp32", "fp16"), ("fp16", "fp32"), ("fp16", "bf16"),
              ("bf16", "fp16"), ("fp32", "fp8e4m3"), ("fp8e4m3", "fp32"), ("bf16", "fp8e5m2"),
              ("fp8e5m2", "bf16"), ("fp8e5m2", "fp8e4m3")]
COPY_CASES = ([(src, dst, s) for src, dst in COPY_PAIRS for s in [(16, 16), (64, 32)]]
              + [("fp32", "bf16", (32, 64)), ("fp32", "bf16", (16, 128))])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("src,dst,shape", COPY_CASES, ids=lambda v: shape_id(v) if isinstance(v, tuple) else v)
def test_copy_dtype(tk, layout, src, dst, shape):
    x = rand(shape, src)
    out = poison(torch.empty(*shape, device="cuda", dtype=DTYPES[dst]))
    tk.run(f"rt_copy/{src}_to_{dst}/{layout}/{shape_id(shape)}", x, out)
    ref = x.float().to(DTYPES[dst]) if src.startswith("fp8") or dst.startswith("fp8") else x.to(DTYPES[dst])
    if dst.startswith("fp8"):
        close_in_fp8(out, ref, f"copy {src} -> {dst}")
    else:
        exact(out, ref, f"copy {src} -> {dst}")


ALL_DTYPES = ["fp32", "bf16", "fp16", "fp8e4m3"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_swap_layout(tk, layout, dtype, shape):
    """Loaded in one layout, swapped, stored through the other layout's order: same matrix."""
    x = rand(shape, dtype)
    out = poison(torch.empty_like(x))
    tk.run(f"rt_swap/{dtype}/{layout}/{shape_id(shape)}", x, out)
    exact(out, x, f"swap_layout from {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_transpose_sep(tk, layout, dtype, shape):
    x = rand(shape, dtype)
    out = poison(torch.empty(shape[1], shape[0], device="cuda", dtype=x.dtype))
    tk.run(f"rt_transpose/{dtype}/{layout}/{shape_id(shape)}", x, out)
    exact(out, x.t().contiguous(), "transpose_sep")
