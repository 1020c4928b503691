"""The mutation list (tools/check/mutants.toml) stays applicable as the kernels change: every mutant's text occurs once
in its file, names a known family and existing tests, and every family has mutants. The driver's own checks are
exercised on a scratch tree, so a list that no longer applies cannot pass unnoticed."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _driver():
    spec = importlib.util.spec_from_file_location("tk_mutants", ROOT / "tools" / "check" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building classes
    spec.loader.exec_module(module)
    return module


mutants = _driver()


def test_every_mutant_applies_to_the_sources():
    assert mutants.problems(mutants.load()) == []


def test_every_family_has_mutants():
    families = {m.family for m in mutants.load()}
    assert families == set(mutants.BUILD_SETS)
    built = {p.parent.name for p in (ROOT / "kernels").glob("*/binding.cpp")}
    assert set(mutants.BUILD_SETS) == built, "a kernel family without a build set in tools/check/mutants.py"


def test_a_mutant_changes_its_file():
    for m in mutants.load():
        source = (ROOT / m.file).read_text()
        assert source.replace(m.find, m.replace, 1) != source, m.name


def _write(tree: Path, text: str) -> list:
    (tree / "kernels").mkdir(exist_ok=True)
    (tree / "tests").mkdir(exist_ok=True)
    (tree / "kernels" / "k.cuh").write_text("a = b;\nc = d;\nc = d;\n")
    (tree / "tests" / "test_k.py").write_text("")
    path = tree / "list.toml"
    path.write_text(text)
    return mutants.load(path)


ENTRY = """
[[mutant]]
name = "{name}"
family = "{family}"
file = "kernels/k.cuh"
find = "{find}"
replace = "{replace}"
tests = ["{test}"]
bug = "x"
"""


def test_problems_are_found(tmp_path):
    listed = _write(tmp_path, "".join([
        ENTRY.format(name="fine", family="gemm", find="a = b;", replace="a = 0;", test="tests/test_k.py"),
        ENTRY.format(name="twice", family="gemm", find="c = d;", replace="c = 0;", test="tests/test_k.py"),
        ENTRY.format(name="absent", family="gemm", find="e = f;", replace="e = 0;", test="tests/test_k.py"),
        ENTRY.format(name="same", family="gemm", find="a = b;", replace="a = b;", test="tests/test_k.py"),
        ENTRY.format(name="family", family="nope", find="a = b;", replace="a = 0;", test="tests/test_k.py"),
        ENTRY.format(name="test", family="gemm", find="a = b;", replace="a = 0;", test="tests/test_none.py"),
    ]))
    found = mutants.problems(listed, tmp_path)
    assert not any(p.startswith("fine:") for p in found)
    for name in ("twice", "absent", "same", "family", "test"):
        assert sum(p.startswith(f"{name}:") for p in found) == 1, (name, found)


def test_repeated_names_are_refused(tmp_path):
    text = ENTRY.format(name="x", family="gemm", find="a = b;", replace="a = 0;", test="tests/test_k.py") * 2
    with pytest.raises(ValueError, match="unique"):
        _write(tmp_path, text)
