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
