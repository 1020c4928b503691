"""The kernels compile to the instructions they were written for, without register spills.

Each listed source is compiled to a cubin with the extension's flags (the device-code files include
no torch headers); cuobjdump's SASS must contain every required opcode (e.g. HGMMA: the bf16
wgmma; QGMMA: the fp8 one; UTMALDG: TMA loads), and ptxas must report 0 bytes of spill stores and
loads for every function. A kernel whose wgmma silently fell back to mma.sync, or whose
accumulators spill to local memory, still computes the right answer but loses most of its speed;
these checks catch that on a machine without a GPU.
"""
import functools
import re
from pathlib import Path

import pytest

from .. import background
from .toolchain import ROOT, build_config, cuobjdump_or_skip, find_cuobjdump, find_nvcc, nvcc_or_skip, run

# source (relative to the repository root) -> SASS opcodes it must contain
REQUIRED_SASS = {
    "kernels/gemm/gemm_bf16.cu": ["HGMMA", "UTMALDG"],
    "kernels/gemm/gemm_fp8.cu": ["QGMMA", "UTMALDG"],
    "kernels/attention/attention_fwd_d64.cu": ["HGMMA", "UTMALDG"],
    "kernels/attention/attention_fwd_d96.cu": ["HGMMA", "UTMALDG"],
    "kernels/attention/attention_fwd_d128.cu": ["HGMMA", "UTMALDG"],
    "kernels/attention/attention_fwd_d256.cu": ["HGMMA", "UTMALDG"],
    "kernels/attention/attention_bwd_d64.cu": ["HGMMA", "UTMALDG", "UTMAREDG"],
    "kernels/attention/attention_bwd_d96.cu": ["HGMMA", "UTMALDG", "UTMAREDG"],
    "kernels/attention/attention_bwd_d128.cu": ["HGMMA", "UTMALDG", "UTMAREDG"],
    "kernels/attention/attention_bwd_d256.cu": ["HGMMA", "UTMALDG", "UTMAREDG"],
    "kernels/based/based_fwd.cu": ["HGMMA", "UTMALDG", "UTMASTG"],
    "kernels/based/based_bwd.cu": ["HGMMA", "UTMALDG", "UTMASTG", "UTMAREDG"],
    "kernels/based/based_step.cu": ["LDG.E.128", "STG.E.128"],
    "kernels/based/based_quad_fwd.cu": ["HGMMA", "UTMALDG", "UTMASTG"],
    "kernels/based/based_quad_bwd.cu": ["HGMMA", "UTMALDG", "UTMASTG"],
    "kernels/mamba2/mamba2_fwd.cu": ["HGMMA", "UTMALDG"],
    "kernels/mamba2/mamba2_bwd.cu": ["HGMMA", "UTMALDG", "UTMAREDG"],
    "kernels/fftconv/fftconv_fwd.cu": ["HMMA", "MOVM"],
    "kernels/fftconv/fftconv_dk.cu": ["HMMA", "MOVM", "REDG.E.ADD.F32"],
    "kernels/fftconv/fftconv_spectrum.cu": ["STG.E.64", "MUFU.SIN"],
    "kernels/mamba2/mamba2_step.cu": ["LDG.E.128", "STG.E.128"],
    # kittens' raw accesses (ops/warp/memory/raw.cuh), through their GPU test kernel: each shared-memory width stays
    # one instruction of that width; the handshake's acquire, release and async-proxy fence are the GPU-scope forms.
    "tests/gpu/lib/kernels/mem_raw.cu": ["LDS.128", "LDS.64", "STS.128", "STS.64", "LDG.E.STRONG.GPU",
                                         "REDG.E.ADD.S32.STRONG.GPU", "FENCE.VIEW.ASYNC.G", "UTMASTG"],
}

# Spill bytes a source may report per function. The softcapped D = 64 attention backward holds S^T and dP^T
# (64 registers each) and the capped scores next to dK and dV at the 240-register consumer limit, and ptxas parks
# a few scalars (stores + loads under 64 bytes each); its kernels without a softcap must stay at zero. The Mamba-2 backward's backward
# walk at state dim 128 holds the carried state (64 registers) next to GB, the chunk's weights and the low image's
# product: ptxas parks a few scalars there (under 32 bytes).
SPILL_ALLOWANCE = {"kernels/attention/attention_bwd_d64.cu": 64, "kernels/mamba2/mamba2_bwd.cu": 32}
# Functions of an allowance's source that must still not spill at all (a regular expression matching their mangled
# names): attention's variant{banded, left_edge, softcap, ...} with softcap false.
NO_SPILL_FUNCTIONS = {"kernels/attention/attention_bwd_d64.cu": r"variantELb[01]ELb[01]ELb0E"}


