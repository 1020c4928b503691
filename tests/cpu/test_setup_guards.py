"""The install's guards (python/tk_ops/_build_config.py, run by setup.py before anything compiles): a torch that pip's
build isolation hides, and a torch built for another CUDA major version than the toolkit's (or for no CUDA at all),
stop the install with the command that fixes it. The functions are fed versions; setup.py itself runs in a copy of
the tree against a stand-in torch (no pip, no compiler)."""
import subprocess
import sys
from pathlib import Path

import pytest

from tk_ops import _build_config as bc

from .toolchain import ROOT

NVCC_13_0 = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
             "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n")
FIX_13_0 = "pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu130"


def fake_toolkit(root: Path, nvcc_says: str | None = NVCC_13_0, version_json: str | None = None) -> Path:
    """A CUDA_HOME holding the runtime header setup.py looks for, an nvcc that prints `nvcc_says`, a version.json."""
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda_runtime_api.h").write_text("// stub\n")
    if nvcc_says is not None:
        (root / "bin").mkdir()
        nvcc = root / "bin" / "nvcc"
        nvcc.write_text("#!/bin/sh\ncat <<'EOF'\n" + nvcc_says + "EOF\n")
        nvcc.chmod(0o755)
    if version_json is not None:
        (root / "version.json").write_text(version_json)
    return root


def test_toolkit_version_from_nvcc():
    assert bc.parse_nvcc_version(NVCC_13_0) == "13.0"
    assert bc.parse_nvcc_version("Cuda compilation tools, release 12.8, V12.8.93") == "12.8"
    assert bc.parse_nvcc_version("command not found") is None


def test_toolkit_version_from_version_json():
    assert bc.parse_version_json('{"cuda": {"name": "CUDA SDK", "version": "12.6.3"}}') == "12.6"
    assert bc.parse_version_json('{"nvcc": {}}') is None
    assert bc.parse_version_json("not json") is None


def test_toolkit_version_reads_nvcc_first_then_version_json(tmp_path):
    both = fake_toolkit(tmp_path / "both", version_json='{"cuda": {"version": "12.9.1"}}')
    assert bc.toolkit_cuda_version(both) == "13.0"  # the compiler that builds the kernels wins
    json_only = fake_toolkit(tmp_path / "json", nvcc_says=None, version_json='{"cuda": {"version": "12.9.1"}}')
    assert bc.toolkit_cuda_version(json_only) == "12.9"
    assert bc.toolkit_cuda_version(tmp_path / "nothing") is None


def test_torch_index_follows_the_toolkit():
    assert bc.torch_index_url("13.0") == "https://download.pytorch.org/whl/cu130"
    assert bc.torch_index_url("12.8") == "https://download.pytorch.org/whl/cu128"
    assert bc.torch_install_command("13.0") == FIX_13_0


@pytest.mark.parametrize("torch_cuda, toolkit", [("13.0", "13.0"), ("13.0", "13.1"), ("12.4", "12.8"), ("13.0", None)])
def test_same_major_version_passes(torch_cuda, toolkit):
    assert bc.cuda_mismatch(torch_cuda, toolkit, "2.14.1", "/usr/local/cuda") is None


def test_major_version_mismatch_names_both_and_the_fix():
    message = bc.cuda_mismatch("12.8", "13.0", "2.9.1+cu128", "/usr/local/cuda")
    assert message is not None
    assert "2.9.1+cu128" in message and "CUDA 12.8" in message and "CUDA 13.0" in message
    assert "/usr/local/cuda" in message and FIX_13_0 in message
    assert "CUDA_HOME" in message and bc.INSTALL_COMMAND in message
    older = bc.cuda_mismatch("13.0", "12.8", "2.14.1", "/opt/cuda-12.8")
    assert "https://download.pytorch.org/whl/cu128" in older and "CUDA 13 toolkit" in older


def test_cpu_only_torch_is_refused():
    message = bc.cuda_mismatch(None, "13.0", "2.14.1+cpu", "/usr/local/cuda")
    assert message is not None and "CPU-only" in message and "2.14.1+cpu" in message and FIX_13_0 in message
    unknown_toolkit = bc.cuda_mismatch(None, None, "2.14.1+cpu", "/usr/local/cuda")
    assert unknown_toolkit is not None and "CPU-only" in unknown_toolkit and "--index-url" in unknown_toolkit


def test_missing_torch_says_what_to_add():
    message = bc.torch_missing_message(ModuleNotFoundError("No module named 'torch'"))
    assert "No module named 'torch'" in message and "--no-build-isolation" in message
    assert 'pip install --no-build-isolation ".[bench,test]"' in message


# ---------------------------------------------------------------- setup.py itself, on a stand-in torch

def setup_tree(root: Path) -> Path:
    """A copy of setup.py with what it reads before the guards: configs.py, one family, the build config."""
    (root / "kernels" / "gemm").mkdir(parents=True)
    (root / "kernels" / "gemm" / "gemm.cu").write_text("// stub\n")
    (root / "kernels" / "module.cpp").write_text("// stub\n")
    (root / "configs.py").write_text('KERNELS = ["gemm"]\n')
    (root / "python" / "tk_ops").mkdir(parents=True)
    for name in ("_build_config.py", "__init__.py"):
        (root / "python" / "tk_ops" / name).write_text((ROOT / "python" / "tk_ops" / name).read_text())
    for name in ("setup.py", "README.md"):
        (root / name).write_text((ROOT / name).read_text())
    return root


def run_setup(tree: Path, fake_site: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(fake_site), "HOME": str(tree)}
    return subprocess.run([sys.executable, "setup.py", "--version"], cwd=tree, capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def test_setup_py_without_torch_asks_for_no_build_isolation(tmp_path):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)  # what an isolated build environment amounts to: no importable torch
    (site / "torch" / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    res = run_setup(setup_tree(tmp_path / "tree"), site)
    assert res.returncode != 0
    assert "--no-build-isolation" in res.stderr and 'pip install --no-build-isolation ".[bench,test]"' in res.stderr


def test_setup_py_stops_on_a_cuda_major_mismatch(tmp_path):
    toolkit = fake_toolkit(tmp_path / "cuda")
    site = tmp_path / "site"
    (site / "torch" / "utils").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        '__version__ = "2.9.1+cu128"\n\n\nclass version:\n    cuda = "12.8"\n')
    (site / "torch" / "utils" / "__init__.py").write_text("")
    (site / "torch" / "utils" / "cpp_extension.py").write_text(
        f"CUDA_HOME = {str(toolkit)!r}\nBuildExtension = CUDAExtension = None\n")
    res = run_setup(setup_tree(tmp_path / "tree"), site)
    assert res.returncode != 0
    assert "CUDA 12.8" in res.stderr and "CUDA 13.0" in res.stderr and FIX_13_0 in res.stderr
