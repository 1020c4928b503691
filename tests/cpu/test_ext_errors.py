"""What a user sees when the kernels cannot run: no extension, a family left out of the build, CPU
tensors, tensors on two devices, a GPU other than sm_90. No GPU needed: CUDA tensors are faked
with FakeTensorMode and the device capability is monkeypatched."""
import subprocess
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

from .toolchain import python_env


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    # Each test starts with the extension not yet loaded and no device known to be sm_90.
    monkeypatch.setattr(_ext, "_loaded", None)
    monkeypatch.setattr(_ext, "_hopper_devices", set())


@pytest.fixture
def no_extension(monkeypatch):
    monkeypatch.setitem(sys.modules, "tk_ops._C", None)  # import tk_ops._C now raises ModuleNotFoundError


def fake_extension(monkeypatch, families):
    module = types.ModuleType("tk_ops._C")
    module.families = lambda: list(families)
    monkeypatch.setitem(sys.modules, "tk_ops._C", module)


@pytest.fixture
def capability(monkeypatch):
    """Sets what torch.cuda.get_device_capability reports."""
    def set_to(major, minor):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
    return set_to


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


def test_import_needs_no_extension():
    # A fresh interpreter where tk_ops._C cannot be found: the import works and does not even try to
    # load the extension; the first op call reports the missing build.
    script = textwrap.dedent("""
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
    res = subprocess.run([sys.executable, "-c", script], env=python_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("OK") and "installed without its compiled kernels" in res.stdout


# -- devices ------------------------------------------------------------------------------------

def test_cpu_tensors_are_rejected(fake_cuda):
    with pytest.raises(DeviceMismatchError, match="CUDA tensors.*argument 0 is on cpu"):
        _ext.check_device(torch.ones(2), torch.ones(2))
    with pytest.raises(DeviceMismatchError, match="CUDA tensors.*argument 1 is on cpu.*cuda"):
        _ext.check_device(fake_cuda(2), torch.ones(2))


def test_cpu_tensors_through_the_op():
    a = torch.randn(64, 64).bfloat16()
    with pytest.raises(DeviceMismatchError, match="CUDA tensors") as info:
        tk_ops.matmul(a, a)
    assert isinstance(info.value, ValueError)


def test_non_tensors_are_rejected(fake_cuda):
    with pytest.raises(DTypeError, match="'b' must be a torch.Tensor, got list") as info:
        _ext.check_device(a=fake_cuda(2), b=[1.0])
    assert isinstance(info.value, TypeError)


def test_tensors_on_two_gpus(fake_cuda, capability):
    # Fake tensors cannot name a GPU the real runtime says is missing; with no GPU at all they can.
    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("a machine with exactly one GPU cannot fake a tensor on cuda:1")
    capability(9, 0)
    with pytest.raises(DeviceMismatchError, match="same GPU.*cuda:1"):
        _ext.check_device(fake_cuda(16, 16, device="cuda:0"), fake_cuda(16, 16, device="cuda:1"))


@pytest.mark.parametrize("cap", [(8, 0), (8, 9), (10, 0), (12, 0)])
def test_non_hopper_gpu(fake_cuda, capability, cap):
    capability(*cap)
    with pytest.raises(UnsupportedDeviceError) as info:
        _ext.check_device(fake_cuda(16, 16))
    assert f"tk_ops kernels need a Hopper GPU (sm_90: H100/H200); this is sm_{cap[0]}{cap[1]}" in str(info.value)


def test_hopper_gpu_passes(fake_cuda, capability):
    capability(9, 0)
    assert _ext.check_device(fake_cuda(16, 16), None, fake_cuda(8)) == torch.device("cuda:0")


# -- the ops, end to end up to the kernel call --------------------------------------------------------

def test_op_without_extension(no_extension, fake_cuda, capability):
    capability(9, 0)
    a, b = fake_cuda(64, 64), fake_cuda(64, 64)
    with pytest.raises(ExtensionNotBuiltError, match="installed without its compiled kernels"):
        tk_ops.matmul(a, b)


def test_op_without_its_family(monkeypatch, fake_cuda, capability):
    capability(9, 0)
    fake_extension(monkeypatch, [])
    a = fake_cuda(64, 64, dtype=torch.float8_e4m3fn)
    w = fake_cuda(32, 64, dtype=torch.float8_e4m3fn)
    s = fake_cuda(1, dtype=torch.float32)
    with pytest.raises(FamilyNotBuiltError, match="'gemm' kernels were not selected in configs.py"):
        tk_ops.scaled_mm(a, w.t(), s, s)


def test_op_on_wrong_gpu(fake_cuda, capability):
    capability(8, 0)
    with pytest.raises(UnsupportedDeviceError, match="this is sm_80"):
        tk_ops.matmul(fake_cuda(64, 64), fake_cuda(64, 64))


# -- torch.compile --------------------------------------------------------------------------------------

def test_first_load_inside_torch_compile_keeps_one_graph(monkeypatch, fake_cuda, capability):
    """The first tk_ops call of a process may sit inside a compiled model: loading the extension (an import)
    and the device query must not split the graph, so fullgraph=True still compiles."""
    fake_extension(monkeypatch, ["gemm"])
    capability(9, 0)
    device = fake_cuda(1).device

    def f(x):
        _ext.require("gemm")
        _ext.check_gpu(device)
        return x + 1
    assert _ext._loaded is None
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="eager")(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0))
    assert _ext._loaded is not None and 0 in _ext._hopper_devices
