"""Builds tk_ops: the Python package plus one CUDA extension, tk_ops._C, holding the kernel
families selected in configs.py.

    pip install --no-build-isolation .

(--no-build-isolation so the extension compiles against the torch already installed.)
Parallel compile jobs: MAX_JOBS, else one per CPU core.
"""
import importlib.util
import os
import re
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def load_build_config():
    # By path: importing the tk_ops package itself would need the extension being built here.
    spec = importlib.util.spec_from_file_location("_tk_ops_build_config", ROOT / "python" / "tk_ops" / "_build_config.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building classes
    spec.loader.exec_module(module)
    return module


def read_version():
    text = (ROOT / "python" / "tk_ops" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


build_config = load_build_config()
try:
    build_plan = build_config.plan(ROOT, build_config.read_selection(ROOT))
except build_config.BuildConfigError as e:
    sys.exit(f"error: {e}")

# Imported after the selection check so a bad configs.py is reported even without torch.
try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
except ImportError as e:
    sys.exit(build_config.torch_missing_message(e))

# torch guesses CUDA_HOME from the nvcc on PATH; a wrapper script there makes it guess wrong.
if CUDA_HOME is None or not (Path(CUDA_HOME) / "include" / "cuda_runtime_api.h").is_file():
    sys.exit(f"error: no CUDA toolkit at CUDA_HOME={CUDA_HOME!r}; `source env.src` (or export CUDA_HOME=/usr/local/cuda) "
             "and run the install again")
cuda_problem = build_config.cuda_mismatch(torch.version.cuda, build_config.toolkit_cuda_version(CUDA_HOME),
                                          torch.__version__, CUDA_HOME)
if cuda_problem:
    sys.exit(cuda_problem)

os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))

print(f"tk_ops: building kernel families {list(build_plan.families)} "
      f"({len(build_plan.sources)} sources, MAX_JOBS={os.environ['MAX_JOBS']})")

setup(
    name="tk_ops",
    version=read_version(),
    description="Tile-based CUDA kernels for Hopper GPUs (H100/H200), callable from PyTorch",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    author="the tk_ops authors",
    license_expression="MIT",
    license_files=["LICENSE"],
    keywords=["pytorch", "cuda", "gpu", "hopper", "h100", "h200", "tensor cores", "kernels", "tile library", "gemm",
              "fp8", "attention", "linear attention", "mamba", "state space model", "fft convolution"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Environment :: GPU :: NVIDIA CUDA :: 13",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C++",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Software Development :: Libraries :: Python Modules",
    ],
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[
        CUDAExtension(
            name="tk_ops._C",
            sources=list(build_plan.sources),
            include_dirs=build_config.include_dirs(ROOT),
            extra_compile_args={"cxx": [*build_config.CXX_FLAGS, build_plan.define,
                                        *(f"-idirafter{d}" for d in build_config.cuda_wheel_include_dirs())],
                                "nvcc": list(build_config.NVCC_FLAGS)},
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.10",
    install_requires=["torch"],
    extras_require={
        "bench": ["matplotlib", "tqdm"],
        # cuobjdump/nvdisasm: the SASS checks in tests/cpu read the compiled kernels' instructions
        # transformers: the Hugging Face integration's tests (pinned: the integration reads its mask functions)
        "test": ["pytest", "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm", "transformers==5.23.0"],
    },
    zip_safe=False,
)
