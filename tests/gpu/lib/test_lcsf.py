import pytest
import torch

from ..util import assert_close, poison


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("rows,cols", [(128, 64), (128 * 300, 64 * 7), (1000, 520), (64, 64 * 20)])
def test_lcsf_toy_block_sum(tk, rows, cols, dynamic):
    x = torch.randn(rows, cols, device="cuda")
    out = poison(torch.empty(rows, 64, device="cuda"))
    if dynamic:  # every band exactly once, whichever block draws it
        counter = torch.zeros(2, device="cuda", dtype=torch.int32)
        tk.run("lcsf_toy/block_sum_dynamic", x, out, counter, args=(rows, cols))
        # The kernel leaves its counter zero, so the next launch can draw from it without a reset: run again on it.
        assert counter.tolist() == [0, 0], "the dynamic schedule must leave its task counter zero"
        first = out.clone()
        poison(out)
        tk.run("lcsf_toy/block_sum_dynamic", x, out, counter, args=(rows, cols))
        assert torch.equal(out, first), "a second launch on the same counter computed something else"
    else:
        tk.run("lcsf_toy/block_sum", x, out, args=(rows, cols))
    blocks = (cols + 63) // 64
    padded = torch.zeros(rows, blocks * 64, device="cuda", dtype=torch.float64)
    padded[:, :cols] = x.double()
    ref = padded.view(rows, blocks, 64).sum(1)
    assert_close(out, ref, 1e-6, "LCSF block sum")
