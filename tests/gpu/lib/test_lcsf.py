import pytest
import torch

from ..util import assert_close, poison


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("rows,cols", [(128, 64), (128 * 300, 64 * 7), (1000, 520), (64, 64 * 20)])
def test_lcsf_toy_block_sum(tk, rows, cols, dynamic):
    x = torch.randn(rows, cols, device="cuda")
    out = poison(torch.empty(rows, 64, device="cuda"))
    if dynamic:  # every band exactly once, whichever block draws it
        counter = torch.zeros(1, device="cuda", dtype=torch.int32)
        tk.run("lcsf_toy/block_sum_dynamic", x, out, counter, args=(rows, cols))
        # Each block draws its next id as it starts a task (the draw past the last band ends it): one per task.
        assert counter.item() == (rows + 127) // 128
    else:
        tk.run("lcsf_toy/block_sum", x, out, args=(rows, cols))
    blocks = (cols + 63) // 64
    padded = torch.zeros(rows, blocks * 64, device="cuda", dtype=torch.float64)
    padded[:, :cols] = x.double()
    ref = padded.view(rows, blocks, 64).sum(1)
    assert_close(out, ref, 1e-6, "LCSF block sum")
