"""Test-wide setup. The tests run against the installed tk_ops (`pip install --no-build-isolation .`);
from a plain checkout with nothing installed, the package is taken from python/ instead, so the
CPU tests still run (ops then report that the extension is not built).

When collection ends, the collected modules' slow subprocesses start together (background.py).
"""
import importlib.util
import sys
import zlib
from pathlib import Path

import pytest

from . import background

ROOT = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("tk_ops") is None:
    sys.path.append(str(ROOT / "python"))


# Test folders in the order they run. The library tests wait for their kernels' shared library, which builds in the
# background from the end of collection; the op tests need only the extension, so they run first and overlap it.
RUN_ORDER = ("tests/cpu/", "tests/gpu/ops/", "tests/gpu/lib/")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        return next((i for i, prefix in enumerate(RUN_ORDER) if path.startswith(prefix)), len(RUN_ORDER))
    items.sort(key=rank)  # stable: the order inside each folder is kept


@pytest.fixture(autouse=True)
def _seeded(request):
    """Every test starts from its own fixed seed (from its id), so random inputs, and a failure they cause, do not
    depend on which tests ran before it."""
    try:
        import torch
    except ImportError:
        yield
        return
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    modules = []
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, "background_jobs") and module not in modules:
            modules.append(module)
    # Whole kernels take longest: queue them first, so that none is left running alone at the end.
    modules.sort(key=lambda m: not getattr(m, "BACKGROUND_HEAVY", False))
    for module in modules:
        background.start(module.background_jobs())


def pytest_sessionfinish(session):
    background.stop()
