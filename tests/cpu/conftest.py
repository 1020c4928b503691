"""Starts the collected CPU test modules' compiles and other subprocesses together (see background.py)."""
from . import background


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    modules = []
    for item in session.items:
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, "background_jobs") and module not in modules:
            modules.append(module)
    # The kernels' compiles take longest: queue them first so that none is left running alone at the end.
    modules.sort(key=lambda m: not getattr(m, "BACKGROUND_HEAVY", False))
    for module in modules:
        background.start(module.background_jobs())


def pytest_sessionfinish(session):
    background.stop()
