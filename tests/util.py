"""Helpers shared by the CPU and GPU tests: whether the extension and its kernel families are built, and the shapes
of the arguments the ops' rules are tested with."""
from __future__ import annotations

import pytest
import torch


def families_built(*families: str) -> bool:
    """Whether the extension is built with every one of these kernel families. False where no extension was built;
    an extension that exists but fails to load raises, so that a broken build fails the tests instead of skipping
    them."""
    from tk_ops import _ext
    from tk_ops.errors import ExtensionNotBuiltError
    try:
        return set(families) <= set(_ext.built_families())
    except ExtensionNotBuiltError as e:
        if isinstance(e.__cause__, ModuleNotFoundError):
            return False
        raise


def requires_families(*families: str):
    """A skip mark (a module's pytestmark) for tests of kernels that this build may not include."""
    names = " and ".join(f"'{f}'" for f in families)
    return pytest.mark.skipif(not families_built(*families), reason=f"the {names} kernels are not in this build (configs.py)")


def skip_unless_built(what: str, family: str | None = None) -> None:
    """Skip the calling test where the extension, which registers `what` (the ops and their C++ rules, no GPU
    needed), is not built, or was built without `family`'s kernels."""
    from tk_ops import _ext
    from tk_ops.errors import ExtensionNotBuiltError
    try:
        _ext.extension()
    except ExtensionNotBuiltError as e:
        pytest.skip(f"{what}: compiled into the extension, which is not built here ({e})")
    if family is not None and family not in _ext.built_families():
        pytest.skip(f"this build of the extension has no '{family}' kernels (configs.py)")


def empty(*shape, dtype=torch.bfloat16, device="cpu") -> torch.Tensor:
    """An argument for the rules' tests, which look at shapes, dtypes, devices and strides only."""
    return torch.empty(*shape, dtype=dtype, device=device)


def read_in_place(t: torch.Tensor) -> bool:
    """Whether the kernels' TMA reads this (B, H, N, D) view without a copy (the rule is kernels/common/bhnd_tensors.h):
    D dense, the other strides multiples of 8 elements."""
    return t.stride(3) == 1 and all(t.shape[i] == 1 or t.stride(i) % 8 == 0 for i in range(3))


def cpu_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """A stand-in for tk_ops.nn's GEMM on the CPU: the product in float32, rounded to x's dtype."""
    return torch.nn.functional.linear(x.float(), w.float(), None if b is None else b.float()).to(x.dtype)
