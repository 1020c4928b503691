"""What a user sees when the kernels cannot run: no extension, a family left out of the build, CPU
tensors, tensors on two devices, a GPU other than sm_90, arguments of the wrong Python type. No GPU needed:
the ops' checks run in their CPU and Meta kernels (where the extension is built), CUDA tensors are faked with
FakeTensorMode where the op is never reached, and the messages of the GPU-only cases are given to the
translation the wrappers use."""
import functools
import sys
import textwrap
import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tk_ops
from tk_ops import _ext
from tk_ops.errors import (DeviceMismatchError, DTypeError, ExtensionNotBuiltError, FamilyNotBuiltError,
                           TkOpsError, UnsupportedDeviceError)

from .. import background
from .toolchain import run_python


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    # Each test starts with the extension not yet loaded.
    monkeypatch.setattr(_ext, "_loaded", None)
    monkeypatch.setattr(_ext, "_phrases", None)
    monkeypatch.setattr(_ext, "_eager", {})


@pytest.fixture
def no_extension(monkeypatch):
    monkeypatch.setitem(sys.modules, "tk_ops._C", None)  # import tk_ops._C now raises ModuleNotFoundError


@pytest.fixture
def built():
    """The compiled extension (the ops and their checks live there); skips where it was not built."""
    try:
        return _ext.extension()
    except ExtensionNotBuiltError as e:
        pytest.skip(f"the ops' checks are compiled into the extension, which is not built here ({e})")


def fake_extension(monkeypatch, families):
    module = types.ModuleType("tk_ops._C")
    module.families = lambda: list(families)
    monkeypatch.setitem(sys.modules, "tk_ops._C", module)


@pytest.fixture
def fake_cuda():
    """Makes tensors that claim to live on a GPU, without one."""
    mode = FakeTensorMode()

    def make(*shape, dtype=torch.bfloat16, device="cuda:0"):
        with mode:
            return torch.empty(*shape, dtype=dtype, device=device)
    return make


# -- the extension ------------------------------------------------------------------------------

def test_missing_extension_says_how_to_build(no_extension):
    with pytest.raises(ExtensionNotBuiltError) as info:
        _ext.require("gemm")
    msg = str(info.value)
    assert "installed without its compiled kernels" in msg
    assert "pip install --no-build-isolation ." in msg and "CUDA" in msg
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, TkOpsError)


def test_broken_extension_is_told_apart(monkeypatch):
    class Refuse:  # finds tk_ops._C but fails to load it, as an ABI mismatch would
        def find_spec(self, name, path=None, target=None):
            if name == "tk_ops._C":
                raise ImportError("undefined symbol: _ZN3c104cuda9SomethingEv")
            return None
    monkeypatch.delitem(sys.modules, "tk_ops._C", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Refuse(), *sys.meta_path])
    with pytest.raises(ExtensionNotBuiltError, match="cannot be loaded.*undefined symbol"):
        _ext.require("gemm")


def test_family_not_in_build(monkeypatch):
    fake_extension(monkeypatch, ["attention"])
    with pytest.raises(FamilyNotBuiltError) as info:
        _ext.require("gemm")
    msg = str(info.value)
    assert "the 'gemm' kernels were not selected in configs.py" in msg
    assert "add 'gemm' to KERNELS" in msg and "reinstall" in msg and "attention" in msg


def test_family_in_build_gives_the_op_namespace(monkeypatch):
    fake_extension(monkeypatch, ["gemm"])
    assert _ext.require("gemm") is torch.ops.tk_ops
    assert _ext.built_families() == ["gemm"]


_IMPORT_WITHOUT_EXTENSION = textwrap.dedent("""
    import sys
    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name == "tk_ops._C":
                raise ModuleNotFoundError("No module named 'tk_ops._C'", name=name)
    sys.meta_path.insert(0, Hide())
    import tk_ops
    assert "tk_ops._C" not in sys.modules
    assert callable(tk_ops.matmul) and callable(tk_ops.scaled_mm) and tk_ops.nn.Linear and tk_ops.reference
    try:
        tk_ops._ext.require("gemm")
    except tk_ops.errors.ExtensionNotBuiltError as e:
        print("OK", e)
""")


def background_jobs():
    # A fresh interpreter takes seconds to import torch: it runs while other tests do.
    return {"ext_errors:import": functools.partial(run_python, "-c", _IMPORT_WITHOUT_EXTENSION)}


def test_import_needs_no_extension():
    # A fresh interpreter where tk_ops._C cannot be found: the import works and does not even try to
    # load the extension; the first op call reports the missing build.
    res = background.result("ext_errors:import")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("OK") and "installed without its compiled kernels" in res.stdout


# -- devices: the ops' rule (kernels/common/checks.h), the Python exceptions they become ---------------------

def test_cpu_tensors_through_the_op(built):
    a = torch.randn(64, 64).bfloat16()
    with pytest.raises(DeviceMismatchError, match="tk_ops.matmul: tk_ops kernels run on CUDA tensors, but a is on cpu; "
                                                  r"move it with \.cuda\(\)") as info:
        tk_ops.matmul(a, a)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TkOpsError)
    with pytest.raises(DeviceMismatchError, match="but q is on cpu"):
        tk_ops.attention(*(torch.randn(1, 2, 8, 64).bfloat16() for _ in range(3)))


