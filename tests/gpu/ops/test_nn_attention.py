"""tk_ops.nn.Attention against the equivalent PyTorch module (nn.Linear + SDPA) with the same weights:
forward and backward, MHA / GQA / MQA, causal or not, both head dims, and under torch.compile. Sliding windows and
softcap against a float64 twin through tk_ops.reference; packed documents (cu_seqlens) against the float64 reference
of each document alone and against the module's dense path per document, forward, gradients, max_seqlen as a mere
hint, and torch.compile."""
import functools
import textwrap

import pytest
import torch
import torch.nn.functional as F

import tk_ops
from tk_ops import reference

from ... import background
from ...cpu.toolchain import run_python
from ...util import requires_families
from ..util import assert_close, rel_err

pytestmark = requires_families("gemm", "attention")  # the module's projections are tk_ops GEMMs

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
        assert_close(g, r, TOL, f"{name} (torch module: {peer_err:.2e})")
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


# ---------------------------------------------------------------- sliding windows, softcap, packed documents

class ReferenceAttention(torch.nn.Module):
    """tk_ops.nn.Attention's documented computation in float64 through tk_ops.reference (which has the window and
    softcap SDPA lacks), with the given module's options and weights and the same parameter names. With cu_seqlens
    x is packed documents, each attended on its own (reference.attention_varlen)."""

    def __init__(self, module):
        super().__init__()
        self.h, self.hkv, self.d = module.num_heads, module.num_kv_heads, module.head_dim
        self.options = dict(causal=module.causal, window=module.window, softcap=module.softcap)
        bias = module.qkv.bias is not None
        self.qkv = torch.nn.Linear(module.embed_dim, (self.h + 2 * self.hkv) * self.d, bias=bias)
        self.proj = torch.nn.Linear(self.h * self.d, module.embed_dim, bias=bias)
        self.to(device="cuda", dtype=torch.float64)
        self.load_state_dict(module.state_dict())

    def forward(self, x, cu_seqlens=None, max_seqlen=None):
        heads = [self.h, self.hkv, self.hkv]
        if cu_seqlens is None:
            b, n, _ = x.shape
            q, k, v = (t.transpose(1, 2) for t in self.qkv(x).view(b, n, sum(heads), self.d).split(heads, dim=2))
            o = reference.attention(q, k, v, **self.options)[0]
            return self.proj(o.transpose(1, 2).reshape(b, n, self.h * self.d))
        q, k, v = self.qkv(x).view(x.shape[-2], sum(heads), self.d).split(heads, dim=1)
        o = reference.attention_varlen(q, k, v, cu_seqlens, cu_seqlens, **self.options)[0]
        return self.proj(o.reshape(x.shape[:-1] + (self.h * self.d,)))


def with_options(embed_dim, heads, kv_heads, bias=False, **options):
    """A tk_ops module with random weights (scores of about unit size, where a softcap of a few units bends them)
    and its float64 reference twin."""
    ours = tk_ops.nn.Attention(embed_dim, heads, num_kv_heads=kv_heads, bias=bias, device="cuda", **options)
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, embed_dim ** -0.5)
    return ours, ReferenceAttention(ours)


def run_packed(module, x, dy, cu_seqlens, max_seqlen):
    x = x.detach().clone().requires_grad_()
    y = module(x, cu_seqlens, max_seqlen)
    y.backward(dy.to(y.dtype))
    return [y, x.grad] + [p.grad for p in module.parameters()]


def names_of(module):
    return ["y", "dx"] + [f"d{n}" for n, _ in module.named_parameters()]


OPTIONS = {
    "causal_w100": dict(causal=True, window=(100, -1)),
    "w50_20_cap3": dict(window=(50, 20), softcap=3.0),
    "causal_cap3": dict(causal=True, softcap=3.0),
    "diagonal": dict(window=(0, 0)),  # each position sees itself only: o = v
}
HEADS = {"gqa-d64": (512, 8, 2), "gqa-d128": (1024, 8, 4)}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=list(OPTIONS))
@pytest.mark.parametrize("heads", HEADS.values(), ids=list(HEADS))
def test_window_and_softcap_match_float64(heads, options):
    ours, exact = with_options(*heads, bias=True, **options)
    x = torch.randn(2, 333, heads[0], device="cuda")
    dy = torch.randn(2, 333, heads[0], device="cuda")
    got = run(ours, x.bfloat16(), dy)
    ref = run(exact, x.double(), dy.double())
    for name, g, r in zip(names_of(ours), got, ref):
        assert g.shape == r.shape and g.dtype == torch.bfloat16, name
        assert_close(g, r, TOL, name)