# Whole kernels: conftest queues these compiles before the small jobs of other modules.
BACKGROUND_HEAVY = True


def compile_and_dump(nvcc: str, cuobjdump: str, source: str, out_dir: Path) -> tuple[str, str]:
    """(ptxas report, SASS text) of one source; an AssertionError says what failed."""
    cubin = out_dir / (ROOT / source).with_suffix(".cubin").name
    res = run([nvcc, *build_config.nvcc_args(ROOT, "-cubin", "-Xptxas", "-v", "-o", str(cubin), source)])
    assert res.returncode == 0, f"{source} does not compile:\n{(res.stdout + res.stderr)[-6000:]}"
    dump = run([cuobjdump, "--dump-sass", str(cubin)])
    assert dump.returncode == 0, f"cuobjdump failed on {cubin.name}:\n{dump.stderr[-2000:]}"
    return res.stdout + res.stderr, dump.stdout


def background_jobs():
    nvcc, cuobjdump = find_nvcc(), find_cuobjdump()
    if nvcc is None or cuobjdump is None:
        return {}
    out_dir = background.scratch("sass")
    return {f"sass:{source}": functools.partial(compile_and_dump, nvcc, cuobjdump, source, out_dir)
            for source in sorted(REQUIRED_SASS) if (ROOT / source).is_file()}


@pytest.fixture(scope="module", params=sorted(REQUIRED_SASS))
def compiled(request):
    """(source, SASS text, ptxas report) for one source, compiled in the background with the other jobs."""
    source = request.param
    nvcc_or_skip()
    cuobjdump_or_skip()
    if not (ROOT / source).is_file():
        pytest.skip(f"{source} does not exist yet")
    report, sass = background.result(f"sass:{source}")
    return source, sass, report


def spills(ptxas_report: str) -> dict[str, tuple[int, int]]:
    """Function name -> (spill store bytes, spill load bytes) from ptxas -v output."""
    found = {}
    for m in re.finditer(r"Function properties for (\S+)\s*\n[^\n]*?(\d+) bytes spill stores, (\d+) bytes spill loads",
                         ptxas_report):
        found[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return found


def test_required_opcodes(compiled):
    source, sass, _ = compiled
    missing = [op for op in REQUIRED_SASS[source] if not re.search(rf"\b{op}\b", sass)]
    assert not missing, f"{source}: SASS has no {', '.join(missing)}"


def test_no_register_spills(compiled):
    source, _, report = compiled
    per_function = spills(report)
    assert per_function, f"{source}: no function properties in the ptxas report:\n{report[-3000:]}"
    allowed = SPILL_ALLOWANCE.get(source, 0)
    spilling = {name: s for name, s in per_function.items() if max(s) > allowed}
    assert not spilling, f"{source}: functions spill more than {allowed} bytes (store, load bytes): {spilling}"
    if source in NO_SPILL_FUNCTIONS:
        pattern = NO_SPILL_FUNCTIONS[source]
        matching = {name: s for name, s in per_function.items() if re.search(pattern, name)}
        assert matching, f"{source}: no function matches {pattern!r}: {list(per_function)}"
        assert all(s == (0, 0) for s in matching.values()), \
            f"{source}: a function matching {pattern!r} spills: {per_function}"


def test_no_wgmma_serialization(compiled):
    # ptxas keeps a kernel correct when it cannot prove an in-flight wgmma's registers safe by waiting after
    # every wgmma (info C7518 / C7515 etc.): the kernel then runs with no tensor-core overlap at all.
    source, _, report = compiled
    serialized = [line.strip() for line in report.splitlines() if "wgmma.mma_async instructions are serialized" in line]
    assert not serialized, f"{source}: ptxas serialised wgmma:\n" + "\n".join(serialized[:4])


def test_spill_report_parsing():
    # The parser itself: a report with a spilling function must be read as spilling.
    report = ("ptxas info    : Function properties for _Z3fooPf\n"
              "    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads\n"
              "ptxas info    : Function properties for _Z3barPf\n"
              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    assert spills(report) == {"_Z3fooPf": (12, 16), "_Z3barPf": (0, 0)}
