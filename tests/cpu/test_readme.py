"""The README's example kernel compiles against the headers as they are."""
import functools
import re

from .. import background
from .toolchain import ROOT, compile_object, find_nvcc, nvcc_or_skip


def readme_kernels() -> list[str]:
    return re.findall(r"```cuda\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def background_jobs():
    nvcc, blocks = find_nvcc(), readme_kernels()
    if nvcc is None or len(blocks) != 1:  # the test below says what is wrong
        return {}
    src = background.scratch("readme") / "readme_example.cu"
    src.write_text(blocks[0])
    return {"readme:kernel": functools.partial(compile_object, nvcc, src)}


def test_readme_kernel_compiles():
    nvcc_or_skip()
    assert len(readme_kernels()) == 1, "README.md should hold exactly one ```cuda example"
    code, output = background.result("readme:kernel")
    assert code == 0, f"the README's kernel does not compile:\n{output[-4000:]}"