def test_raw_ops_raise_the_builtin_kinds(built):
    """torch.ops.tk_ops.* raise ValueError / TypeError with the same messages; the wrappers add the tk_ops class."""
    a = torch.randn(64, 64).bfloat16()
    with pytest.raises(ValueError, match="run on CUDA tensors") as info:
        torch.ops.tk_ops.matmul(a, a)
    assert not isinstance(info.value, TkOpsError)
    with pytest.raises(TypeError, match="a must be torch.bfloat16, got torch.float32"):
        torch.ops.tk_ops.matmul(a.float(), a)


def test_the_rules_come_before_the_device(built):
    """A CPU call reports a bad shape or dtype first, as the GPU call would."""
    with pytest.raises(DTypeError, match="bfloat16"):
        tk_ops.matmul(torch.randn(16, 16), torch.randn(16, 16).bfloat16())


def test_non_tensors_are_rejected(built):
    a = torch.randn(16, 16).bfloat16()
    with pytest.raises(DTypeError, match="tk_ops.matmul: b must be a torch.Tensor, got list") as info:
        tk_ops.matmul(a, [1.0])
    assert isinstance(info.value, TypeError)
    with pytest.raises(DTypeError, match="tk_ops.nn.Linear: x must be a torch.Tensor, got int"):
        tk_ops.nn.Linear(16, 16)(3)


def test_device_phrases_name_their_exceptions(built):
    """The ops word device errors with phrases that the extension lists; each becomes its tk_ops exception."""
    phrases = built.error_phrases()
    assert set(phrases.values()) == {"DeviceMismatchError", "UnsupportedDeviceError"}
    two_gpus = ValueError("tk_ops.matmul: tk_ops kernels run on CUDA tensors of one GPU, but b is on cuda:1 and a "
                          "on cuda:0")
    err = _ext.op_error(two_gpus, "tk_ops.matmul", "matmul", ())
    assert isinstance(err, DeviceMismatchError) and isinstance(err, ValueError) and str(err) == str(two_gpus)
    for cap in ("80", "89", "100", "120"):
        old_gpu = NotImplementedError(f"tk_ops.matmul: tk_ops kernels need a Hopper GPU (sm_90: H100/H200); this is "
                                      f"sm_{cap} (cuda:0)")
        err = _ext.op_error(old_gpu, "tk_ops.matmul", "matmul", ())
        assert isinstance(err, UnsupportedDeviceError) and isinstance(err, RuntimeError), cap
        assert f"tk_ops kernels need a Hopper GPU (sm_90: H100/H200); this is sm_{cap}" in str(err)
    # Anything not about the arguments passes through unchanged.
    launch = RuntimeError("tk_ops.matmul kernel failed: invalid argument")
    assert _ext.op_error(launch, "tk_ops.matmul", "matmul", (torch.ones(1), torch.ones(1))) is launch


# -- the ops, end to end up to the kernel call --------------------------------------------------------

def test_op_without_extension(no_extension, fake_cuda):
    a, b = fake_cuda(64, 64), fake_cuda(64, 64)
    with pytest.raises(ExtensionNotBuiltError, match="installed without its compiled kernels"):
        tk_ops.matmul(a, b)


def test_op_without_its_family(monkeypatch, fake_cuda):
    fake_extension(monkeypatch, [])
    a = fake_cuda(64, 64, dtype=torch.float8_e4m3fn)
    w = fake_cuda(32, 64, dtype=torch.float8_e4m3fn)
    s = fake_cuda(1, dtype=torch.float32)
    with pytest.raises(FamilyNotBuiltError, match="'gemm' kernels were not selected in configs.py"):
        tk_ops.scaled_mm(a, w.t(), s, s)


# -- torch.compile --------------------------------------------------------------------------------------

def test_first_load_inside_torch_compile_keeps_one_graph(monkeypatch):
    """The first tk_ops call of a process may sit inside a compiled model: loading the extension (an import)
    must not split the graph, so fullgraph=True still compiles."""
    fake_extension(monkeypatch, ["gemm"])

    def f(x):
        _ext.ops("gemm")
        return x + 1
    assert _ext._loaded is None
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="eager")(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0))
    assert _ext._loaded is not None


def test_ops_trace_under_torch_compile(built):
    """The wrappers trace into one graph (their Meta kernels give the shapes), and a bad argument stops the
    compile with the op's own message."""
    def meta(*shape):
        return torch.empty(*shape, device="meta", dtype=torch.bfloat16)
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: tk_ops.matmul(a, b) * 2, fullgraph=True, backend="eager")
    assert f(meta(3, 16, 64), meta(64, 72)).shape == (3, 16, 72)
    with pytest.raises(Exception, match="N=71 must be a multiple of 8"):
        f(meta(16, 64), meta(64, 71))
    g = torch.compile(lambda q, k, v: tk_ops.attention(q, k, v, causal=True), fullgraph=True, backend="eager",
                      dynamic=True)
    for n in (50, 51):
        assert g(meta(2, 4, n, 64), meta(2, 2, n + 9, 64), meta(2, 2, n + 9, 64)).shape == (2, 4, n, 64)
