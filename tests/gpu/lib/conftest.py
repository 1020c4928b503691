"""The library tests call small kernels from kernels/ through one shared library (tklib)."""
from pathlib import Path

import pytest

from ... import background
from . import tklib

HERE = Path(__file__).resolve().parent
BUILD_JOB = "gpu-lib:test-library"


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py queues the other modules' jobs
def pytest_collection_finish(session):
    # Start building the test library as soon as it is known to be needed, so that its compiles overlap
    # the CPU tests that run first (it compiles its files in parallel itself).
    if session.config.option.collectonly:
        return
    if any(HERE in Path(item.fspath).resolve().parents and item.get_closest_marker("skip") is None
           for item in session.items):
        background.start({BUILD_JOB: tklib.build})


@pytest.fixture(scope="session")
def tk():
    """The library unit-test kernels, built once per session."""
    background.start({BUILD_JOB: tklib.build})  # already queued when collection saw library tests
    return tklib.TestLib(background.result(BUILD_JOB))
