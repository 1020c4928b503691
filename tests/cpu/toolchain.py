"""Finding and running the CUDA tools the CPU tests compile with (nvcc, cuobjdump)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def run(cmd: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    """Runs a tool from the repository root, capturing stdout and stderr as text."""
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
