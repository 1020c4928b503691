"""Per-thread raw accesses of include/kittens/ops/warp/memory/raw.cuh (tests/gpu/lib/kernels/mem_raw.cu): shared-memory
words at every width and in mixed widths, the 16-byte fill, and the handshake between two blocks over global memory
(release_add after plain stores, or after TMA stores and fence_async_global; acquire_load before plain loads)."""
import pytest
import torch

from ..util import poison

THREADS = 128  # as in mem_raw.cu
WIDTHS = [1, 2, 4]


def words(n: int) -> torch.Tensor:
    """n random 32-bit words (int32 on the device: the kernels read them as uint32)."""
    return torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32, device="cuda")


def from_neighbour(x: torch.Tensor, per_thread: int) -> torch.Tensor:
    """What thread t reads: the words thread t + 1 wrote (the last thread reads thread 0's)."""
    return x.view(THREADS, per_thread).roll(-1, dims=0).flatten()


@pytest.mark.parametrize("n", WIDTHS)
def test_shared_words_round_trip(tk, n):
    x = words(THREADS * n)
    out = poison(torch.empty_like(x))
    tk.run(f"raw/words/{n}", x, out)
    assert torch.equal(out, from_neighbour(x, n)), f"{n}-word store then load does not give the words back"


@pytest.mark.parametrize("store, load", [(s, l) for s in WIDTHS for l in WIDTHS if s != l])
def test_shared_word_order_across_widths(tk, store, load):
    x = words(THREADS * 4)
    out = poison(torch.empty_like(x))
    tk.run(f"raw/order/store{store}/load{load}", x, out)
    assert torch.equal(out, from_neighbour(x, 4)), \
        f"words stored {store} at a time read back {load} at a time in another order (word 0 is the lowest address)"


def test_fill_shared_16(tk):
    x = words(THREADS)
    out = poison(torch.empty(THREADS * 4, dtype=torch.int32, device="cuda"))
    tk.run("raw/fill16", x, out)
    assert torch.equal(out, x.roll(-1).repeat_interleave(4)), "fill_shared_16 did not write its word to all 16 bytes"


def round_values(rounds_done: int, n: int, dtype) -> torch.Tensor:
    """The data of the last round the producer wrote (mem_raw.cu's round_value)."""
    return (4096 * (rounds_done - 1) + torch.arange(n, device="cuda") + 1).to(dtype)


def check_handshake(status, data, rounds, dtype):
    consumed, wrong, consumer_timed_out, producer_timed_out = status.tolist()
    assert not consumer_timed_out, "block 1 never acquired a round block 0 released (lost release or acquire)"
    assert not producer_timed_out, "block 0 never acquired block 1's hand-back"
    assert wrong == 0, f"block 1 read {wrong} stale or partial values after acquiring the rounds"
    assert consumed == rounds
    assert torch.equal(data, round_values(rounds, data.numel(), dtype))


@pytest.mark.parametrize("rounds", [1, 64])
def test_release_add_publishes_plain_stores(tk, rounds):
    n = 8 * THREADS + 5  # not a multiple of the block: some threads write one element more
    data = torch.zeros(n, dtype=torch.int32, device="cuda")
    counters = torch.zeros(2, dtype=torch.int32, device="cuda")
    status = torch.zeros(4, dtype=torch.int32, device="cuda")
    tk.run("raw/handshake/plain", data, counters, status, args=(n, rounds))
    check_handshake(status, data, rounds, torch.int32)
    assert counters.tolist() == [rounds, rounds]


@pytest.mark.parametrize("rounds", [1, 64])
def test_fence_async_global_publishes_tma_stores(tk, rounds):
    data = torch.zeros(32 * 64, dtype=torch.float32, device="cuda")  # one 32 x 64 fp32 tile, as in mem_raw.cu
    counters = torch.zeros(2, dtype=torch.int32, device="cuda")
    status = torch.zeros(4, dtype=torch.int32, device="cuda")
    tk.run("raw/handshake/tma", data, counters, status, args=(rounds,))
    check_handshake(status, data, rounds, torch.float32)
    assert counters.tolist() == [rounds, rounds]
