"""Which kernel families go into the `tk_ops._C` extension, and from which sources.

`setup.py` loads this file by path (the package is not importable while it is being built), and
the CPU tests import it to check the selection without compiling anything. It uses only the
standard library.

A family is a folder `kernels/<name>/` holding at least one `.cu` or `.cpp` file; folders with
only headers (shared helpers) are not families. `configs.py` at the repository root lists the
families to build in `KERNELS`.
"""
from __future__ import annotations

import importlib.util
import runpy
from dataclasses import dataclass
from pathlib import Path

SOURCE_SUFFIXES = (".cu", ".cpp")

# Compiler flags of the extension (setup.py) and of anything that must compile the kernels the same
# way (the tests and tools, through nvcc_args()). Include directories come from include_dirs().
NVCC_FLAGS = (
    "-std=c++20",
    "-gencode=arch=compute_90a,code=sm_90a",  # wgmma and setmaxnreg exist only on the "a" target
    "-O3",
    "--expt-relaxed-constexpr",
    "-DNDEBUG",
    "-diag-suppress=20012",  # "__host__ annotation ignored on an explicitly defaulted function" (CUDA headers)
)
CXX_FLAGS = ("-std=c++20", "-O3", "-DNDEBUG")
# Macro through which kernels/module.cpp learns the family names, as one C string literal.
FAMILIES_MACRO = "TK_OPS_FAMILIES"


class BuildConfigError(ValueError):
    """configs.py asks for something the source tree cannot build."""


@dataclass(frozen=True)
class BuildPlan:
    families: tuple[str, ...]
    sources: tuple[str, ...]  # POSIX paths relative to the repository root, module.cpp first

    @property
    def define(self) -> str:
        return families_define(self.families)


def include_dirs(root: Path) -> list[str]:
    """The header library and the kernels folder (so kernels can share headers as "common/x.cuh")."""
    return [str(Path(root) / "include" / "kittens"), str(Path(root) / "kernels")]


def nvcc_args(root: Path, *extra: str) -> list[str]:
    """nvcc arguments that compile device code as the extension does (NVCC_FLAGS and include_dirs), then
    `extra`: what one use adds on top (its output kind, -fPIC for a shared library, ...). The tests and
    tools that compile kernels or library code start from this, so they cannot drift from the build."""
    return [*NVCC_FLAGS, *(f"-I{d}" for d in include_dirs(root)), *extra]


def cuda_wheel_include_dirs() -> list[str]:
    """Header folders of the CUDA library wheels installed with torch (nvidia-cublas, -cusparse, ...).
    torch's ATen/cuda headers include cublas and cusparse headers that a minimal CUDA toolkit lacks;
    host compiles search these folders last (-idirafter), so the toolkit's own headers still win."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted({str(p) for loc in spec.submodule_search_locations for p in Path(loc).glob("*/include")
                   if p.is_dir()})


def family_sources(root: Path, family: str) -> list[str]:
    folder = Path(root) / "kernels" / family
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SOURCE_SUFFIXES)
    return [p.relative_to(root).as_posix() for p in files]


def available_families(root: Path) -> list[str]:
    kernels = Path(root) / "kernels"
    if not kernels.is_dir():
        return []
    return sorted(d.name for d in kernels.iterdir()
                  if d.is_dir() and not d.name.startswith((".", "_")) and family_sources(root, d.name))


def read_selection(root: Path) -> list[str]:
    """KERNELS from configs.py, checked to be a list of names."""
    path = Path(root) / "configs.py"
    if not path.is_file():
        raise BuildConfigError(f"{path} is missing; it must define KERNELS = [...] (the kernel families to build)")
    kernels = runpy.run_path(str(path)).get("KERNELS")
    if not isinstance(kernels, (list, tuple)) or not all(isinstance(k, str) for k in kernels):
        raise BuildConfigError(f"{path}: KERNELS must be a list of family names, e.g. KERNELS = [\"gemm\"]; "
                               f"got {kernels!r}")
    return list(kernels)


def plan(root: Path, families: list[str] | tuple[str, ...]) -> BuildPlan:
    """The sources for the selected families; an unknown name fails with the list of known ones."""
    root = Path(root)
    available = available_families(root)
    chosen = list(dict.fromkeys(f.strip() for f in families))  # keep order, drop repeats
    unknown = [f for f in chosen if f not in available]
    if unknown:
        raise BuildConfigError(
            f"configs.py selects unknown kernel famil{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(repr(u) for u in unknown)}; available (folders under kernels/ with sources): "
            f"{', '.join(available) if available else '(none)'}")
    sources = ["kernels/module.cpp"]
    for family in chosen:
        sources += family_sources(root, family)
    return BuildPlan(tuple(chosen), tuple(sources))


def families_define(families: list[str] | tuple[str, ...]) -> str:
    """Compiler flag defining the family list as a string literal: -DTK_OPS_FAMILIES="gemm,attention".
    torch's ninja build shell-quotes each flag, so the quotes reach the compiler as written."""
    return f'-D{FAMILIES_MACRO}="{",".join(families)}"'
