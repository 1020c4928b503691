"""kittens::opt_in_shared (include/kittens/common/shared_opt_in.cuh; tests/gpu/lib/kernels/shared_opt_in.cu): a kernel
launched with more than 48 KB of dynamic shared memory runs after the opt-in, and the opt-in is made once per device.
"""
import pytest
import torch

DEFAULT_LIMIT = 48 * 1024  # what a kernel may launch with before any opt-in
BIG = 100 * 1024


def run(tk, name, opt_in, launch):
    """(words read back wrong, the kernel's dynamic shared-memory limit after the call)."""
    out = torch.zeros(2, dtype=torch.int32, device="cuda")
    tk.run(name, out, args=(opt_in, launch))
    return tuple(out.tolist())


def test_more_than_48kb_needs_the_opt_in(tk):
    assert run(tk, "shared_opt_in/never_opted_in", 0, 1024) == (0, DEFAULT_LIMIT)
    with pytest.raises(RuntimeError, match="CUDA error"):
        run(tk, "shared_opt_in/never_opted_in", 0, BIG)


def test_opt_in_once_per_device(tk):
    # One test: the record of opted-in devices lives as long as the test library, so the calls' order matters.
    assert run(tk, "shared_opt_in/opted_in", BIG, BIG) == (0, BIG), "the first opt-in did not allow the launch"
    assert run(tk, "shared_opt_in/opted_in", BIG, BIG) == (0, BIG), "a second opt-in on the same device failed"
    # A later call for the same device asks the driver for nothing: a smaller request leaves the limit alone.
    assert run(tk, "shared_opt_in/opted_in", 60 * 1024, BIG) == (0, BIG), "a repeated opt-in reached the driver"
