"""Misuse of the memory and shared-op API must fail to compile with a message that names the
problem. Each tests/compile_fail/memory_*.cu starts with `// expect-error: <text>`; the snippet
must be rejected by nvcc and <text> must appear in the diagnostics."""
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from . import tklib

SNIPPETS = sorted((tklib.ROOT / "tests" / "compile_fail").glob("memory_*.cu"))


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("// expect-error: "), f"{path.name}: first line must be // expect-error: <text>"
    return first[len("// expect-error: "):].strip()


@pytest.fixture(scope="module")
def diagnostics():
    """Compile every snippet once, in parallel: name -> (return code, compiler output)."""
    def compile_one(p: Path):
        cmd = [tklib.nvcc(), "-std=c++20", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
               f"-I{tklib.INCLUDE}", "-c", str(p), "-o", "/dev/null"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        return p.name, (res.returncode, res.stdout + res.stderr)
    with ThreadPoolExecutor(max_workers=len(SNIPPETS) or 1) as pool:
        return dict(pool.map(compile_one, SNIPPETS))


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda p: p.stem)
def test_misuse_is_a_compile_error(diagnostics, snippet):
    code, output = diagnostics[snippet.name]
    assert code != 0, f"{snippet.name} compiled but must not"
    assert _expected(snippet) in output, f"{snippet.name}: expected message not found in:\n{output[-3000:]}"
