"""Misusing a core type must be a compile error that names the problem.

Each tests/compile_fail/*.cu starts with `// expect-error: <text>`: nvcc must reject the file and
print that text. One correct snippet, using the same types with valid parameters, must compile,
so the failures are known to come from the parameters and not from a broken header.
"""
import re
from pathlib import Path

import pytest

from .toolchain import ROOT, find_nvcc, run

SNIPPETS = sorted((ROOT / "tests" / "compile_fail").glob("*.cu"))
NVCC_ARGS = ["-std=c++20", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
             "-Iinclude/kittens", "-c", "-o", "/dev/null"]

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


@pytest.fixture(scope="module")
def nvcc():
    path = find_nvcc()
    if path is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    return path


def expected_error(snippet: Path) -> str:
    first = snippet.read_text().splitlines()[0]
    match = re.fullmatch(r"//\s*expect-error:\s*(\S.*?)\s*", first)
    assert match, f"{snippet.name}: the first line must be `// expect-error: <text the compiler prints>`"
    return match.group(1)


def test_snippets_exist():
    assert SNIPPETS, "tests/compile_fail/ has no .cu snippets"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda p: p.stem)
def test_misuse_fails_with_its_message(nvcc, snippet):
    expected = expected_error(snippet)
    res = run([nvcc, *NVCC_ARGS, str(snippet)])
    output = res.stdout + res.stderr
    assert res.returncode != 0, f"{snippet.name} compiled, but it must fail with: {expected}"
    assert expected in output, (f"{snippet.name} failed, but without the message {expected!r}; "
                                f"nvcc said:\n{output[-4000:]}")


def test_correct_use_compiles(nvcc, tmp_path):
    src = tmp_path / "core_types_ok.cu"
    src.write_text(CORRECT_USE)
    res = run([nvcc, *NVCC_ARGS, str(src)])
    assert res.returncode == 0, f"valid use of the core types does not compile:\n{(res.stdout + res.stderr)[-4000:]}"
