"""The developer tools under tools/ still build and start, so that none rots unnoticed.

The CUDA programs compile (host and device code; they run only on a GPU machine) with the extension's
flags; the wgmma generator confirms that the checked-in header is what it generates; each Python tool
with a command line prints its --help, and every other one is at least valid Python; each shell script
parses. The tools are found by globbing, so a tool added or moved is covered without editing this file.
"""
import functools
import importlib.util
import re
from pathlib import Path

import pytest

from .. import background
from .toolchain import ROOT, compile_object, find_nvcc, nvcc_or_skip, run, run_python

TOOLS = ROOT / "tools"
CUDA_TOOLS = sorted(TOOLS.rglob("*.cu"))
PYTHON_TOOLS = sorted(TOOLS.rglob("*.py"))
SHELL_TOOLS = sorted(TOOLS.rglob("*.sh"))
# The generator of include/kittens/ops/group/wgmma/instructions.cuh; it compares instead of writing with --check.
WGMMA_GENERATORS = [p for p in PYTHON_TOOLS if p.name == "gen_wgmma.py"]

# Programs that include whole kernels: conftest queues these compiles before the small jobs.
BACKGROUND_HEAVY = True


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def has_cli(tool: Path) -> bool:
    return "argparse" in tool.read_text()


def needs_torch(tool: Path) -> bool:
    return re.search(r"^\s*(import|from)\s+(torch|tk_ops)\b", tool.read_text(), re.M) is not None


CLI_TOOLS = [p for p in PYTHON_TOOLS if has_cli(p)]
# Beyond the extension's include folders: tools/, for helpers that tools in different folders share
# (timeline.cuh). Headers next to a tool are found without a flag.
TOOL_INCLUDES = (f"-I{TOOLS}",)


def background_jobs():
    jobs = {}
    nvcc = find_nvcc()
    if nvcc is not None:
        jobs.update({f"tools:build:{name(p)}": functools.partial(compile_object, nvcc, p, *TOOL_INCLUDES)
                     for p in CUDA_TOOLS})
    jobs.update({f"tools:check:{name(p)}": functools.partial(run_python, name(p), "--check")
                 for p in WGMMA_GENERATORS})
    have_torch = importlib.util.find_spec("torch") is not None
    jobs.update({f"tools:help:{name(p)}": functools.partial(run_python, name(p), "--help")
                 for p in CLI_TOOLS if have_torch or not needs_torch(p)})
    return jobs


def test_tools_exist():
    assert CUDA_TOOLS and PYTHON_TOOLS, "tools/ holds no .cu or .py tools: was it moved?"


@pytest.mark.parametrize("tool", CUDA_TOOLS, ids=name)
def test_cuda_tool_compiles(tool):
    nvcc_or_skip()
    code, output = background.result(f"tools:build:{name(tool)}")
    assert code == 0, f"{name(tool)} does not compile:\n{output[-4000:]}"


def test_wgmma_generator_is_found():
    assert len(WGMMA_GENERATORS) == 1, f"expected one tools/**/gen_wgmma.py, found {[name(p) for p in WGMMA_GENERATORS]}"


@pytest.mark.parametrize("generator", WGMMA_GENERATORS, ids=name)
def test_generated_wgmma_header_is_current(generator):
    res = background.result(f"tools:check:{name(generator)}")
    assert res.returncode == 0, (f"the checked-in wgmma header differs from what {name(generator)} writes "
                                 f"(run it to regenerate):\n{(res.stdout + res.stderr)[-3000:]}")


@pytest.mark.parametrize("tool", CLI_TOOLS, ids=name)
def test_python_tool_prints_help(tool):
    if needs_torch(tool) and importlib.util.find_spec("torch") is None:
        pytest.skip(f"{name(tool)} imports torch, which is not installed")
    res = background.result(f"tools:help:{name(tool)}")
    assert res.returncode == 0 and "usage:" in res.stdout, \
        f"`python {name(tool)} --help` failed (exit code {res.returncode}):\n{(res.stdout + res.stderr)[-3000:]}"


@pytest.mark.parametrize("tool", PYTHON_TOOLS, ids=name)
def test_python_tool_is_valid_python(tool):
    # Tools without a command line run GPU work when started; here they are only parsed.
    compile(tool.read_text(), str(tool), "exec")


@pytest.mark.parametrize("script", SHELL_TOOLS, ids=name)
def test_shell_tool_parses(script):
    res = run(["bash", "-n", str(script)], timeout=60)
    assert res.returncode == 0, f"{name(script)} does not parse:\n{res.stderr[-2000:]}"
