"""examples/train_mamba2.py without a GPU: its PyTorch scan (the peer the tk_ops model trains against) equals the
float64 reference, forward and gradients; the twin models share parameter names; the PyTorch model trains on the CPU."""
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.mamba2 import mamba2_chunk_scan as reference

from .example_loader import load_example



@pytest.fixture(scope="module")
def example():
    yield from load_example("train_mamba2")


def scan_inputs(b, l, h, g, p, n, seed):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale + shift).requires_grad_()
    return dict(x=rand(b, l, h, p), dt=rand(b, l, h, scale=0.5, shift=-2.0), A=rand(h, scale=0.3, shift=-1.0),
                B=rand(b, l, g, n, scale=n ** -0.5), C=rand(b, l, g, n, scale=n ** -0.5), D=rand(h, p),
                z=rand(b, l, h, p), dt_bias=rand(h, scale=0.3), initial_states=rand(b, h, p, n, scale=0.3))


@pytest.mark.parametrize("l, chunk", [(1, 64), (64, 64), (150, 64), (203, 32)])
def test_example_scan_matches_the_reference(example, l, chunk):
    kw = scan_inputs(2, l, 4, 2, 16, 8, seed=l)
    options = dict(dt_softplus=True, dt_limit=(0.0, 0.4), return_final_states=True)
    y, s = example.ssd_chunked(**kw, chunk_size=chunk, **options)
    ref_y, ref_s = reference(**kw, chunk_size=chunk, **options)
    assert y.dtype == torch.float64 and y.shape == ref_y.shape and s.shape == ref_s.shape
    torch.testing.assert_close(y, ref_y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s.double(), ref_s, rtol=1e-4, atol=1e-4)
    dy, ds = torch.randn_like(ref_y), torch.randn_like(ref_s)
    leaves = list(kw.values())
    got = torch.autograd.grad((y * dy).sum() + (s * ds).sum(), leaves)
    want = torch.autograd.grad((ref_y * dy).sum() + (ref_s * ds).sum(), leaves)
    for name, a, b in zip(kw, got, want):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3, msg=lambda m: f"d{name}: {m}")


def test_example_models_share_parameter_names(example):
    config = dict(d_state=64, headdim=64, chunk_size=64)
    ours = example.Mamba2LM(2, 256, 128, use_tk=True, **config)
    theirs = example.Mamba2LM(2, 256, 128, use_tk=False, **config)
    assert {n: p.shape for n, p in ours.state_dict().items()} == {n: p.shape for n, p in theirs.state_dict().items()}
    assert isinstance(ours.blocks[0].mixer, tk_ops.nn.Mamba2) and type(ours.blocks[0].mixer.in_proj) is tk_ops.nn.Linear
    assert isinstance(theirs.blocks[0].mixer, example.TorchMamba2)
    assert type(theirs.blocks[0].mixer.in_proj) is torch.nn.Linear
    assert example.parse_args(["--quick"]).layers == 2


def test_example_torch_model_trains_on_the_cpu(example):
    torch.manual_seed(0)
    model = example.Mamba2LM(1, 256, 64, use_tk=False, d_state=64, headdim=64, chunk_size=64)
    data = torch.randint(0, 64, (6, 2, 65))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for batch in data:
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert all(p.grad is not None for p in model.parameters())
