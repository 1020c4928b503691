"""Fingerprints of the kernels' SASS, to show that a change which should not alter the generated code did not.

    python tools/check/sass_fingerprint.py --out /tmp/before.json            # on the old tree
    python tools/check/sass_fingerprint.py --out /tmp/after.json             # on the new tree
    python tools/check/sass_fingerprint.py --compare /tmp/before.json /tmp/after.json

Each kernel source of the extension (the device-code translation units, which include no torch headers) is
compiled to a cubin with the extension's flags; every function's SASS is reduced to its instruction text
(addresses and encodings dropped) and hashed. A refactor that renames a kernel (a configuration struct
instead of positional template flags, say) changes its mangled name but not its code: the comparison
therefore matches functions by their instruction hashes, and prints the names only for what differs.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cpu"))

from toolchain import build_config as config, find_cuobjdump, find_nvcc  # noqa: E402


# The device-code translation units: .cu files of the kernel families.
DEFAULT_SOURCES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "kernels").glob("*/*.cu"))

_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENCODING = re.compile(r"/\* 0x[0-9a-f]+ \*/")


def function_bodies(sass: str) -> dict[str, str]:
    """Mangled function name -> its instructions, one per line, without addresses or encodings."""
    bodies: dict[str, list[str]] = {}
    current = None
    for line in sass.splitlines():
        header = re.match(r"\s*Function : (\S+)", line)
        if header:
            current = header.group(1)
            bodies[current] = []
            continue
        if current is None:
            continue
        text = _ENCODING.sub("", _ADDRESS.sub("", line)).strip()
        if text and not text.startswith(".") and text != "..........":
            # Branch targets are printed as addresses, which do not depend on the function's name.
            bodies[current].append(re.sub(r"\s+", " ", text))
    return {name: "\n".join(lines) for name, lines in bodies.items()}


def fingerprint(source: str, nvcc: str, cuobjdump: str, workdir: Path, dump: Path | None = None) -> dict[str, str]:
    cubin = workdir / (source.replace("/", "_") + ".cubin")
    cmd = [nvcc, *config.NVCC_FLAGS, *(f"-I{d}" for d in config.include_dirs(ROOT)), "-cubin", "-o", str(cubin), source]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{source} does not compile:\n{(res.stdout + res.stderr)[-4000:]}")
    sass = subprocess.run([cuobjdump, "--dump-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    bodies = function_bodies(sass)
    if dump:  # one file per function, to diff two trees' code where the hashes differ
        for name, body in bodies.items():
            (dump / f"{Path(source).stem}.{hashlib.sha256(name.encode()).hexdigest()[:8]}.sass").write_text(f"{name}\n{body}\n")
    return {name: hashlib.sha256(body.encode()).hexdigest()[:16] for name, body in bodies.items()}


def collect(sources: list[str], jobs: int, dump: Path | None = None) -> dict[str, dict[str, str]]:
    nvcc, cuobjdump = find_nvcc(), find_cuobjdump()
    if not nvcc or not cuobjdump:
        raise SystemExit("needs nvcc (CUDA_HOME) and cuobjdump (pip install nvidia-cuda-cuobjdump)")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
        results = pool.map(lambda s: fingerprint(s, nvcc, cuobjdump, Path(tmp), dump), sources)
        return dict(zip(sources, results))


def compare(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> bool:
    """Prints what differs; True when every function's code is found unchanged on both sides."""
    same = True
    for source in sorted(set(before) | set(after)):
        old, new = before.get(source, {}), after.get(source, {})
        old_hashes, new_hashes = sorted(old.values()), sorted(new.values())
        if old_hashes == new_hashes:
            print(f"same      {source}: {len(old_hashes)} functions")
            continue
        same = False
        gone = [n for n, h in old.items() if h not in set(new.values())]
        added = [n for n, h in new.items() if h not in set(old.values())]
        print(f"DIFFERENT {source}: {len(old)} -> {len(new)} functions")
        for name in gone:
            print(f"    only before: {name}")
        for name in added:
            print(f"    only after:  {name}")
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the fingerprints of the current tree here (JSON)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--sources", nargs="*", default=DEFAULT_SOURCES)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dump", type=Path, help="also write each function's normalised SASS into this folder")
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        return 0 if compare(before, after) else 1
    if not args.out:
        parser.error("give --out or --compare")
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(collect(args.sources, args.jobs, args.dump), indent=1, sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
