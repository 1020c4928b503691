"""Misusing the library (core types, memory and shared ops, register ops, mma and wgmma) must be a
compile error that names the problem.

Each tests/compile_fail/*.cu starts with `// expect-error: <text>`: nvcc, with the extension's flags,
must reject the file and print that text. One correct snippet, using the same types with valid
parameters, must compile, so the failures are known to come from the parameters and not from a
broken header. Every snippet compiles in the background, side by side (background.py).
"""
import functools
import re
from pathlib import Path

import pytest

from .. import background
from .toolchain import ROOT, compile_object, find_nvcc, nvcc_or_skip

SNIPPETS = sorted((ROOT / "tests" / "compile_fail").glob("*.cu"))

# The same types as the failing snippets, each with parameters that are allowed.
CORRECT_USE = r"""
#include "kittens.cuh"
using namespace kittens;

using layout = gl<bf16, 1, 1, -1, -1, st_bf<64, 64>>;

__global__ void kernel(const __grid_constant__ layout g, const CUtensorMap **maps, float *out) {
    rt_fl<32, 16> a;
    rt<half, 16, 16> b;
    rv_fl<16> v;
    __shared__ st_fp8e4m3<64, 32> s;
    __shared__ st_bf<64, 64> t;
    out[threadIdx.x] = float(sizeof(a) + sizeof(b) + sizeof(v) + sizeof(s)) + float(t.top_rows<32>()(0, 0));
    *maps = g.get_tma<st_bf<64, 64>>();
}

void make(bf16 *ptr) { layout g{ptr, 1, 1, 128, 64}; (void)g; }
"""


def background_jobs():
    nvcc = find_nvcc()
    if nvcc is None:
        return {}
    correct = background.scratch("compile_fail") / "core_types_ok.cu"
    correct.write_text(CORRECT_USE)
    jobs = {"compile_fail:correct_use": functools.partial(compile_object, nvcc, correct)}
    jobs.update({f"compile_fail:{p.name}": functools.partial(compile_object, nvcc, p) for p in SNIPPETS})
    return jobs


def expected_error(snippet: Path) -> str:
    first = snippet.read_text().splitlines()[0]
    match = re.fullmatch(r"//\s*expect-error:\s*(\S.*?)\s*", first)
    assert match, f"{snippet.name}: the first line must be `// expect-error: <text the compiler prints>`"
    return match.group(1)


def test_snippets_exist():
    assert SNIPPETS, "tests/compile_fail/ has no .cu snippets"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda p: p.stem)
def test_misuse_fails_with_its_message(snippet):
    nvcc_or_skip()
    expected = expected_error(snippet)
    code, output = background.result(f"compile_fail:{snippet.name}")
    assert code != 0, f"{snippet.name} compiled, but it must fail with: {expected}"
    assert expected in output, (f"{snippet.name} failed, but without the message {expected!r}; "
                                f"nvcc said:\n{output[-4000:]}")


def test_correct_use_compiles():
    nvcc_or_skip()
    code, output = background.result("compile_fail:correct_use")
    assert code == 0, f"valid use of the core types does not compile:\n{output[-4000:]}"
