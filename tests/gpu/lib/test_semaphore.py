"""Semaphore (mbarrier) behaviour: tests/gpu/lib/kernels/semaphore.cu."""
import torch

from ..util import poison


def test_phase_parity_and_arrival_counts(tk):
    out = torch.full((8,), -1, dtype=torch.int32, device="cuda")
    tk.run("semaphore/phases", out)
    assert out[:7].tolist() == [0, 0, 1, 0, 1, 0, 1]


def test_producer_consumer_pingpong(tk):
    rounds = 24
    out = poison(torch.empty(rounds * 32, dtype=torch.int32, device="cuda"))
    tk.run("semaphore/pingpong", out, args=(rounds,))
    want = (7 * torch.arange(rounds, dtype=torch.int32, device="cuda") + 1).repeat_interleave(32)
    assert torch.equal(out, want), "a consumer read a stale or future value: phase tracking is off"


def test_tma_completes_phases(tk):
    n = 5
    src = torch.randn(n * 32, 64, device="cuda").to(torch.bfloat16)
    tiles = poison(torch.empty(n, 32, 64, device="cuda", dtype=torch.bfloat16))
    vecs = poison(torch.empty(n, 64, device="cuda", dtype=torch.bfloat16))
    tk.run("semaphore/tma_phases", src, tiles, vecs, args=(n,))
    assert torch.equal(tiles, src.view(n, 32, 64))
    assert torch.equal(vecs, src[:n])
