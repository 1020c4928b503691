"""Finding and running the CUDA tools the tests compile with (nvcc, cuobjdump), and the extension's
compiler flags (python/tk_ops/_build_config.py) that every test compile starts from."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_build_config():
    # By path, as setup.py loads it: importing the tk_ops package would import torch, which compiling
    # does not need (the GPU test library and tools import this module too).
    path = ROOT / "python" / "tk_ops" / "_build_config.py"
    spec = importlib.util.spec_from_file_location("_tk_ops_build_config", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_config = _load_build_config()


def find_nvcc() -> str | None:
    """nvcc from CUDA_HOME, else PATH, else /usr/local/cuda."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


def nvcc_or_skip() -> str:
    """nvcc, or skip the calling test with what to install."""
    nvcc = find_nvcc()
    if nvcc is None:
        import pytest
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    return nvcc


def cuobjdump_or_skip() -> str:
    """cuobjdump, or skip the calling test with what to install."""
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        import pytest
        pytest.skip("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    return cuobjdump


def find_cuobjdump() -> str | None:
    """cuobjdump from the nvidia-cuda-cuobjdump wheel (site-packages/nvidia/**/bin), PATH or CUDA_HOME."""
    for entry in sys.path:
        nvidia = Path(entry) / "nvidia"
        if nvidia.is_dir():
            for cand in sorted(nvidia.glob("**/bin/cuobjdump")):
                if os.access(cand, os.X_OK):
                    return str(cand)
    found = shutil.which("cuobjdump")
    if found:
        return found
    nvcc = find_nvcc()
    cand = Path(nvcc).resolve().parent / "cuobjdump" if nvcc else None
    return str(cand) if cand and cand.is_file() else None


def python_env() -> dict[str, str]:
    """Environment for a child Python that must import the same tk_ops as these tests (installed,
    or the source tree's python/ folder added by tests/conftest.py)."""
    import tk_ops
    package_parent = str(Path(tk_ops.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def run(cmd: list[str], timeout: int = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs a tool from the repository root, capturing stdout and stderr as text."""
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def run_python(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Runs `python <args>` from the repository root in a child that imports the same tk_ops."""
    return run([sys.executable, *args], timeout=timeout, env=python_env())


def compile_object(nvcc: str, source: Path | str, *extra: str) -> tuple[int, str]:
    """Compiles one file (host and device code, an object that is thrown away) with the extension's
    flags and `extra`: nvcc's exit code and everything it printed."""
    res = run([nvcc, *build_config.nvcc_args(ROOT, *extra, "-c", "-o", os.devnull, str(source))])
    return res.returncode, res.stdout + res.stderr
