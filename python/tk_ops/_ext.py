"""Access to the compiled kernels (tk_ops._C) and the checks every op makes before it reaches one.

`import tk_ops` never loads the extension: it is loaded on the first op call, so the package
imports (for references, docs, CPU tests) where the kernels were not or cannot be built, and the
error comes where an op is called, saying what to do.

    ops = require("gemm")          # torch.ops.tk_ops, once the gemm family is known to be built
    check_device(a, b)             # CUDA tensors, one device, an sm_90 GPU
    out = ops.matmul(a, b)
"""
from __future__ import annotations

import importlib

import torch

from .errors import (DeviceMismatchError, DTypeError, ExtensionNotBuiltError, FamilyNotBuiltError,
                     UnsupportedDeviceError)

EXTENSION = "tk_ops._C"
REBUILD = "run `pip install --no-build-isolation .` in the tk_ops repository, in a CUDA environment with PyTorch"
HOPPER = (9, 0)

# (module, families) once loaded. Failures are not remembered, so a fixed install is picked up.
_loaded: tuple[object, frozenset[str]] | None = None
# Device indices already found to be sm_90, so the capability query runs once per device.
_hopper_devices: set[int] = set()


def extension():
    """The tk_ops._C module, loaded on first use."""
    return _load()[0]


def built_families() -> list[str]:
    """The kernel families compiled into tk_ops._C (configs.py KERNELS at build time)."""
    return sorted(_load()[1])


def _load():
    global _loaded
    if _loaded is None:
        try:
            module = importlib.import_module(EXTENSION)
        except ModuleNotFoundError as e:
            if e.name != EXTENSION:
                raise
            raise ExtensionNotBuiltError(
                f"tk_ops was installed without its compiled kernels ({EXTENSION} is missing); {REBUILD}.") from e
        except ImportError as e:
            raise ExtensionNotBuiltError(
                f"{EXTENSION} exists but cannot be loaded ({e}); it was probably built against another torch "
                f"or CUDA version: {REBUILD} again.") from e
        _loaded = (module, frozenset(module.families()))
    return _loaded


@torch.compiler.assume_constant_result
def _has_family(family: str) -> bool:
    # Loading the extension is an import, which torch.compile cannot trace: it would split the graph (and
    # fail fullgraph=True) whenever the first tk_ops call of a process sits inside a compiled model. Marked
    # constant, this runs once while tracing and its answer is baked into the graph.
    return family in _load()[1]


def require(family: str):
    """torch.ops.tk_ops, after checking that `family`'s kernels are in the build."""
    if not _has_family(family):
        have = ", ".join(sorted(_load()[1])) or "none"
        raise FamilyNotBuiltError(
            f"the {family!r} kernels were not selected in configs.py (this build has: {have}); "
            f"add {family!r} to KERNELS in configs.py and reinstall with `pip install --no-build-isolation .`")
    return torch.ops.tk_ops


def check_device(*tensors, **named) -> torch.device:
    """Checks that every tensor (positional, or named for clearer messages; None is skipped) is a CUDA
    tensor, all on one device, and that the device is a Hopper GPU. Returns that device."""
    items = [(f"argument {i}", t) for i, t in enumerate(tensors)] + [(repr(k), t) for k, t in named.items()]
    device = None
    for what, t in items:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise DTypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise DeviceMismatchError(
                f"tk_ops kernels run on CUDA tensors, but {what} is on {t.device}; move it with .cuda()")
        if device is None:
            device = t.device
        elif t.device != device:
            raise DeviceMismatchError(
                f"all tensors of one call must be on the same GPU; {what} is on {t.device}, not {device}")
    if device is None:
        raise ValueError("check_device needs at least one tensor")
    check_gpu(device)
    return device


@torch.compiler.assume_constant_result
def _is_hopper(index: int) -> bool:
    # A device query and module state: evaluated while tracing, not traced (see _has_family).
    if index in _hopper_devices:
        return True
    if torch.cuda.get_device_capability(index) != HOPPER:
        return False
    _hopper_devices.add(index)
    return True


def check_gpu(device: torch.device) -> None:
    """Raises UnsupportedDeviceError unless `device` is an sm_90 GPU, the only target compiled."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if not _is_hopper(index):
        major, minor = torch.cuda.get_device_capability(index)
        raise UnsupportedDeviceError(
            f"tk_ops kernels need a Hopper GPU (sm_90: H100/H200); this is sm_{major}{minor} (cuda:{index})")
