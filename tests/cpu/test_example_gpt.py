"""examples/train_gpt.py without a GPU: the --packed arguments, the packed documents' data (offsets, lengths, targets
inside each document, repeats the model can learn, determinism), and the PyTorch side of a packed step (positions
restarting per document, the block-diagonal causal mask), which must equal the model run on each document alone.
The dense data keeps its values."""
import math

import pytest
import torch

import tk_ops

from ..util import skip_unless_built
from .example_loader import load_example


@pytest.fixture(scope="module")
def example():
    yield from load_example("train_gpt")


def test_packed_arguments(example):
    plain = example.parse_args([])
    assert not plain.packed and plain.seq == 1024 and plain.batch == 8
    packed = example.parse_args(["--packed"])
    assert packed.packed and packed.steps == 300
    quick = example.parse_args(["--packed", "--quick"])
    assert quick.packed and (quick.steps, quick.layers, quick.seq, quick.batch) == (40, 2, 256, 4)


def documents(data, step):
    """[(start, end)] of the non-empty documents of one step."""
    cu = data.cu_seqlens[step].tolist()
    return [(a, b) for a, b in zip(cu[:-1], cu[1:]) if b > a]


@pytest.mark.parametrize("batch, seq", [(2, 256), (4, 64), (1, 1024), (3, 8)])
def test_packed_data_layout(example, batch, seq):
    steps, total, shortest = 5, batch * seq, max(1, seq // 8)
    data = example.make_packed_data(steps, batch, seq, 0, "cpu")
    assert len(data) == steps and data.max_seqlen == seq
    assert data.inputs.shape == data.targets.shape == (steps, total)
    assert data.inputs.dtype == data.targets.dtype == torch.long
    assert 0 <= int(data.inputs.min()) and int(data.inputs.max()) < example.VOCAB
    # A fixed number of offsets per step (the shortest documents' count + 1), from 0 to the row's end.
    cu = data.cu_seqlens
    assert cu.dtype == torch.int32 and cu.shape == (steps, math.ceil(total / shortest) + 1)
    assert (cu[:, 0] == 0).all() and (cu[:, -1] == total).all() and (cu.diff(dim=1) >= 0).all()
    for step in range(steps):
        lengths = [b - a for a, b in documents(data, step)]
        assert sum(lengths) == total
        assert all(shortest <= n <= seq for n in lengths[:-1]) and 1 <= lengths[-1] <= seq
        # Unused slots come after the documents (empty documents at the row's end only).
        ends = cu[step].tolist()
        assert ends[len(lengths):] == [total] * (len(ends) - len(lengths))


def test_packed_targets_stay_in_their_document_and_repeat(example):
    """Inside a document the targets are the inputs shifted by one, and the document repeats with a period of 16 to
    128 tokens that is at most half its length; so the repeats can be predicted from inside the document only."""
    data = example.make_packed_data(4, 4, 256, 1, "cpu")
    low, high = example.PERIODS
    checked = 0
    for step in range(len(data)):
        for a, b in documents(data, step):
            x, y = data.inputs[step, a:b], data.targets[step, a:b]
            assert torch.equal(x[1:], y[:-1])
            tokens = torch.cat([x, y[-1:]])  # the document's b - a + 1 tokens
            n = len(tokens)
            if n - 1 < 2 * low:
                continue  # a short last document may end before its first repeat
            periods = [p for p in range(low, min(high, (n - 1) // 2) + 1) if torch.equal(tokens[p:], tokens[:-p])]
            assert periods, f"step {step}, document {a}..{b}: no period of 16 to {(n - 1) // 2} tokens"
            checked += 1
    assert checked >= 10


def test_packed_data_is_seeded(example):
    one, again, other = (example.make_packed_data(3, 2, 128, seed, "cpu") for seed in (5, 5, 6))
    for name in ("inputs", "targets", "cu_seqlens"):
        assert torch.equal(getattr(one, name), getattr(again, name)), name
    assert not torch.equal(one.cu_seqlens, other.cu_seqlens)


def test_dense_data_keeps_its_values(example):
    """The Markov segments moved into their own function; make_data draws the same tokens from a seed as before."""
    gen = torch.Generator().manual_seed(3)
    seg = example.markov_segments(2 * 2, gen)
    period = torch.randint(example.PERIODS[0], example.PERIODS[1] + 1, (4, 1), generator=gen)
    want = seg.gather(1, torch.arange(301)[None, :] % period).view(2, 2, 301)
    torch.testing.assert_close(example.make_data(2, 2, 300, 3, "cpu"), want, rtol=0, atol=0)


def test_step_batch(example):
    dense = example.make_data(3, 2, 16, 0, "cpu")
    (tokens,), targets = example.step_batch(dense, 1)
    assert torch.equal(tokens, dense[1, :, :-1]) and torch.equal(targets, dense[1, :, 1:])
    packed = example.make_packed_data(3, 2, 64, 0, "cpu")
    (tokens, cu, max_seqlen), targets = example.step_batch(packed, 2)
    assert tokens.shape == (1, 128) and torch.equal(tokens[0], packed.inputs[2])
    assert cu is not None and torch.equal(cu, packed.cu_seqlens[2]) and max_seqlen == 64
    assert torch.equal(targets, packed.targets[2])


def test_document_ids(example):
    cu = torch.tensor([0, 3, 3, 7, 8, 10, 10], dtype=torch.int32)
    assert example.document_ids(cu, 10).tolist() == [0, 0, 0, 2, 2, 2, 2, 3, 4, 4]


@pytest.fixture
def torch_gpt(example):
    torch.manual_seed(0)
    model = example.GPT(2, 128, 2, 1, 64, use_tk=False)
    example.init_weights(model, 2)
    with torch.no_grad():  # attention that matters: larger projections than GPT-2's initialisation
        for block in model.blocks:
            block.mixer.qkv.weight.normal_(0, 0.1)
    return model


def test_packed_torch_model_equals_each_document_alone(example, torch_gpt):
    """The PyTorch side of --packed: one row of documents gives the logits of each document run on its own (positions
    from 0, no attention across documents), and gradients flow."""
    data = example.make_packed_data(1, 2, 64, 2, "cpu")
    (tokens, cu, max_seqlen), targets = example.step_batch(data, 0)
    logits = torch_gpt(tokens, cu, max_seqlen)
    assert logits.shape == (1, 128, example.VOCAB)
    docs = documents(data, 0)
    assert len(docs) >= 2
    for a, b in docs:
        alone = torch_gpt(tokens[:, a:b])
        torch.testing.assert_close(logits[:, a:b].float(), alone.float(), rtol=2e-2, atol=2e-2)
    # Attending across documents would change them: the first token of the second document is the witness.
    a = docs[1][0]
    joined = torch_gpt(tokens[:, : a + 1])
    assert (joined[0, a].float() - logits[0, a].float()).abs().max() > 1e-2
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, example.VOCAB), targets)
    loss.backward()
    assert math.isfinite(loss.item()) and all(p.grad is not None for p in torch_gpt.parameters())


def test_packed_tk_model_shapes_on_meta(example):
    """The tk_ops model takes the packed step through tk_ops.nn.Attention(x, cu_seqlens, max_seqlen): traced on the
    ops' Meta kernels (no GPU), forward and backward."""
    skip_unless_built("tk_ops.nn.Attention checks its head dimension against the built kernels")
    model = example.GPT(2, 128, 2, 1, 64, use_tk=True).to("meta")
    assert isinstance(model.blocks[0].mixer, tk_ops.nn.Attention)
    data = example.make_packed_data(1, 2, 64, 0, "meta")
    (tokens, cu, max_seqlen), _ = example.step_batch(data, 0)
    logits = model(tokens, cu, max_seqlen)
    assert logits.shape == (1, 128, example.VOCAB) and logits.device.type == "meta"
    logits.float().sum().backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())


def test_main_needs_a_gpu(example, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: main would train")
    assert example.main(["--packed", "--quick"]) == 2
    assert "CUDA GPU" in capsys.readouterr().err
