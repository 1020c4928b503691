"""tk_ops.nn.Attention against the equivalent PyTorch module (nn.Linear + SDPA) with the same weights:
forward and backward, MHA / GQA / MQA, causal or not, both head dims, and under torch.compile."""
import functools
import textwrap

import pytest
import torch
import torch.nn.functional as F

import tk_ops

from ... import background
from ...cpu.toolchain import run_python
from ..util import rel_err

TOL = 2e-2  # bf16 projections and attention, against float64


class TorchAttention(torch.nn.Module):
    """The computation tk_ops.nn.Attention documents, on PyTorch's own kernels; same parameter names."""

    def __init__(self, embed_dim, num_heads, num_kv_heads, causal, bias):
        super().__init__()
        self.h, self.hkv, self.d, self.causal = num_heads, num_kv_heads, embed_dim // num_heads, causal
        self.qkv = torch.nn.Linear(embed_dim, (num_heads + 2 * num_kv_heads) * self.d, bias=bias)
        self.proj = torch.nn.Linear(num_heads * self.d, embed_dim, bias=bias)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, self.h + 2 * self.hkv, self.d).split([self.h, self.hkv, self.hkv], dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=self.causal, enable_gqa=self.h != self.hkv)
        return self.proj(o.transpose(1, 2).reshape(b, n, self.h * self.d))


def pair(embed_dim, heads, kv_heads, causal, bias):
    ours = tk_ops.nn.Attention(embed_dim, heads, num_kv_heads=kv_heads, causal=causal, bias=bias, device="cuda")
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, embed_dim ** -0.5)
    theirs = TorchAttention(embed_dim, heads, kv_heads, causal, bias).cuda().bfloat16()
    theirs.load_state_dict(ours.state_dict())
    exact = TorchAttention(embed_dim, heads, kv_heads, causal, bias).cuda().double()
    exact.load_state_dict(ours.state_dict())
    return ours, theirs, exact


def run(module, x, dy):
    x = x.detach().clone().requires_grad_()
    y = module(x)
    y.backward(dy.to(y.dtype))
    return [y, x.grad] + [p.grad for p in module.parameters()]


@pytest.mark.parametrize("embed_dim, heads, kv_heads", [(512, 8, 8), (512, 8, 2), (1024, 8, 1), (1024, 8, 4)],
                         ids=["mha-d64", "gqa-d64", "mqa-d128", "gqa-d128"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_module(embed_dim, heads, kv_heads, causal):
    ours, theirs, exact = pair(embed_dim, heads, kv_heads, causal, bias=kv_heads == 2)
    x = torch.randn(2, 333, embed_dim, device="cuda")
    dy = torch.randn(2, 333, embed_dim, device="cuda")
    got = run(ours, x.bfloat16(), dy)
    peer = run(theirs, x.bfloat16(), dy)
    ref = run(exact, x.double(), dy.double())
    names = ["y", "dx"] + [f"d{n}" for n, _ in ours.named_parameters()]
    for name, g, p, r in zip(names, got, peer, ref):
        assert g.shape == r.shape and g.dtype == torch.bfloat16, name
        err, peer_err = rel_err(g, r), rel_err(p, r)
        assert err <= TOL, f"{name}: relative error {err:.2e} (torch module: {peer_err:.2e})"
        assert err <= 2 * peer_err + 2e-3, f"{name}: relative error {err:.2e} vs torch module {peer_err:.2e}"


def test_compiles_fullgraph():
    ours, _, _ = pair(512, 8, 2, True, False)
    x = torch.randn(2, 200, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(2, 200, 512, device="cuda", dtype=torch.bfloat16)
    eager = run(ours, x, dy)
    ours.zero_grad(set_to_none=True)
    compiled = run(torch.compile(ours, fullgraph=True), x, dy)
    for e, c in zip(eager, compiled):
        assert rel_err(c, e) <= 2e-3


# A fresh interpreter whose first tk_ops op call is inside torch.compile(fullgraph=True). nn.Attention asks the build
# for its head dimensions when it is made, so the model here is built from nn.Linear and tk_ops.attention, neither of
# which loads the extension before its first call.
_FIRST_CALL_COMPILED = textwrap.dedent("""
    import sys, torch, tk_ops
    torch.manual_seed(0)
    qkv = tk_ops.nn.Linear(256, 3 * 256).cuda()
    assert "tk_ops._C" not in sys.modules, "making the model loaded the extension: the test would prove nothing"
    def model(x):
        q, k, v = (t.transpose(1, 2) for t in qkv(x).view(2, 100, 3, 4, 64).unbind(2))
        return tk_ops.attention(q, k, v, causal=True)
    x = torch.randn(2, 100, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True)(x)
    (gc,) = torch.autograd.grad(compiled.float().square().sum(), x)
    eager = model(x)
    (ge,) = torch.autograd.grad(eager.float().square().sum(), x)
    err = max(((a.float() - b.float()).norm() / b.float().norm()).item() for a, b in ((compiled, eager), (gc, ge)))
    print("OK" if err < 2e-2 else f"MISMATCH {err}")
""")


def background_jobs():
    # Seconds of interpreter start and compilation, run while the other tests do (and only where they can pass).
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        return {}
    return {"nn_attention:first_call_compiled": functools.partial(run_python, "-c", _FIRST_CALL_COMPILED, timeout=600)}


def test_compiles_fullgraph_as_the_first_call_of_a_process():
    """Loading the extension and checking the GPU happen while tracing, without splitting the graph."""
    res = background.result("nn_attention:first_call_compiled")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("OK"), res.stdout[-2000:]
