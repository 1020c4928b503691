"""Exceptions raised by tk_ops.

Every error derives from `TkOpsError` (catch that for anything from this package) and from the
builtin exception a caller would expect for its kind, so `except ValueError` keeps working too:

=========================  ============  ==========================================================
class                      also a        raised when
=========================  ============  ==========================================================
ExtensionNotBuiltError     RuntimeError  the compiled extension tk_ops._C is missing or cannot load
FamilyNotBuiltError        RuntimeError  the build lacks the kernel family an op needs
UnsupportedDeviceError     RuntimeError  the GPU is not sm_90 (H100 / H200)
DeviceMismatchError        ValueError    a tensor is on the CPU, or the tensors are on two devices
InputError                 ValueError    a shape, size, layout or option value breaks an op's rules
DTypeError                 TypeError     a tensor has a dtype the op does not take
=========================  ============  ==========================================================

Importing tk_ops never raises the first three: the extension loads on an op's first call.
"""


class TkOpsError(Exception):
    """Base of every exception tk_ops raises on purpose.

    Each concrete class below also derives from the builtin its kind calls for (``ValueError`` for bad
    arguments, ``TypeError`` for dtypes, ``RuntimeError`` for a missing build or an unsupported GPU), so code
    that catches the builtin keeps working. An error from tk_ops that is not a ``TkOpsError`` (a CUDA launch
    failure, out of memory) comes from PyTorch or the driver. The message starts with the public function that
    was called (``tk_ops.attention: ...``) and names the argument at fault where there is one.

    Example::

        try:
            o = tk_ops.attention(q, k, v)
        except tk_ops.TkOpsError as e:     # any tk_ops refusal, whatever its kind
            print(type(e).__name__, e)
    """


class ExtensionNotBuiltError(TkOpsError, RuntimeError):
    """The compiled extension tk_ops._C is missing or cannot be loaded.

    Raised by the first op call of a process (``import tk_ops`` itself never loads the extension) when tk_ops
    was installed without its kernels, or when tk_ops._C was built against another torch or CUDA version. The
    message says how to rebuild (``pip install --no-build-isolation .`` in a CUDA environment). Also a
    ``RuntimeError``; the fix is a rebuild, not a retry.

    Example::

        try:
            c = tk_ops.matmul(a, b)
        except tk_ops.errors.ExtensionNotBuiltError:
            c = a @ b                      # no kernels on this machine: plain PyTorch
    """


class FamilyNotBuiltError(TkOpsError, RuntimeError):
    """The extension was built without the kernel family an op needs.

    Raised by an op whose family (gemm, attention, based, mamba2, fftconv) was left out of ``KERNELS`` in
    configs.py when the extension was built; the message lists the families the build has. A module built on
    such a machine (``tk_ops.nn.Attention``, say) defers this to its first forward. Also a ``RuntimeError``.

    Example::

        try:
            y = tk_ops.fftconv(u, k)
        except tk_ops.errors.FamilyNotBuiltError as e:
            print(e)                       # names the missing family and the ones built
    """


class UnsupportedDeviceError(TkOpsError, RuntimeError):
    """The GPU is not one the kernels were compiled for: they need sm_90 (H100 / H200).

    Raised by an op called on tensors of another GPU (an A100, an RTX card, ...). The kernels use Hopper-only
    instructions (wgmma, TMA), so there is no slower path to fall back to. Also a ``RuntimeError``.

    Example::

        try:
            o = tk_ops.attention(q, k, v)
        except tk_ops.errors.UnsupportedDeviceError:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    """


class DeviceMismatchError(TkOpsError, ValueError):
    """A tensor is on the CPU, or tensors of one call are on different devices.

    Raised by every op given a CPU tensor (the kernels run on CUDA tensors only) or tensors on two GPUs; the
    message names the tensors and their devices. Also a ``ValueError``.

    Example::

        a = torch.randn(256, 256, dtype=torch.bfloat16)                  # on the CPU
        try:
            tk_ops.matmul(a, a)
        except tk_ops.errors.DeviceMismatchError:
            c = tk_ops.matmul(a.cuda(), a.cuda())
    """


class InputError(TkOpsError, ValueError):
    """An argument has the wrong shape, size, layout or value.

    Raised before anything runs when a shape disagrees with the others, a size is one the kernels do not
    take (an attention head dimension, a GEMM width that is not a multiple of 8, ...), a layout cannot be read,
    an option has the wrong Python type or an out-of-range value; the message names the argument, what it
    must be and what it got. Also a ``ValueError``.

    Example::

        q = torch.randn(1, 8, 128, 80, device="cuda", dtype=torch.bfloat16)   # head dimension 80
        try:
            tk_ops.attention(q, q, q)
        except tk_ops.errors.InputError as e:
            print(e)                       # "...: head_dim must be 64, 96, 128 or 256, got 80"
    """


class DTypeError(TkOpsError, TypeError):
    """An argument has a dtype (or type) the op does not accept.

    Raised when a tensor's dtype is not one the op takes (float32 where bfloat16 is needed, a float64 state,
    int64 offsets where int32 are needed), when tensors that must share a dtype do not, or when a non-tensor
    is passed where a tensor is required. Also a ``TypeError``.

    Example::

        a = torch.randn(256, 256, device="cuda")                         # float32
        try:
            tk_ops.matmul(a, a)
        except tk_ops.errors.DTypeError:
            c = tk_ops.matmul(a.bfloat16(), a.bfloat16())
    """
