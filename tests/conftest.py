"""Test-wide setup. The tests run against the installed tk_ops (`pip install --no-build-isolation .`);
from a plain checkout with nothing installed, the package is taken from python/ instead, so the
CPU tests still run (ops then report that the extension is not built)."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("tk_ops") is None:
    sys.path.append(str(ROOT / "python"))
