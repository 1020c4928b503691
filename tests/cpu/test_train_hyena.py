"""examples/train_hyena.py without a GPU: its torch.fft convolution (the peer the tk_ops model trains against) equals
the float64 reference, forward and gradients; the twin models share their parameters' names and values; the PyTorch
model trains on the CPU."""
import copy
import math

import pytest
import torch

import tk_ops
from tk_ops.reference.fftconv import fftconv as reference

from .example_loader import load_example

LEAVES = ("u", "k", "pregate", "postgate")
GATES = {"none": (), "pre": ("pregate",), "post": ("postgate",), "both": ("pregate", "postgate")}


@pytest.fixture(scope="module")
def example():
    yield from load_example("train_hyena")


def conv_inputs(b, h, n, nk, gates, seed):
    gen = torch.Generator().manual_seed(seed)
    x = dict(u=torch.randn(b, h, n, generator=gen, dtype=torch.float64),
             k=torch.randn(h, nk, generator=gen, dtype=torch.float64) / math.sqrt(nk), pregate=None, postgate=None)
    for g in gates:
        x[g] = 1 + 0.5 * torch.randn(b, h, n, generator=gen, dtype=torch.float64)
    return x


@pytest.mark.parametrize("n, nk", [(1, 1), (7, 3), (100, 100), (203, 150), (1024, 1024)])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
def test_torch_conv_matches_the_reference_in_float64(example, gates, n, nk):
    x = conv_inputs(3, 2, n, nk, GATES[gates], seed=n)
    names = ("u", "k") + GATES[gates]
    for name in names:
        x[name].requires_grad_()
    y = example.torch_fftconv(*(x[name] for name in LEAVES))
    want = reference(*(x[name] for name in LEAVES), form="direct")  # the explicit causal sum
    assert y.dtype == torch.float64 and y.shape == want.shape
    torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-12)
    dy = torch.randn_like(want)
    got = torch.autograd.grad(y, [x[name] for name in names], dy)
    ref = torch.autograd.grad(want, [x[name] for name in names], dy)
    for name, g, r in zip(names, got, ref):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12, msg=lambda s: f"d{name}: {s}")


def test_torch_conv_rounds_once_to_the_inputs_dtype(example):
    x = conv_inputs(2, 3, 300, 300, ("pregate", "postgate"), seed=0)
    args = [x[name].bfloat16() if name != "k" else x[name].float() for name in LEAVES]
    y = example.torch_fftconv(*args)
    want = reference(*args)
    assert y.dtype == torch.bfloat16
    assert ((y.double() - want).norm() / want.norm()).item() < 2 ** -8  # float32 work, one bf16 rounding


def test_twin_models_share_parameters(example):
    ours, theirs = example.twin_hyena_models(2, 64, 128, "cpu")
    assert type(ours.blocks[0].mixer.filter) is tk_ops.nn.LongConv
    assert type(ours.blocks[0].mixer.in_proj) is tk_ops.nn.Linear
    assert type(theirs.blocks[0].mixer.filter) is example.TorchLongConv
    assert type(theirs.blocks[0].mixer.in_proj) is torch.nn.Linear
    mine, twin = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == twin.keys()
    assert all(torch.equal(mine[name], twin[name]) for name in mine)
    filt = ours.blocks[1].mixer.filter
    assert filt.k.dtype == torch.float32 and filt.k.shape == (64, 128)
    # The filters keep their own initialisation (init_weights' N(0, 0.02) replaced), D starts at one.
    assert abs(filt.k.std().item() * math.sqrt(128) - 1) < 0.1 and torch.equal(filt.D, torch.ones(64))
    args = example.parse_args(["--quick"])
    assert (args.steps, args.layers, args.seq, args.batch) == (40, 2, 256, 4) and args.seq <= example.MAX_SEQ


def test_torch_model_trains_on_the_cpu(example):
    """A few AdamW steps of the PyTorch model on the example's data (what the peer side of --quick does, smaller)."""
    torch.manual_seed(0)
    _, model = example.twin_hyena_models(1, 64, 96, "cpu")
    data = example.make_data(8, 2, 96, 0, "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for batch in data:
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    filt = model.blocks[0].mixer.filter
    assert filt.k.grad.abs().sum() > 0 and filt.log_decay.grad.abs().sum() > 0 and filt.D.grad.abs().sum() > 0


def test_first_step_check_tells_a_defect_from_a_twin(example):
    """compare_first_step on two PyTorch models: zero for an exact copy, far above its tolerance when one of them
    convolves with its filter delayed by a tap (a defect the loss curves alone let through)."""
    torch.manual_seed(0)
    _, model = example.twin_hyena_models(2, 64, 96, "cpu")
    batch = example.make_data(1, 2, 96, 0, "cpu")[0]
    same = copy.deepcopy(model)
    assert example.compare_first_step(model, same, batch)[1] == 0.0
    class DelayedLongConv(example.TorchLongConv):
        def convolve(self, u, k, pregate, postgate):
            return example.torch_fftconv(u, torch.nn.functional.pad(k, (1, 0))[:, :k.shape[1]], pregate, postgate)

    delayed = copy.deepcopy(model)
    delayed_filter = DelayedLongConv(64, 96)
    delayed_filter.load_state_dict(model.blocks[1].mixer.filter.state_dict())
    delayed.blocks[1].mixer.filter = delayed_filter
    name, err = example.compare_first_step(delayed, model, batch)
    assert err > 5 * example.FIRST_STEP_TOLERANCE and name.startswith("blocks."), (name, err)
    assert all(p.grad is None for p in model.parameters())  # the check leaves no gradients behind


def test_main_needs_a_gpu(example, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert example.main(["--quick"]) == 2
    assert "trains on a CUDA GPU" in capsys.readouterr().err
