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

