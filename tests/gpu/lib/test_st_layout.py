import pytest
import torch

from ..util import poison

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [(16, 16), (32, 32), (64, 64), (16, 128), (128, 48)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_shared_tile_roundtrip(tk, dtype, shape):
    x = torch.randn(*shape, device="cuda").to(DTYPES[dtype])
    out = poison(torch.empty_like(x))
    bad = torch.full((1,), -1, dtype=torch.int32, device="cuda")
    tk.run(f"st_layout/{dtype}/{shape[0]}x{shape[1]}", x, out, bad)
    assert bad.item() == 0, "swizzled offsets left the tile"
    assert torch.equal(out, x)


# (dtype, rows, cols, block cols), as registered in st_layout.cu
COL_BLOCKS = [("bf16", 64, 256, 128), ("bf16", 64, 96, 32), ("fp16", 16, 256, 64), ("fp32", 64, 128, 64)]


@pytest.mark.parametrize("case", COL_BLOCKS, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}-{c[3]}")
def test_col_block_views(tk, case):
    """st::col_block<C>(k) reads the tile's own columns C k .. C k + C - 1."""
    dtype, rows, cols, block = case
    x = torch.randn(rows, cols, device="cuda").to(DTYPES[dtype])
    out = poison(torch.empty_like(x))
    tk.run(f"st_col_block/{dtype}/{rows}x{cols}/{block}", x, out)
    assert torch.equal(out, x)


# (dtype, rows, cols, block rows), as registered in st_layout.cu
ROW_BLOCKS = [("bf16", 64, 256, 32), ("bf16", 64, 64, 16), ("fp16", 128, 96, 64), ("fp32", 64, 64, 32)]


@pytest.mark.parametrize("case", ROW_BLOCKS, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}-{c[3]}")
def test_row_block_views(tk, case):
    """st::chunk(j).row_block<R>(k) reads the tile's own rows R k .. R k + R - 1 of column chunk j."""
    dtype, rows, cols, block = case
    x = torch.randn(rows, cols, device="cuda").to(DTYPES[dtype])
    out = poison(torch.empty_like(x))
    tk.run(f"st_row_block/{dtype}/{rows}x{cols}/{block}", x, out)
    assert torch.equal(out, x)
