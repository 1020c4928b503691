"""The library tests call small kernels from kernels/ through one shared library (tklib)."""
import pytest

from . import tklib


@pytest.fixture(scope="session")
def tk():
    """The library unit-test kernels, built once per session."""
    return tklib.TestLib(tklib.build())
