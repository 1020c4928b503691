"""Access to the compiled kernels (tk_ops._C), and the tk_ops exceptions for what the ops raise.

`import tk_ops` never loads the extension: it is loaded on the first op call, so the package
imports (for references, docs, CPU tests) where the kernels were not or cannot be built, and the
error comes where an op is called, saying what to do. Loading it defines the ops (torch.ops.tk_ops.*).

Every rule about the arguments lives in the ops themselves (kernels/<family>/binding.cpp, one function per
op shared by its CUDA, Meta and CPU kernels), so a wrapper is one call, which turns the op's errors into the
tk_ops exceptions:

    return call("gemm", "matmul", "tk_ops.matmul", a, b)
"""
from __future__ import annotations

import importlib

import torch

from . import errors
from .errors import DTypeError, ExtensionNotBuiltError, FamilyNotBuiltError, InputError, TkOpsError

EXTENSION = "tk_ops._C"
REBUILD = "run `pip install --no-build-isolation .` in the tk_ops repository, in a CUDA environment with PyTorch"

# (module, families) once loaded. Failures are not remembered, so a fixed install is picked up.
_loaded: tuple[object, frozenset[str]] | None = None
# {phrase: exception class} of device errors (kernels/common/error_phrases.h), read once from the extension.
_phrases: dict[str, type] | None = None
# The families whose eager entry points (ops()) were handed out, after require() found them built.
_eager: dict[str, "_EagerOps"] = {}


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


class _EagerOps:
    """torch.ops.tk_ops's ops as eager calls reach them: the C++ entry point that OpOverload.__call__ calls
    (``torch.ops.tk_ops.matmul.default._op``), one Python frame and the overload lookup less per call. Same
    dispatch, autograd and torch-function handling; torch.compile cannot trace these, hence ops()."""

    def __getattr__(self, name: str):
        entry = getattr(torch.ops.tk_ops, name).default._op
        setattr(self, name, entry)
        return entry


_EAGER_OPS = _EagerOps()


def ops(family: str):
    """The ops of the namespace torch.ops.tk_ops, after checking that `family`'s kernels are in the build: while
    torch.compile traces, torch.ops.tk_ops itself; in eager mode, their entry points (_EagerOps)."""
    if torch.compiler.is_compiling():
        return require(family)
    found = _eager.get(family)
    if found is None:
        require(family)
        found = _eager[family] = _EAGER_OPS
    return found


def if_built(query):
    """query()'s answer about the build (the head dimensions its kernels take, say), or None where the extension or
    the kernel family is not built: a module made on a machine without the kernels (to load or inspect weights)
    leaves the check to the op's first call."""
    try:
        return query()
    except (ExtensionNotBuiltError, FamilyNotBuiltError):
        return None


def call(family: str, op: str, name: str, *args):
    """torch.ops.tk_ops.<op>(*args) for the public function `name`, after checking that `family`'s kernels are
    built; an error about the arguments is raised as the tk_ops exception for it (op_error). Under torch.compile
    errors pass through unchanged: dynamo reports them with their message."""
    try:
        return getattr(ops(family), op)(*args)
    except Exception as e:
        if torch.compiler.is_compiling():
            raise
        raise op_error(e, name, op, args) from None


def op_error(e: Exception, name: str, op: str, args: tuple) -> Exception:
    """The tk_ops exception for `e`, raised by calling torch.ops.tk_ops.<op> with `args` from the function the
    user calls, `name`; `e` itself when it is not about the arguments.

    The ops' checks raise ValueError (InputError, or DeviceMismatchError when the message holds the device
    phrase), TypeError (DTypeError) and NotImplementedError (UnsupportedDeviceError, by its phrase); torch's
    own argument parsing raises RuntimeError for an argument of the wrong Python type, which the op's schema
    names here."""
    if isinstance(e, TkOpsError):
        return e
    message = str(e)
    if isinstance(e, (ValueError, NotImplementedError)):
        for phrase, kind in _device_phrases().items():
            if phrase in message:
                return kind(message)
    if isinstance(e, ValueError):
        return InputError(message)
    if isinstance(e, TypeError):
        return DTypeError(message)
    if isinstance(e, RuntimeError):
        return _wrong_argument_type(name, getattr(torch.ops.tk_ops, op), args) or e
    return e


def _device_phrases() -> dict[str, type]:
    global _phrases
    if _phrases is None:
        _phrases = {phrase: getattr(errors, kind) for phrase, kind in extension().error_phrases().items()}
    return _phrases


# What a schema type accepts, as the message names it: (Python types, words).
_SCHEMA_TYPES = {
    "Tensor": ((torch.Tensor,), "a torch.Tensor"),
    "Optional[Tensor]": ((torch.Tensor, type(None)), "a torch.Tensor or None"),
    "float": ((int, float), "a number"),
    "Optional[float]": ((int, float, type(None)), "a number or None"),
    "bool": ((bool,), "a bool"),
    "ScalarType": ((torch.dtype,), "a torch.dtype"),
    "str": ((str,), "a str"),
}


def _wrong_argument_type(name: str, op, args: tuple) -> Exception | None:
    """DTypeError for a non-tensor where the schema has a tensor, InputError for another argument of the wrong
    Python type; None if no argument is."""
    for arg, value in zip(op.default._schema.arguments, args):
        declared = str(arg.real_type)
        accepted = _SCHEMA_TYPES.get(declared)
        if accepted is None or isinstance(value, accepted[0]):
            continue
        kind = DTypeError if "Tensor" in declared else InputError
        return kind(f"{name}: {arg.name} must be {accepted[1]}, got {type(value).__name__}")
    return None
