"""torch.ops.tk_ops.based_fwd (Based linear attention, causal forward) against the float64 reference on the GPU:
normalized and not, ragged lengths, the value dimensions built, bf16 and fp16, strided views, and the op's argument errors. Skipped unless
the 'based' family is in the build."""
import pytest
import torch

from tk_ops import _ext
from tk_ops.reference.based import based as based_ref

from ..util import poison, rel_err

TOL = {torch.bfloat16: 1e-2, torch.float16: 1e-2}
DK = 16


def _based_built() -> bool:
    try:
        return "based" in _ext.built_families()
    except Exception:  # no extension at all
        return False


pytestmark = pytest.mark.skipif(not _based_built(), reason="the 'based' kernels are not in this build (configs.py)")


def fresh_pool_with_nan(numel: int):
    """Leave a poisoned (NaN) block in the caching allocator, where the op's output will be allocated, so an
    output row the kernel fails to write shows."""
    poison(torch.empty(numel, device="cuda", dtype=torch.float32))
    torch.cuda.synchronize()


def qkv(b, h, n, dv, dtype):
    q = torch.randn(b, h, n, DK, device="cuda").to(dtype)
    k = torch.randn(b, h, n, DK, device="cuda").to(dtype)
    v = torch.randn(b, h, n, dv, device="cuda").to(dtype)
    return q, k, v


def check(q, k, v, normalize, scale=None, eps=1e-6, what=""):
    b, h, n, dv = v.shape
    fresh_pool_with_nan(b * h * n * dv)
    out = torch.ops.tk_ops.based_fwd(q, k, v, scale, normalize, eps)
    torch.cuda.synchronize()
    ref = based_ref(q, k, v, scale=scale, normalize=normalize, eps=eps)
    assert out.dtype == v.dtype and out.shape == v.shape, what
    assert not torch.isnan(out).any(), f"{what}: NaN in the output"
    err = rel_err(out, ref)
    assert err <= TOL[v.dtype], f"{what}: relative error {err:.3e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 17, 64, 1000, 4097])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_forward(normalize, n, dtype):
    b, h = (2, 3) if n < 4096 else (1, 2)
    check(*qkv(b, h, n, 64, dtype), normalize, what=f"normalize={normalize} n={n} {dtype}")


@pytest.mark.parametrize("dv", [16, 32, 48, 64])
@pytest.mark.parametrize("n", [17, 1000])
def test_value_dims(n, dv):
    check(*qkv(2, 2, n, dv, torch.bfloat16), True, what=f"dv={dv} n={n}")


@pytest.mark.parametrize("scale", [0.5, -0.3, 0.0])
def test_scale(scale):
    check(*qkv(1, 2, 200, 64, torch.bfloat16), True, scale=scale, what=f"scale={scale}")


def test_many_heads():
    # More (batch, head) tasks than SMs: the persistent grid walks several per block.
    check(*qkv(4, 48, 130, 64, torch.bfloat16), True, what="4 x 48 heads")


def test_strided_views():
    # (B, N, H, D) tensors viewed as (B, H, N, D), as a fused projection gives them: read in place.
    b, n, h = 2, 300, 4
    q = torch.randn(b, n, h, DK, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(b, n, h, DK, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(b, n, h, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    check(q, k, v, True, what="transposed views")
    out = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6)
    assert out.stride() == v.stride(), "the output takes v's memory order"


def test_empty():
    q, k, v = qkv(2, 3, 0, 64, torch.bfloat16)
    out = torch.ops.tk_ops.based_fwd(q, k, v, None, True, 1e-6)
    assert out.shape == (2, 3, 0, 64)


def test_errors():
    q, k, v = qkv(1, 2, 32, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="feature dimension"):
        torch.ops.tk_ops.based_fwd(q[..., :8], k[..., :8], v, None, True, 1e-6)
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.tk_ops.based_fwd(q, k, v[..., :40], None, True, 1e-6)
    with pytest.raises(ValueError, match="not built yet"):
        torch.ops.tk_ops.based_fwd(q, k, torch.randn(1, 2, 32, 128, device="cuda", dtype=torch.bfloat16), None,
                                   True, 1e-6)
    with pytest.raises(ValueError, match="up to 128"):
        torch.ops.tk_ops.based_fwd(q, k, torch.randn(1, 2, 32, 256, device="cuda", dtype=torch.bfloat16), None,
                                   True, 1e-6)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        torch.ops.tk_ops.based_fwd(q.float(), k.float(), v.float(), None, True, 1e-6)
    with pytest.raises(TypeError, match="share one dtype"):
        torch.ops.tk_ops.based_fwd(q, k, v.half(), None, True, 1e-6)
    with pytest.raises(ValueError, match="same shape"):
        torch.ops.tk_ops.based_fwd(q, k[:, :1], v, None, True, 1e-6)
    with pytest.raises(ValueError, match="4-D"):
        torch.ops.tk_ops.based_fwd(q[0], k[0], v[0], None, True, 1e-6)
    with pytest.raises(ValueError, match="CUDA tensors"):
        torch.ops.tk_ops.based_fwd(q.cpu(), k.cpu(), v.cpu(), None, True, 1e-6)


def test_meta():
    # torch.compile's fake tensors: the same rules and the output shape, without a kernel.
    q, k, v = (t.to("meta") for t in qkv(2, 3, 100, 64, torch.bfloat16))
    out = torch.ops.tk_ops.based_fwd(q, k, v, None, False, 1e-6)
    assert out.shape == (2, 3, 100, 64) and out.device.type == "meta"
