"""GPU tests (lib/: the tile library's primitives, ops/: the PyTorch ops): they need an sm_90 (Hopper)
device and skip with the reason otherwise."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


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
    # A conftest hook sees every collected item, not only those below its folder: mark ours only.
    mine = [item for item in items if HERE in Path(item.fspath).resolve().parents]
    if not mine:
        return
    reason = _hopper_reason()
    if reason is None:
        if importlib.util.find_spec("tk_ops._C") is None:
            raise pytest.UsageError("a Hopper GPU is present but tk_ops._C is not built, so every GPU test would "
                                    "skip: install with `pip install --no-build-isolation .` first")
        return
    skip = pytest.mark.skip(reason=reason)
    for item in mine:
        item.add_marker(skip)
