"""Kernel selection (configs.py -> sources and the family define) without compiling anything."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tk_ops import _build_config as bc

from .toolchain import ROOT


def make_tree(root: Path, families: dict[str, list[str]], kernels=("gemm",)) -> Path:
    """A fake repository: kernels/<family>/<files> and a configs.py selecting `kernels`."""
    for family, files in families.items():
        folder = root / "kernels" / family
        folder.mkdir(parents=True)
        for f in files:
            (folder / f).write_text("// stub\n")
    (root / "kernels" / "module.cpp").write_text("// stub\n")
    (root / "configs.py").write_text(f"KERNELS = {list(kernels)!r}\n")
    return root


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path, {
        "gemm": ["gemm_fp8.cu", "binding.cpp", "gemm_bf16.cu", "gemm.h", "gemm_kernel.cuh"],
        "attention": ["attn.cu", "binding.cpp"],
        "common": ["helpers.cuh"],        # headers only: shared code, not a family
        "_scratch": ["x.cu"],             # private folder
    })


def test_available_families_are_folders_with_sources(tree):
    assert bc.available_families(tree) == ["attention", "gemm"]


def test_plan_lists_module_then_each_family_sources_sorted(tree):
    plan = bc.plan(tree, ["gemm", "attention"])
    assert plan.families == ("gemm", "attention")
    assert plan.sources == (
        "kernels/module.cpp",
        "kernels/gemm/binding.cpp", "kernels/gemm/gemm_bf16.cu", "kernels/gemm/gemm_fp8.cu",
        "kernels/attention/attn.cu", "kernels/attention/binding.cpp",
    )


def test_plan_with_nothing_selected_builds_only_the_module(tree):
    plan = bc.plan(tree, [])
    assert plan.sources == ("kernels/module.cpp",)
    assert plan.define == '-DTK_OPS_FAMILIES=""'


def test_repeated_names_are_built_once(tree):
    assert bc.plan(tree, ["gemm", "gemm"]).families == ("gemm",)


def test_unknown_family_lists_the_available_ones(tree):
    with pytest.raises(bc.BuildConfigError) as info:
        bc.plan(tree, ["gemm", "flash"])
    msg = str(info.value)
    assert "'flash'" in msg and "available" in msg and "attention, gemm" in msg


def test_headers_only_folder_is_not_selectable(tree):
    with pytest.raises(bc.BuildConfigError, match="'common'"):
        bc.plan(tree, ["common"])


def test_define_string():
    assert bc.families_define(["gemm"]) == '-DTK_OPS_FAMILIES="gemm"'
    assert bc.families_define(["gemm", "attention"]) == '-DTK_OPS_FAMILIES="gemm,attention"'
    assert bc.families_define([]) == '-DTK_OPS_FAMILIES=""'


def test_read_selection(tree):
    assert bc.read_selection(tree) == ["gemm"]
    (tree / "configs.py").write_text('KERNELS = "gemm"\n')
    with pytest.raises(bc.BuildConfigError, match="list of family names"):
        bc.read_selection(tree)
    (tree / "configs.py").unlink()
    with pytest.raises(bc.BuildConfigError, match="missing"):
        bc.read_selection(tree)


def test_repository_config_is_buildable():
    selected = bc.read_selection(ROOT)
    plan = bc.plan(ROOT, selected)
    assert plan.sources[0] == "kernels/module.cpp"
    assert all((ROOT / s).is_file() for s in plan.sources)
    for family in selected:
        assert any(s.startswith(f"kernels/{family}/") for s in plan.sources), family


def test_setup_py_rejects_an_unknown_family(tmp_path):
    # setup.py itself, run in a copy of the tree whose configs.py names a family that does not exist:
    # it must stop before compiling, with the list of available families.
    tree = make_tree(tmp_path, {"gemm": ["gemm_bf16.cu"]}, kernels=["gemm", "nope"])
    (tree / "python" / "tk_ops").mkdir(parents=True)
    for name in ("_build_config.py", "__init__.py"):
        (tree / "python" / "tk_ops" / name).write_text((ROOT / "python" / "tk_ops" / name).read_text())
    (tree / "setup.py").write_text((ROOT / "setup.py").read_text())
    res = subprocess.run([sys.executable, "setup.py", "--version"], cwd=tree, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode != 0
    assert "unknown kernel family 'nope'" in res.stderr and "available" in res.stderr and "gemm" in res.stderr


def test_built_extension_reports_the_selected_families():
    # End to end through the compiler define: only where the extension has been built.
    try:
        importlib.import_module("torch")
        ext = importlib.import_module("tk_ops._C")
    except ImportError:
        pytest.skip("tk_ops._C is not built (pip install --no-build-isolation .)")
    selected = list(dict.fromkeys(bc.read_selection(ROOT)))
    assert ext.families() == selected, (f"tk_ops._C was built with {ext.families()} but configs.py selects "
                                        f"{selected}: reinstall (pip install --no-build-isolation .)")
    info = ext.build_info()
    assert info["families"] == ext.families() and info["arch"] == "sm_90a"
