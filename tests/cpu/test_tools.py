"""The developer tools under tools/ still build and start, so that none rots unnoticed.

The CUDA programs build (they run only on a GPU machine) through the tools' own builder, which compiles
them with the extension's flags; the wgmma generator confirms that the checked-in header is what it
generates; each Python tool with a command line prints its --help, and every other one is at least valid
Python; each shell script parses; tools/README.md has a row for each. The tools are found by globbing, so a tool
added or moved is covered without editing this file.
"""
import functools
import importlib.util
import re
from pathlib import Path

import pytest

from .. import background
from .toolchain import ROOT, find_nvcc, nvcc_or_skip, run, run_python

TOOLS = ROOT / "tools"
CUDA_TOOLS = sorted(TOOLS.rglob("*.cu"))
PYTHON_TOOLS = sorted(TOOLS.rglob("*.py"))
SHELL_TOOLS = sorted(TOOLS.rglob("*.sh"))
# The generator of include/kittens/ops/group/wgmma/instructions.cuh; it compares instead of writing with --check.
WGMMA_GENERATORS = [p for p in PYTHON_TOOLS if p.name == "gen_wgmma.py"]
# Builds one CUDA tool with the extension's flags and the sources its `// link:` lines name; with --check
# into a temporary folder. The tests use it so that a tool builds here exactly as its users build it.
BUILDERS = [p for p in PYTHON_TOOLS if p.name == "build.py"]

# Programs that include whole kernels: conftest queues these compiles before the small jobs.
BACKGROUND_HEAVY = True


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def has_cli(tool: Path) -> bool:
    return "argparse" in tool.read_text()


def needs_torch(tool: Path) -> bool:
    return re.search(r"^\s*(import|from)\s+(torch|tk_ops)\b", tool.read_text(), re.M) is not None


CLI_TOOLS = [p for p in PYTHON_TOOLS if has_cli(p)]


def background_jobs():
    jobs = {}
    if find_nvcc() is not None and len(BUILDERS) == 1:
        jobs.update({f"tools:build:{name(p)}": functools.partial(run_python, name(BUILDERS[0]), name(p), "--check",
                                                                 timeout=900)
                     for p in CUDA_TOOLS})
    jobs.update({f"tools:check:{name(p)}": functools.partial(run_python, name(p), "--check")
                 for p in WGMMA_GENERATORS})
    have_torch = importlib.util.find_spec("torch") is not None
    jobs.update({f"tools:help:{name(p)}": functools.partial(run_python, name(p), "--help")
                 for p in CLI_TOOLS if have_torch or not needs_torch(p)})
    return jobs


def test_tools_exist():
    assert CUDA_TOOLS and PYTHON_TOOLS, "tools/ holds no .cu or .py tools: was it moved?"


def test_every_tool_is_named_in_the_readme():
    readme = (TOOLS / "README.md").read_text()
    tools = sorted(p for p in TOOLS.rglob("*") if p.suffix in (".cu", ".cuh", ".py", ".sh"))
    unnamed = [name(p) for p in tools if f"`{p.relative_to(TOOLS).as_posix()}`" not in readme]
    assert not unnamed, f"tools/README.md has no row for {unnamed}: say what each does and how to run it"


def test_tool_builder_is_found():
    assert len(BUILDERS) == 1, f"expected one tools/**/build.py, found {[name(p) for p in BUILDERS]}"


@pytest.mark.parametrize("tool", CUDA_TOOLS, ids=name)
def test_cuda_tool_builds(tool):
    nvcc_or_skip()
    if len(BUILDERS) != 1:
        pytest.fail("no single tools/**/build.py to build the CUDA tools with")
    res = background.result(f"tools:build:{name(tool)}")
    assert res.returncode == 0, f"{name(tool)} does not build:\n{(res.stdout + res.stderr)[-4000:]}"


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
