"""Test-wide setup. The tests run against the installed tk_ops (`pip install --no-build-isolation .`);
from a plain checkout with nothing installed, the package is taken from python/ instead, so the
CPU tests still run (ops then report that the extension is not built).

When collection ends, the collected modules' slow subprocesses start together (background.py).
"""
import importlib.util
import sys
from pathlib import Path

from . import background

ROOT = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("tk_ops") is None:
    sys.path.append(str(ROOT / "python"))


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
