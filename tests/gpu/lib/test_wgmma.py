"""Warpgroup matrix multiplies (tests/gpu/lib/kernels/wgmma_*.cu) against a float64 torch reference.

Each case multiplies one tile of each operand with a single warpgroup, in three modes: mm (the
accumulator is preloaded with C, which must be ignored), mma (D = C + AB) and mm then mma chained
without a wait (D = 2 AB)."""
import pytest
import torch

from ..util import assert_close, poison

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16,
          "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}


def cases():
    """(form, dtype, A source, H, N, K), mirroring the registrations in wgmma_*.cu."""
    out = []
    for dt in ("bf16", "fp16"):
        out += [("ABt", dt, "smem", h, n, k) for h, n, k in
                [(1, 16, 64), (1, 64, 64), (1, 128, 128), (1, 256, 128), (2, 128, 64), (2, 64, 128), (1, 48, 48), (1, 80, 32),
                 (1, 64, 96), (1, 80, 256)]]
        out += [("AB", dt, "smem", h, n, k) for h, n, k in
                [(1, 16, 64), (1, 64, 64), (2, 128, 64), (1, 256, 32), (1, 96, 64), (1, 48, 48)]]
        out += [("AtB", dt, "smem", h, n, k) for h, n, k in [(1, 64, 64), (2, 128, 32), (1, 256, 64), (1, 48, 32), (1, 96, 64)]]
        out += [("AtBt", dt, "smem", h, n, k) for h, n, k in [(1, 64, 64), (2, 128, 64), (1, 16, 32)]]
        out += [("ABt", dt, "regs", h, n, k) for h, n, k in [(1, 64, 64), (2, 128, 64), (1, 256, 32)]]
        out += [("AB", dt, "regs", h, n, k) for h, n, k in [(1, 256, 64), (2, 16, 32), (1, 96, 48), (1, 256, 80)]]
    out += [("ABt", "fp8e4m3", "smem", h, n, k) for h, n, k in [(1, 64, 64), (1, 256, 128), (2, 128, 256), (1, 16, 32)]]
    out += [("ABt", "fp8e5m2", "smem", 1, 128, 64), ("ABt", "fp8e4m3xfp8e5m2", "smem", 1, 64, 96)]
    return out


def operand(shape, dtype):
    return torch.randn(*shape, device="cuda").to(dtype)


MODES = {"mm": 0, "mma": 1, "mm_then_mma": 2}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", cases(), ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-H{c[3]}-N{c[4]}-K{c[5]}")
def test_wgmma(tk, case, mode):
    form, dt, src, H, N, K = case
    ta_name, _, tb_name = dt.partition("x")
    ta, tb = DTYPES[ta_name], DTYPES[tb_name or ta_name]
    M = 64 * H
    trans_a = form in ("AtB", "AtBt")
    b_n_major = form in ("AB", "AtB")
    a = operand((K, M) if trans_a else (M, K), ta)
    b = operand((K, N) if b_n_major else (N, K), tb)
    c = torch.randn(M, N, device="cuda")
    d = poison(torch.empty(M, N, device="cuda"))
    tk.run(f"wgmma/{form}/{dt}/{src}/H{H}/N{N}/K{K}", a, b, c, d, args=(MODES[mode],))
    a64 = a.double().T if trans_a else a.double()
    b64 = b.double() if b_n_major else b.double().T
    ab = a64 @ b64
    want = {"mm": ab, "mma": ab + c.double(), "mm_then_mma": 2 * ab}[mode]
    # 16-bit products are exact and summed in fp32 (~1e-6 here). fp8 wgmma accumulates with fewer
    # mantissa bits (~1e-4 observed at K <= 256); a layout or descriptor error gives O(1).
    tol = 1e-3 if ta_name.startswith("fp8") else 1e-5
    assert_close(d, want, tol, f"{form} {dt} {src} H{H} N{N} K{K} {mode}")


@pytest.mark.parametrize("overlap", [False, True], ids=["wait0", "wait1"])
@pytest.mark.parametrize("shape", [(256, 256, 512), (200, 320, 200), (128, 128, 64), (384, 512, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
def test_pipelined_gemm(tk, shape, overlap):
    """TMA ring + semaphores + setmaxnreg + wgmma + TMA store (kernels/wgmma_pipeline.cu)."""
    M, N, K = shape
    a = operand((M, K), torch.bfloat16)
    b = operand((N, K), torch.bfloat16)
    c = poison(torch.empty(M, N, device="cuda"))
    tk.run("wgmma_pipeline/bf16_abt" + ("_overlap" if overlap else ""), a, b, c, args=(M, N, K))
    assert_close(c, a.double() @ b.double().T, 1e-5, f"pipelined GEMM {M}x{N}x{K}")
