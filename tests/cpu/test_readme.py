"""The README's example kernel compiles against the headers as they are."""
import re

import pytest

from .toolchain import ROOT, find_nvcc, run


def test_readme_kernel_compiles(tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    blocks = re.findall(r"```cuda\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) == 1, "README.md should hold exactly one ```cuda example"
    src = tmp_path / "readme_example.cu"
    src.write_text(blocks[0])
    res = run([nvcc, "-std=c++20", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
               "-Iinclude/kittens", "-c", "-o", "/dev/null", str(src)])
    assert res.returncode == 0, f"the README's kernel does not compile:\n{(res.stdout + res.stderr)[-4000:]}"
