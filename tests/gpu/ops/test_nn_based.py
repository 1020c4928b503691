"""tk_ops.nn.BasedLinearAttention against the PyTorch composition it documents (nn.Linear projections and the float64
Based reference, same weights): the forward for each value dimension, normalised or not, chunked prefill and decoding
steps against one pass, torch.compile, a CUDA-graph decoding loop, and one gradient check through the whole module
(the op's gradients themselves are tested in test_based_bwd.py). Skipped unless the 'based' family is in the build."""
import pytest
import torch

import tk_ops
from tk_ops.reference.based import based as based_ref

from ...util import requires_families
from ..util import assert_close

TOL = 2e-2  # bf16 projections and Based attention, against float64


pytestmark = requires_families("gemm", "based")  # the module's projections are tk_ops GEMMs


class TorchBased(torch.nn.Module):
    """The computation tk_ops.nn.BasedLinearAttention documents, in PyTorch (float64 reference for the mixing); same
    parameter names."""

    def __init__(self, d_model, num_heads, normalize, eps, bias):
        super().__init__()
        self.h, self.d, self.normalize, self.eps = num_heads, d_model, normalize, eps
        self.qkv = torch.nn.Linear(d_model, 2 * num_heads * 16 + d_model, bias=bias)
        self.proj = torch.nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * 16, self.h * 16, self.d], dim=-1)
        q, k, v = (t.reshape(b, n, self.h, -1).transpose(1, 2) for t in (q, k, v))
        o = based_ref(q, k, v, normalize=self.normalize, eps=self.eps).to(x.dtype)
        return self.proj(o.transpose(1, 2).reshape(b, n, self.d))


def pair(d_model, heads, normalize=True, eps=1e-6, bias=False):
    torch.manual_seed(0)
    ours = tk_ops.nn.BasedLinearAttention(d_model, heads, normalize=normalize, eps=eps, bias=bias, device="cuda")
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, d_model ** -0.5)
    exact = TorchBased(d_model, heads, normalize, eps, bias).cuda().double()
    exact.load_state_dict(ours.state_dict())
    return ours, exact


@pytest.mark.parametrize("d_model, heads", [(256, 16), (768, 16), (1024, 16), (1792, 16), (2048, 16)],
                         ids=["dv16", "dv48", "dv64", "dv112", "dv128"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "num"])
def test_forward_matches_torch_composition(d_model, heads, normalize):
    ours, exact = pair(d_model, heads, normalize, bias=normalize)
    x = torch.randn(2, 257, d_model, device="cuda")
    with torch.no_grad():
        y = ours(x.bfloat16())
        ref = exact(x.double())
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    assert_close(y, ref, TOL, "y")


def test_gradients_through_the_module():
    """One training step's gradients (input and every parameter) against float64 autograd of the composition."""
    ours, exact = pair(1024, 16, bias=True)
    x = torch.randn(2, 300, 1024, device="cuda")
    dy = torch.randn(2, 300, 1024, device="cuda")
    xb = x.bfloat16().requires_grad_()
    ours(xb).backward(dy.bfloat16())
    x64 = x.double().requires_grad_()
    exact(x64).backward(dy.double())
    assert_close(xb.grad, x64.grad, TOL, "dx")
    for (name, p), (_, r) in zip(ours.named_parameters(), exact.named_parameters()):
        assert p.grad is not None and p.grad.dtype == torch.bfloat16, name
        assert_close(p.grad, r.grad, TOL, f"d{name}")


@pytest.mark.parametrize("d_model, heads", [(1024, 16), (1792, 16)], ids=["dv64", "dv112"])
def test_prefill_chunks_and_steps_equal_one_pass(d_model, heads):
    ours, _ = pair(d_model, heads)
    x = torch.randn(3, 200, d_model, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        full = ours(x)
        y1, state = ours(x[:, :70], output_final_state=True)
        y2, state = ours(x[:, 70:190], state=state, output_final_state=True)
        steps = [ours.step(x[:, t], state) for t in range(190, 199)] + [ours.step(x[:, 199:200], state)[:, 0]]
        fresh = ours.init_state(3)
        first = ours.step(x[:, 0:1], fresh)
    got = torch.cat([y1, y2, torch.stack(steps, dim=1)], dim=1)
    assert_close(got, full.double(), TOL, "chunks and steps")
    assert first.shape == (3, 1, d_model)
    assert_close(first[:, 0], full[:, 0].double(), TOL, "a first step from init_state")


def test_compiles_fullgraph():
    ours, _ = pair(1024, 16)
    x = torch.randn(2, 200, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        eager = ours(x)
        compiled = torch.compile(ours, fullgraph=True)(x)
    assert_close(compiled, eager.double(), 2e-3, "compiled")


def test_compiles_fullgraph_forward_and_backward():
    ours, _ = pair(1024, 16)
    x = torch.randn(2, 200, 1024, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(2, 200, 1024, device="cuda", dtype=torch.bfloat16)

    def grads(module):
        xg = x.clone().requires_grad_()
        module(xg).backward(dy)
        out = [xg.grad] + [p.grad.clone() for p in ours.parameters()]
        ours.zero_grad(set_to_none=True)
        return out
    eager = grads(ours)
    compiled = grads(torch.compile(ours, fullgraph=True))
    for e, c in zip(eager, compiled):
        assert_close(c, e.double(), 2e-3, "compiled gradient")


def test_cuda_graph_decoding():
    """model.step captured once and replayed per token, the state cache advanced in place by each replay."""
    ours, _ = pair(1024, 16)
    x = torch.randn(2, 16, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        full = ours(x)
        state = ours.init_state(2)
        x_t = x[:, 0].clone()
        ours.step(x_t, ours.init_state(2))  # warm up outside capture
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            y_t = ours.step(x_t, state)
        outs = []
        for t in range(16):
            x_t.copy_(x[:, t])
            graph.replay()
            outs.append(y_t.clone())
    torch.cuda.synchronize()
    assert_close(torch.stack(outs, dim=1), full.double(), TOL, "replayed steps")


def test_step_has_no_gradient_but_runs_in_grad_mode():
    """Decoding outside torch.no_grad() still works (the step is for inference; it has no backward)."""
    ours, _ = pair(1024, 16)
    state = ours.init_state(2)
    y = ours.step(torch.randn(2, 1024, device="cuda", dtype=torch.bfloat16), state)
    assert y.shape == (2, 1024) and torch.isfinite(y.float()).all()
