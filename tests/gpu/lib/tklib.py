"""Builds the library's unit-test kernels (tests/gpu/lib/kernels/*.cu) into one shared library and
calls them through ctypes on torch tensors.

The kernels include no torch headers, so each file compiles quickly; files compile in
parallel (one nvcc per core) and the result is cached under build/tk_tests keyed by a hash of
every header and source. TK_TEST_FILES=maps,memory limits the build to those files.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...cpu.toolchain import ROOT, build_config, find_nvcc

KERNELS = Path(__file__).resolve().parent / "kernels"
INCLUDE = ROOT / "include" / "kittens"
BUILD = ROOT / "build" / "tk_tests"

# The extension's flags, plus what a test library needs: position-independent code (it is a shared
# library loaded through ctypes), line tables (so compute-sanitizer and device faults name source
# lines), and the harness headers next to the test kernels.
NVCC_FLAGS = build_config.nvcc_args(ROOT, "-Xcompiler", "-fPIC", "-lineinfo", f"-I{KERNELS}")


def nvcc() -> str:
    found = find_nvcc()
    if not found:
        raise RuntimeError("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    return found


def sources() -> list[Path]:
    wanted = os.environ.get("TK_TEST_FILES")
    files = sorted(p for p in KERNELS.glob("*.cu") if p.name != "harness.cu")
    if wanted:
        names = {w.strip() for w in wanted.split(",") if w.strip()}
        files = [p for p in files if p.stem in names]
    return [KERNELS / "harness.cu", *files]


def _digest(files: list[Path]) -> str:
    h = hashlib.sha256(" ".join(NVCC_FLAGS).encode())
    for p in sorted(INCLUDE.rglob("*.cuh")) + sorted(KERNELS.glob("*.cuh")) + files:
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def build(jobs: int | None = None) -> Path:
    files = sources()
    out_dir = BUILD / _digest(files)
    lib = out_dir / "libtk_tests.so"
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    compiler = nvcc()

    def compile_one(src: Path) -> Path:
        obj = out_dir / (src.stem + ".o")
        cmd = [compiler, *NVCC_FLAGS, "-c", str(src), "-o", str(obj)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"compiling {src.name} failed:\n{res.stderr[-8000:]}")
        return obj

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 4) as pool:
        objs = list(pool.map(compile_one, files))
    tmp = out_dir / "libtk_tests.so.tmp"
    arch = [f for f in build_config.NVCC_FLAGS if f.startswith("-gencode")]
    cmd = [compiler, "-shared", *arch, *map(str, objs), "-o", str(tmp)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"linking the test library failed:\n{res.stderr[-8000:]}")
    tmp.rename(lib)
    return lib


class TestLib:
    """The loaded test library: run(name, *tensors, args=(...)) launches one registered entry."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.tk_test_run.restype = ctypes.c_int
        self.lib.tk_test_run.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_longlong)]
        self.lib.tk_test_name.restype = ctypes.c_char_p
        self.lib.tk_test_error_string.restype = ctypes.c_char_p
        self._names = [self.lib.tk_test_name(i).decode() for i in range(self.lib.tk_test_count())]

    def names(self, prefix: str = "") -> list[str]:
        return [n for n in self._names if n.startswith(prefix)]

    def run(self, name: str, *tensors, args=()) -> None:
        import torch
        for t in tensors:
            if not (t.is_cuda and t.is_contiguous()):
                raise ValueError(f"{name}: test buffers must be contiguous CUDA tensors")
        ptrs = (ctypes.c_void_p * max(1, len(tensors)))(*[t.data_ptr() for t in tensors])
        ints = (ctypes.c_longlong * max(1, len(args)))(*[int(a) for a in args])
        torch.cuda.synchronize()
        code = self.lib.tk_test_run(name.encode(), ptrs, ints)
        if code == -1:
            raise KeyError(f"no test kernel named {name!r}")
        if code != 0:
            raise RuntimeError(f"{name}: CUDA error {code}: {self.lib.tk_test_error_string(code).decode()}")
