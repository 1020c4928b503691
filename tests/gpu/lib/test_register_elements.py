"""Register tiles: for_each_pair visits every element once with its (row, column), zips several tiles, and
reports which of the lane's two rows / columns a pair is on; lane_row and leads_row agree with it."""
import pytest
import torch

from ..util import poison

SHAPES = [(16, 16), (32, 64), (64, 32), (16, 128)]


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_for_each_pair(tk, layout, shape):
    rows, cols = shape
    x = torch.randn(rows, cols, device="cuda")
    index, half, x_out = (poison(torch.empty(rows, cols, device="cuda")) for _ in range(3))
    mismatches = torch.zeros(1, dtype=torch.int32, device="cuda")
    tk.run(f"rt_elements/fp32/{layout}/{rows}x{cols}", x, index, half, x_out, mismatches)
    expected_index = torch.arange(rows * cols, device="cuda", dtype=torch.float32).reshape(rows, cols)
    assert torch.equal(index, expected_index), "for_each_pair reported a (row, column) that is not the element's"
    r = torch.arange(rows, device="cuda")[:, None].expand(rows, cols)
    c = torch.arange(cols, device="cuda")[None, :].expand(rows, cols)
    # Row layout: a lane holds rows g and g + 8 of each base tile; column layout: columns g and g + 8.
    expected_half = ((r if layout == "row" else c) % 16 >= 8).float()
    assert torch.equal(half, expected_half), "pair_pos.half does not say which of the lane's rows / columns"
    assert torch.equal(x_out, x + 1), "the zipped tile's pairs were not visited in step with the others"
    assert mismatches.item() == 0, "lane_row / leads_row disagree with the visitor"
