"""Builds a standalone CUDA tool (a .cu program under tools/) with the extension's compiler flags.

    python tools/profile/build.py tools/profile/attn_timeline.cu -o /tmp/attn_timeline

The flags and include directories are the extension's (python/tk_ops/_build_config.py), plus the tool's own folder
for the helpers the tools beside it share (timeline.cuh). A tool that needs more translation units names them in
its source, one per line, as `// link: kernels/attention/attention_bwd_prep.cu`. Building needs no GPU: with
--check the executable goes to a temporary folder and is deleted, which is what a CPU test runs to prove that every
tool still builds.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cpu"))

from toolchain import build_config as config, find_nvcc  # noqa: E402

LINK = re.compile(r"^// link: (\S+)\s*$", re.M)


def linked_sources(tool: Path) -> list[str]:
    """The extra translation units the tool names in `// link:` lines (paths relative to the repository root)."""
    return LINK.findall(tool.read_text())


def command(tool: Path, out: Path) -> list[str]:
    nvcc = find_nvcc()
    if nvcc is None:
        raise SystemExit("nvcc not found: set CUDA_HOME or put nvcc on PATH")
    includes = [*config.include_dirs(ROOT), str(tool.resolve().parent)]
    sources = [str(tool), *(str(ROOT / s) for s in linked_sources(tool))]
    return [nvcc, *config.NVCC_FLAGS, *(f"-I{d}" for d in includes), "-o", str(out), *sources]


def build(tool: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command(tool, out), cwd=ROOT, capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", type=Path, help="the tool's .cu source")
    parser.add_argument("-o", "--out", type=Path, help="the executable (default /tmp/<tool name>)")
    parser.add_argument("--check", action="store_true", help="build into a temporary folder and discard the result")
    args = parser.parse_args()
    tool = args.tool.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / tool.stem if args.check else (args.out.resolve() if args.out else Path("/tmp") / tool.stem)
        res = build(tool, out)
    if res.returncode != 0:
        print(f"{args.tool} does not build:\n{(res.stdout + res.stderr)[-6000:]}", file=sys.stderr)
        return 1
    print(f"{args.tool}: builds" if args.check else f"built {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
