"""Exceptions raised by tk_ops.

Every error derives from `TkOpsError` (catch that for anything from this package) and from the
builtin exception a caller would expect for its kind, so `except ValueError` keeps working too.
"""


class TkOpsError(Exception):
    """Base of every exception tk_ops raises on purpose."""


class ExtensionNotBuiltError(TkOpsError, RuntimeError):
    """The compiled extension tk_ops._C is missing or cannot be loaded."""


class FamilyNotBuiltError(TkOpsError, RuntimeError):
    """The extension was built without the kernel family an op needs (see configs.py)."""


class UnsupportedDeviceError(TkOpsError, RuntimeError):
    """The GPU is not one the kernels were compiled for (they need sm_90: H100/H200)."""


class DeviceMismatchError(TkOpsError, ValueError):
    """A tensor is on the CPU, or tensors of one call are on different devices."""


class InputError(TkOpsError, ValueError):
    """An argument has the wrong shape, size, layout or value."""


class DTypeError(TkOpsError, TypeError):
    """An argument has a dtype (or type) the op does not accept."""


class BackwardNotBuiltError(TkOpsError, NotImplementedError):
    """The op was asked for a gradient that tk_ops does not compute yet."""


def refuse_gradients(op: str, tensors) -> None:
    """Raise BackwardNotBuiltError if grad mode is on and any of `tensors` (None allowed) requires a gradient: for
    ops whose backward is not built, so that training fails loudly instead of silently getting no gradient."""
    import torch

    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise BackwardNotBuiltError(
            f"{op}: the backward is not built yet, so no input may require a gradient; "
            "call it under torch.no_grad() or pass detached tensors")
