"""GPU tests: they need an sm_90 (Hopper) device and skip with the reason otherwise."""
from __future__ import annotations

import pytest

from . import tklib


def _hopper_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (GPU tests need an H100/H200)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"needs an sm_90 GPU (H100/H200); found sm_{major}{minor}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _hopper_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    here = str(config.rootpath / "tests" / "gpu")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tk():
    """The library unit-test kernels, built once per session."""
    return tklib.TestLib(tklib.build())


def poison(t):
    """Fill an output buffer with NaN (or a sentinel for integer/fp8 types) before a kernel runs,
    so an element the kernel never wrote cannot pass a comparison."""
    import torch
    if t.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return t.fill_(float("nan"))
    if t.element_size() == 1:  # fp8: 0x7F is NaN in both e4m3 and e5m2; fill the bytes, return the tensor
        t.view(torch.uint8).fill_(0x7F)
        return t
    return t.fill_(-12345)
