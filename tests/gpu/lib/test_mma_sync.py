"""Warp-level mma.sync (m16n8k16, fp32 accumulate): mma_AB, mma_ABt, mma_AtB, mma_AtBt."""
import pytest
import torch

from ..util import poison, rel_err

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [(16, 16, 16), (32, 64, 32), (64, 32, 48), (16, 128, 16)]  # M, N, K
VARIANTS = ["AB", "ABt", "AtB", "AtBt"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mma(tk, variant, dtype, shape):
    m, n, k = shape
    trans_a, trans_b = variant.startswith("At"), variant.endswith("Bt")
    # The operands are stored as the call takes them: A^T (K x M) for At*, B^T (N x K) for *Bt.
    a = torch.randn(*((k, m) if trans_a else (m, k)), device="cuda").to(DTYPES[dtype])
    b = torch.randn(*((n, k) if trans_b else (k, n)), device="cuda").to(DTYPES[dtype])
    c = torch.randn(m, n, device="cuda")
    d = poison(torch.empty(m, n, device="cuda"))
    tk.run(f"mma/{variant}/{dtype}/{m}x{n}x{k}", a, b, c, d)
    a64 = a.double().t() if trans_a else a.double()
    b64 = b.double().t() if trans_b else b.double()
    ref = a64 @ b64 + c.double()
    err = rel_err(d, ref)
    assert err <= 1e-4, f"mma_{variant}: relative error {err:.2e}"
