"""Mutation check of the GPU tests: deliberate one-line bugs (tools/check/mutants.toml), each built into a scratch
copy of the repository and run against the tests that claim to catch it. A mutant the tests pass is a hole in them.

    python tools/check/mutants.py --check                   # every mutant still applies to the sources (no GPU)
    python tools/check/mutants.py [--family F ...] [--only NAME ...] [--out results.json]   # on an H100/H200

Per family: the repository's sources are copied to a scratch folder (an earlier build there is kept and updated), configs.py there selects the families the tests
need, the extension is built in place once, and the tests run on the unmutated build (they must pass, or every mutant
would look killed). Then each mutant is applied, rebuilt (ninja recompiles only what includes the changed file), its
tests run with -x, and the file is restored. A mutant is killed when a test fails or the run times out (a hang is a
failure users would see too); it survives when the tests pass; a mutant that does not compile is reported as such.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST = Path(__file__).with_name("mutants.toml")
# What a scratch copy needs: the sources the build reads and the tests.
COPIED = ("include", "kernels", "python", "tests", "setup.py", "pyproject.toml", "configs.py")
# The families each family's tests need (its ops' nn modules call the GEMM; Based's module uses attention's).
BUILD_SETS = {
    "gemm": ("gemm",),
    "attention": ("gemm", "attention"),
    "based": ("gemm", "attention", "based"),
    "mamba2": ("gemm", "mamba2"),
    "fftconv": ("gemm", "fftconv"),
}


@dataclass(frozen=True)
class Mutant:
    name: str
    family: str
    file: str  # relative to the repository root
    find: str  # must occur exactly once in file
    replace: str
    tests: tuple[str, ...]  # pytest arguments: files or node ids
    bug: str  # what the mutant breaks, in words


@dataclass
class Outcome:
    name: str
    family: str
    status: str  # killed, survived, no-build, error
    killed_by: str = ""
    seconds: float = 0.0
    detail: str = field(default="", repr=False)


def load(path: Path = LIST) -> list[Mutant]:
    entries = tomllib.loads(path.read_text())["mutant"]
    mutants = [Mutant(**{**entry, "tests": tuple(entry["tests"])}) for entry in entries]
    names = [m.name for m in mutants]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"{path}: mutant names must be unique; repeated: {', '.join(duplicated)}")
    return mutants


def problems(mutants: list[Mutant], root: Path = ROOT) -> list[str]:
    """Why mutants would not apply to the sources under root (empty when every one applies)."""
    found = []
    for m in mutants:
        source = root / m.file
        if m.family not in BUILD_SETS:
            found.append(f"{m.name}: unknown family {m.family!r} (known: {', '.join(BUILD_SETS)})")
        if not source.is_file():
            found.append(f"{m.name}: {m.file} does not exist")
            continue
        count = source.read_text().count(m.find)
        if count != 1:
            found.append(f"{m.name}: its `find` text occurs {count} times in {m.file} (must be exactly once)")
        if m.find == m.replace:
            found.append(f"{m.name}: `replace` equals `find`, so it changes nothing")
        for test in m.tests:
            if not (root / test.split("::")[0]).is_file():
                found.append(f"{m.name}: test {test} does not exist")
    return found


def scratch_copy(family: str, work: Path) -> Path:
    """The sources copied over work/family, keeping an earlier build there: copies keep their modification times, so
    ninja recompiles only what changed since (a second call on the same machine resumes cheaply)."""
    tree = work / family
    tree.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "build", "*.egg-info")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=ignore, dirs_exist_ok=True)
        elif name != "configs.py":
            shutil.copy2(source, tree / name)
    kernels = ", ".join(f'"{f}"' for f in BUILD_SETS[family])
    selection = f"KERNELS = [{kernels}]\n"
    configs = tree / "configs.py"
    if not configs.is_file() or configs.read_text() != selection:
        configs.write_text(selection)
    return tree


def build(tree: Path, log: Path) -> bool:
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], check=False, cwd=tree,
                              stdout=out, stderr=subprocess.STDOUT)
    return done.returncode == 0


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, str, str]:
    """(status, first failing test, output tail): status is passed, failed, timeout or error (pytest could not run
    them: a collection error, no tests)."""
    env = {**os.environ, "PYTHONPATH": f"{tree / 'python'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, check=False, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", f"(no result within {timeout:.0f} s)", ""
    output = done.stdout + done.stderr
    failed = re.search(r"^FAILED (\S+)", output, re.MULTILINE)
    status = {0: "passed", 1: "failed"}.get(done.returncode, "error")
    return status, failed.group(1) if failed else "", output[-3000:]


def run_family(family: str, mutants: list[Mutant], work: Path, timeout: float) -> list[Outcome]:
    tree = scratch_copy(family, work)
    start = time.time()
    if not build(tree, work / f"{family}_build.log"):
        sys.exit(f"{family}: the unmutated scratch copy does not build (log: {work / f'{family}_build.log'})")
    print(f"{family}: unmutated build {time.time() - start:.0f} s", flush=True)
    every_test = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    status, failed, tail = run_tests(tree, every_test, timeout)
    if status != "passed":
        sys.exit(f"{family}: the unmutated build does not pass its tests ({status} {failed}); a mutation check "
                 f"means nothing until it does:\n{tail}")
    outcomes = []
    for m in mutants:
        source = tree / m.file
        original = source.read_text()
        start = time.time()
        source.write_text(original.replace(m.find, m.replace, 1))
        try:
            log = work / f"{m.name}_build.log"
            if not build(tree, log):
                outcome = Outcome(m.name, family, "no-build", detail=str(log))
            else:
                status, failed, tail = run_tests(tree, m.tests, timeout)
                verdict = {"failed": "killed", "timeout": "killed", "passed": "survived"}.get(status, "error")
                outcome = Outcome(m.name, family, verdict, failed, detail=tail if verdict == "error" else "")
        finally:
            source.write_text(original)
        outcome.seconds = time.time() - start
        print(f"  {m.name:<40} {outcome.status:<9} {outcome.killed_by} ({outcome.seconds:.0f} s)", flush=True)
        outcomes.append(outcome)
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that every mutant applies (no GPU, no build)")
    parser.add_argument("--family", nargs="*", help="only these families' mutants")
    parser.add_argument("--only", nargs="*", help="only the mutants of these names")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tk_mutants"), help="scratch folder")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one mutant's tests may take")
    parser.add_argument("--out", type=Path, help="write the outcomes as JSON here")
    args = parser.parse_args()

    mutants = load()
    if args.family:
        mutants = [m for m in mutants if m.family in args.family]
    if args.only:
        mutants = [m for m in mutants if m.name in args.only]
    issues = problems(mutants)
    if issues or args.check:
        print("\n".join(issues) if issues else f"{len(mutants)} mutants apply to the sources")
        return 1 if issues else 0
    if not mutants:
        print("no mutant selected")
        return 1

    args.work.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for family in dict.fromkeys(m.family for m in mutants):
        outcomes += run_family(family, [m for m in mutants if m.family == family], args.work, args.timeout)
    if args.out:
        args.out.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    print(f"\n{'mutant':<40} {'family':<10} {'outcome':<9} killed by")
    for o in outcomes:
        print(f"{o.name:<40} {o.family:<10} {o.status:<9} {o.killed_by}")
    alive = [o.name for o in outcomes if o.status != "killed"]
    print(f"\n{len(outcomes) - len(alive)} of {len(outcomes)} killed" + (f"; not killed: {', '.join(alive)}" if alive else ""))
    return 1 if alive else 0


if __name__ == "__main__":
    sys.exit(main())
