"""The examples/ scripts as modules, for the CPU tests of their PyTorch side."""
import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str):
    """Yields examples/<name>.py imported as a module (a pytest fixture's body: `yield from load_example(...)`).
    examples/ is on sys.path meanwhile, for the scripts that import a sibling (train_gpt's blocks and data)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(EXAMPLES))
