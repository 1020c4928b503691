"""tk_ops.nn.Attention's plumbing on the CPU: the kernels (GEMM and attention) are replaced by float PyTorch
versions, and the module must then equal the textbook multi-head attention it documents (head order in the
fused qkv weight, GQA mapping, causal mask, output projection), forward and backward, and hand the attention
in-place (B, N, H, D)-transposed views that the kernel reads without copies. Building the module asks the
extension which head dimensions its kernels take (a build without them defers that check to the first call), so
these tests need it built."""
import pytest
import torch

import tk_ops.nn as tk_nn
from tk_ops import reference

from ..util import cpu_linear, read_in_place, skip_unless_built


@pytest.fixture(autouse=True)
def extension():
    skip_unless_built("nn.Attention checks its head dimension against the built kernels")


@pytest.fixture
def cpu_math(monkeypatch):
    """Swap the module's kernels for CPU math; record what the attention receives."""
    seen = []

    def attention(q, k, v, causal=False, scale=None):
        seen.append((q, k, v, causal))
        return reference.attention(q, k, v, causal=causal, scale=scale)[0].to(q.dtype)
    monkeypatch.setattr(tk_nn, "_linear", cpu_linear)
    monkeypatch.setattr(tk_nn, "attention", attention)
    return seen


def textbook(x, qkv_w, qkv_b, proj_w, proj_b, h, hkv, causal):
    """Multi-head attention in float64 with SDPA's math, GQA by repeating the key/value heads."""
    b, n, e = x.shape
    d = e // h
    y = torch.nn.functional.linear(x, qkv_w, qkv_b)
    q, k, v = y.split([h * d, hkv * d, hkv * d], dim=-1)
    q = q.view(b, n, h, d).transpose(1, 2)
    k = k.view(b, n, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    v = v.view(b, n, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, dim=1)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return torch.nn.functional.linear(o.transpose(1, 2).reshape(b, n, h * d), proj_w, proj_b)


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (2, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_textbook_attention(cpu_math, heads, causal, bias):
    h, hkv = heads
    torch.manual_seed(0)
    m = tk_nn.Attention(64 * h, h, num_kv_heads=hkv, causal=causal, bias=bias)
    with torch.no_grad():  # weights large enough that the heads differ visibly
        for p in m.parameters():
            p.normal_(0, 0.1)
    x = torch.randn(2, 11, 64 * h, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    assert y.shape == x.shape and y.dtype == torch.bfloat16

    params = [m.qkv.weight, m.qkv.bias, m.proj.weight, m.proj.bias]
    x64 = x.detach().double().requires_grad_()
    p64 = [None if p is None else p.detach().double().requires_grad_() for p in params]
    expect = textbook(x64, *p64, h, hkv, causal)
    err = (y.double() - expect).norm() / expect.norm()
    assert err < 2e-2, f"relative error {err:.2e}"

    # backward: every parameter and the input get the textbook gradient
    dy = torch.randn_like(expect)
    y.backward(dy.to(y.dtype))
    expect.backward(dy)
    for name, got, ref in [("x", x, x64)] + [(f"param{i}", p, r) for i, (p, r) in enumerate(zip(params, p64))]:
        if got is None:
            continue
        rel = (got.grad.double() - ref.grad).norm() / ref.grad.norm()
        assert rel < 3e-2, f"d{name}: relative error {rel:.2e}"

    # the attention got in-place (B, N, H, D) views of the qkv projection, not copies
    (q, k, v, c), = cpu_math
    assert c is causal and q.shape == (2, h, 11, 64) and k.shape == v.shape == (2, hkv, 11, 64)
    assert not q.is_contiguous() and all(read_in_place(t) for t in (q, k, v))
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()


def test_state_dict_keys_match_a_torch_module():
    """qkv and proj are nn.Linear-compatible, so a PyTorch module with the same two Linears loads the weights."""
    m = tk_nn.Attention(256, 4, num_kv_heads=2, bias=True)
    torch_like = torch.nn.ModuleDict({"qkv": torch.nn.Linear(256, 512), "proj": torch.nn.Linear(256, 256)})
    torch_like.load_state_dict(m.state_dict())
    assert "num_kv_heads=2" in repr(m) and "head_dim=64" in repr(m)