DOCS = [300, 1, 0, 777, 64, 193, 5]  # ragged, an empty document and one of a single token


def offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(causal=True, window=(64, -1), softcap=2.0)],
                         ids=["full", "causal", "causal_w64_cap2"])
@pytest.mark.parametrize("heads", HEADS.values(), ids=list(HEADS))
def test_packed_matches_each_document_alone(heads, options):
    """The packed forward and its gradients against the float64 reference of the documents attended separately,
    and against the same module's dense path run on each document alone (same weights)."""
    ours, exact = with_options(*heads, bias=True, **options)
    total, cu = sum(DOCS), offsets(DOCS)
    x = torch.randn(total, heads[0], device="cuda")
    dy = torch.randn(total, heads[0], device="cuda")
    got = run_packed(ours, x.bfloat16(), dy, cu, max(DOCS))
    ours.zero_grad(set_to_none=True)
    ref = run_packed(exact, x.double(), dy.double(), cu, None)

    xd = x.bfloat16().requires_grad_()
    ends = cu.tolist()
    y = torch.cat([ours(xd[None, a:b])[0] for a, b in zip(ends[:-1], ends[1:]) if b > a])
    y.backward(dy.bfloat16())
    dense = [y, xd.grad] + [p.grad for p in ours.parameters()]
    for name, g, d, r in zip(names_of(ours), got, dense, ref):
        assert g.shape == r.shape and g.dtype == torch.bfloat16, name
        assert_close(g, r, TOL, f"{name} (dense path per document: {rel_err(d, r):.2e})")
        assert rel_err(g, d) <= 1e-2, f"{name}: packed and per-document dense differ by {rel_err(g, d):.2e}"


@pytest.mark.parametrize("lengths", [[5000, 300, 0, 2000], [700, 1, 900]], ids=["over_4096", "short"])
def test_packed_max_seqlen_is_only_a_hint(lengths):
    """max_seqlen picks the forward's schedule (causal, head_dim 64: narrow tail tiles for documents up to 4096 keys);
    the true longest length, a bound above it, None (the token count) and a value below it all give the reference's
    result."""
    ours, exact = with_options(512, 8, 2, causal=True)
    cu = offsets(lengths)
    x = torch.randn(sum(lengths), 512, device="cuda")
    with torch.no_grad():
        ref = exact(x.double(), cu)
        outs = {hint: ours(x.bfloat16(), cu, hint) for hint in (max(lengths), 8192, None, 64)}
    first = outs[max(lengths)]
    for hint, y in outs.items():
        assert_close(y, ref, TOL, f"max_seqlen={hint}")
        assert rel_err(y, first) <= 1e-2, f"max_seqlen={hint} differs from the true longest by {rel_err(y, first):.2e}"


def test_packed_rows_past_the_last_offset():
    """Rows after the last document attend to nothing: y there is proj's bias and their input gradient is 0; the
    documents themselves are unaffected by them."""
    ours, exact = with_options(512, 8, 2, bias=True, causal=True)
    cu = offsets([200, 250])
    x = torch.randn(1, 500, 512, device="cuda")
    dy = torch.randn(1, 500, 512, device="cuda")
    got = run_packed(ours, x.bfloat16(), dy, cu, None)
    ref = run_packed(exact, x.double(), dy.double(), cu, None)
    y, dx = got[0][0], got[1][0]
    torch.testing.assert_close(y[450:], ours.proj.bias.detach().expand(50, 512), rtol=0, atol=0)
    assert (dx[450:] == 0).all()
    for name, g, r in zip(names_of(ours), got, ref):
        assert_close(g, r, TOL, name)


def test_packed_compiles_fullgraph():
    """torch.compile(fullgraph=True) of the packed forward and backward equals eager; new offsets (same number of
    documents) are data, not a reason to recompile."""
    ours, _ = with_options(512, 8, 2, causal=True, window=(128, -1))
    x = torch.randn(1, 1500, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(1, 1500, 512, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(ours, fullgraph=True)
    for i, lengths in enumerate(([700, 0, 800], [100, 600, 800])):
        cu = offsets(lengths)
        eager = run_packed(ours, x, dy, cu, 800)
        ours.zero_grad(set_to_none=True)
        if i == 0:
            traced = run_packed(compiled, x, dy, cu, 800)
        else:
            with torch.compiler.set_stance("fail_on_recompile"):
                traced = run_packed(compiled, x, dy, cu, 800)
        ours.zero_grad(set_to_none=True)
        for name, c, e in zip(names_of(ours), traced, eager):
            assert rel_err(c, e) <= 2e-3, f"offsets {lengths}, {name}: compiled differs from eager by {rel_err(c, e):.2e}"
