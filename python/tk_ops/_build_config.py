"""Which kernel families go into the `tk_ops._C` extension, and from which sources.

`setup.py` loads this file by path (the package is not importable while it is being built), and
the CPU tests import it to check the selection without compiling anything. It uses only the
standard library.

A family is a folder `kernels/<name>/` holding at least one `.cu` or `.cpp` file; folders with
only headers (shared helpers) are not families. `configs.py` at the repository root lists the
families to build in `KERNELS`.

It also holds the install's guards, which setup.py runs before compiling anything: torch must be importable (pip's
default build isolation hides it) and built for the CUDA major version of the toolkit that compiles the kernels.
"""
from __future__ import annotations

import importlib.util
import json
import re
import runpy
import subprocess
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


# ---------------------------------------------------------------- the install's guards (setup.py)

# The install command of the README, which builds against the torch already installed.
INSTALL_COMMAND = 'pip install --no-build-isolation ".[bench,test]"'
TORCH_WHEEL_INDEX = "https://download.pytorch.org/whl"


def torch_missing_message(error: BaseException) -> str:
    """What setup.py says when it cannot import torch. Usually pip's build isolation: without --no-build-isolation, pip
    builds in a fresh environment holding only setuptools, where the installed torch (the one the extension must be
    compiled against) is not importable."""
    return (f"error: tk_ops cannot be built without torch, and setup.py cannot import it ({error}).\n"
            "The extension compiles against the torch already installed, which pip hides when it builds in an isolated "
            "environment (its default). Install torch, then build without isolation by adding --no-build-isolation:\n"
            f"    pip install torch ninja setuptools wheel && {INSTALL_COMMAND}")


def parse_nvcc_version(text: str) -> str | None:
    """"13.0" from `nvcc --version`'s "Cuda compilation tools, release 13.0, V13.0.88"; None if absent."""
    m = re.search(r"release (\d+)\.(\d+)", text)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def parse_version_json(text: str) -> str | None:
    """"13.0" from a toolkit's version.json ({"cuda": {"version": "13.0.88"}, ...}); None if it says no version."""
    try:
        version = json.loads(text)["cuda"]["version"]
    except (ValueError, KeyError, TypeError):
        return None
    m = re.match(r"(\d+)\.(\d+)", str(version))
    return f"{m.group(1)}.{m.group(2)}" if m else None


def toolkit_cuda_version(cuda_home: str | Path) -> str | None:
    """The major.minor version of the CUDA toolkit at cuda_home: its nvcc's (the compiler that builds the kernels),
    else its version.json's; None when neither tells."""
    home = Path(cuda_home)
    try:
        res = subprocess.run([str(home / "bin" / "nvcc"), "--version"], capture_output=True, text=True, timeout=120,
                             check=False)
        if (version := parse_nvcc_version(res.stdout)) is not None:
            return version
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return parse_version_json((home / "version.json").read_text())
    except OSError:
        return None


def torch_index_url(toolkit: str) -> str:
    """PyTorch's wheel index for a CUDA version: 13.0 -> https://download.pytorch.org/whl/cu130."""
    major, minor = toolkit.split(".")[:2]
    return f"{TORCH_WHEEL_INDEX}/cu{major}{minor}"


def torch_install_command(toolkit: str) -> str:
    """The command that replaces the installed torch by PyTorch's build for the CUDA version `toolkit`. It uninstalls
    first: pip keeps an installed torch of another CUDA build, since that one already satisfies "torch"."""
    return f"pip uninstall -y torch && pip install torch --index-url {torch_index_url(toolkit)}"


def cuda_mismatch(torch_cuda: str | None, toolkit: str | None, torch_version: str, cuda_home: str | Path) -> str | None:
    """None when torch (torch.version.cuda) and the toolkit at cuda_home (version `toolkit`) share a CUDA major
    version, else what setup.py stops with: both versions and the command that installs the torch for the toolkit.
    An extension compiled by another major version than torch's fails to load, or loads and fails at its first kernel
    launch. A toolkit whose version could not be read (None) is compared with nothing: torch's build checks it later."""
    again = f"then run the install again ({INSTALL_COMMAND})"
    if torch_cuda is None:
        if toolkit is None:
            install = ("the torch for your CUDA toolkit's version, e.g. for CUDA 13.0:\n"
                       f"    {torch_install_command('13.0')}")
        else:
            install = f"the torch for CUDA {toolkit} (the toolkit at {cuda_home}):\n    {torch_install_command(toolkit)}"
        return (f"error: torch {torch_version} is a CPU-only build (torch.version.cuda is None); tk_ops compiles CUDA "
                f"kernels against torch's CUDA build. Install {install}\n{again}.")
    if toolkit is None or torch_cuda.split(".")[0] == toolkit.split(".")[0]:
        return None
    return (f"error: torch {torch_version} is built for CUDA {torch_cuda}, but the CUDA toolkit at {cuda_home} is "
            f"CUDA {toolkit}: the extension must be compiled by the CUDA major version that torch runs on. Install the "
            f"torch for CUDA {toolkit}:\n    {torch_install_command(toolkit)}\n"
            f"or point CUDA_HOME at a CUDA {torch_cuda.split('.')[0]} toolkit (`export CUDA_HOME=...; source env.src`); "
            f"{again}.")
