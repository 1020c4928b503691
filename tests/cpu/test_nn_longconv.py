"""tk_ops.nn.LongConv without a GPU: its parameters (names, shapes, dtypes, initial values), the checks of its
configuration and of what the op cannot see of its inputs (made before any kernel runs), the op's own checks of the
rest, and its math: with the convolution op replaced by the float64 reference, the module equals a float64
composition written out independently (the window, the skip term added after the convolution rather than folded into
the filter, the gates, the (B, N, d_model) layout), forward and the gradients of every parameter, the input and the
gates."""
import math

import pytest
import torch

import tk_ops
from tk_ops import reference
from tk_ops.errors import DTypeError, InputError
from tk_ops.nn import LongConv
from tk_ops.nn import fftconv as longconv_module

from ..util import skip_unless_built

GATES = {"none": (), "pre": ("pregate",), "post": ("postgate",), "both": ("pregate", "postgate")}


@pytest.fixture
def reference_conv(monkeypatch):
    """The module's convolution op (tk_ops.fftconv as python/tk_ops/nn/fftconv.py calls it) replaced by the float64
    reference, without rounding its output (so the module's own math can be held to float64 precision); records what
    the op receives."""
    seen = []

    def conv(u, k, pregate=None, postgate=None):
        seen.append(dict(u=u, k=k, pregate=pregate, postgate=postgate))
        return reference.fftconv(u, k, pregate, postgate, form="direct")
    monkeypatch.setattr(longconv_module, "fftconv", conv)
    return seen


def composition(u, k, log_decay, D, pregate, postgate, max_len):
    """The documented math in float64, (B, N, d_model) in and out: the windowed first N taps of k, the convolution
    by an explicit causal sum, D * v added after it, the gates around."""
    b, n, h = u.shape
    v = u if pregate is None else u * pregate
    t = torch.arange(n, dtype=torch.float64) / max_len
    k_eff = k[:, :n] * torch.exp(-torch.exp(log_decay)[:, None] * t)
    y = torch.zeros_like(v)
    for m in range(n):  # y[:, i] += k_eff[:, m] * v[:, i - m]
        y[:, m:] = y[:, m:] + k_eff[:, m] * v[:, :n - m]
    y = y + D * v
    return y if postgate is None else y * postgate


def module_with_visible_parameters(d_model, max_len, seed=0):
    """A module whose every parameter shows in the output: a larger filter, varied decays and skip weights."""
    torch.manual_seed(seed)
    m = LongConv(d_model, max_len)
    with torch.no_grad():
        m.k.mul_(3.0)
        m.log_decay.add_(0.3 * torch.randn(d_model))
        m.D.normal_(1.0, 0.5)
    return m


def inputs(b, n, h, gates, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = dict(u=torch.randn(b, n, h, generator=gen).bfloat16(), pregate=None, postgate=None)
    for g in gates:
        x[g] = (1 + 0.5 * torch.randn(b, n, h, generator=gen)).bfloat16()
    return x


# ---------------------------------------------------------------- parameters

def test_parameters():
    m = LongConv(48, 300)
    assert {name: (tuple(p.shape), p.dtype) for name, p in m.named_parameters()} == {
        "k": ((48, 300), torch.float32), "log_decay": ((48,), torch.float32), "D": ((48,), torch.float32)}
    assert (m.d_model, m.max_len, m.decay_span) == (48, 300, (0.3, 1.5))
    assert "LongConv" in tk_ops.nn.__all__
    assert repr(m) == "LongConv(d_model=48, max_len=300, decay_span=(0.3, 1.5))"
    assert all(getattr(p, "_no_weight_decay", False) for p in (m.log_decay, m.D))


def test_initial_values():
    torch.manual_seed(0)
    m = LongConv(256, 4096, decay_span=(0.25, 2.0))
    assert abs(m.k.std().item() * math.sqrt(4096) - 1) < 0.01 and abs(m.k.mean().item()) < 1e-3
    assert torch.equal(m.D, torch.ones(256))
    # The windows fall to 1e-2 after 25% of max_len for the fastest channel and 200% for the slowest, evenly spaced.
    rates = m.log_decay.exp().double()
    torch.testing.assert_close(rates[0].item(), math.log(100) / 2.0, rtol=1e-6, atol=0)
    torch.testing.assert_close(rates[-1].item(), math.log(100) / 0.25, rtol=1e-6, atol=0)
    step = (rates[-1] - rates[0]).item() / 255  # the rates are kept as float32 logs: equal steps to 1e-5
    torch.testing.assert_close(rates.diff(), torch.full((255,), step, dtype=torch.float64), rtol=0, atol=1e-5)
    # reset_parameters gives them back after any change.
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    m.reset_parameters()
    assert torch.equal(m.D, torch.ones(256)) and m.k.std() > 0 and torch.allclose(m.log_decay.exp().double(), rates)


def test_effective_filter():
    m = module_with_visible_parameters(6, 50)
    with torch.no_grad():
        full, short = m.effective_filter(50), m.effective_filter(7)
    assert full.shape == (6, 50) and full.dtype == torch.float32 and short.shape == (6, 7)
    assert torch.equal(short, full[:, :7])  # a shorter sequence uses the same first taps
    window = torch.exp(-m.log_decay.exp()[:, None] * torch.arange(50) / 50)
    torch.testing.assert_close(full[:, 1:], (m.k * window)[:, 1:])
    torch.testing.assert_close(full[:, 0], m.k[:, 0] + m.D)  # the skip term is tap 0


# ---------------------------------------------------------------- configuration and input checks

@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=0, max_len=10), "d_model must be a positive int, got 0"),
    (dict(d_model=8.0, max_len=10), "d_model must be a positive int, got 8.0"),
    (dict(d_model=8, max_len=True), "max_len must be a positive int, got True"),
    (dict(d_model=8, max_len=10, decay_span=(1.5, 0.3)), r"decay_span must be \(fastest, slowest\) with 0 < fastest"),
    (dict(d_model=8, max_len=10, decay_span=(0.0, 1.0)), "decay_span must be"),
    (dict(d_model=8, max_len=10, decay_span=0.3), "decay_span must be"),
    (dict(d_model=8, max_len=10, decay_span=(0.3, math.inf)), "decay_span must be"),
])
def test_rejects_bad_configurations(kwargs, match):
    with pytest.raises(InputError, match="tk_ops.nn.LongConv: " + match):
        LongConv(**kwargs)


def test_max_len_is_held_to_the_kernels_longest_sequence():
    skip_unless_built("the kernels' longest sequence (fftconv_max_len)", "fftconv")
    longest = torch.ops.tk_ops.fftconv_max_len()
    LongConv(8, longest)
    with pytest.raises(InputError, match=f"max_len = {longest + 1} is longer than the longest sequence "
                                         f"tk_ops.fftconv's kernels take, {longest}"):
        LongConv(8, longest + 1)


def test_inputs_are_checked_before_the_op(reference_conv):
    """What the op cannot see: the module's (B, N, d_model) layout and its filter's length."""
    m = LongConv(16, 100)
    u = torch.zeros(2, 30, 16, dtype=torch.bfloat16)
    cases = [
        (r"input must be \(batch, seq_len, 16\), got shape \(30, 16\)", u[0]),
        (r"input must be \(batch, seq_len, 16\), got shape \(2, 16, 30\)", u.transpose(1, 2)),
        (r"input must be \(batch, seq_len, 16\), got list", [1, 2]),
        ("seq_len = 101 must be between 1 and max_len = 100, the filter's length; build the module with a larger "
         "max_len", torch.zeros(2, 101, 16, dtype=torch.bfloat16)),
        ("seq_len = 0 must be between 1 and max_len = 100", u[:, :0]),
    ]
    for match, arg in cases:
        with pytest.raises(InputError, match="tk_ops.nn.LongConv: " + match):
            m(arg)
    assert not reference_conv  # nothing reached the op
    m(u, pregate=u, postgate=u)  # and the shapes the messages ask for pass
    assert len(reference_conv) == 1


def test_the_op_checks_the_rest():
    """The input's dtype and the gates are the op's rules (kernels/fftconv/binding.cpp), which it checks on CPU
    tensors as on the GPU, in its own (B, d_model, N) layout."""
    skip_unless_built("the FFT convolution op", "fftconv")
    m = LongConv(16, 100)
    u = torch.zeros(2, 30, 16, dtype=torch.bfloat16)
    cases = [
        (DTypeError, "u must be bfloat16 or float16, got torch.float32", (u.float(),), {}),
        (InputError, r"pregate must have u's shape \(2, 16, 30\), got \(2, 16, 29\)", (u,), dict(pregate=u[:, 1:])),
        (InputError, r"pregate must have u's shape \(2, 16, 30\), got \(30, 16\)", (u,), dict(pregate=u[0])),
        (DTypeError, "postgate must be a torch.Tensor or None, got float", (u,), dict(postgate=1.0)),
        (DTypeError, "postgate must have u's dtype torch.bfloat16, got torch.float16", (u,), dict(postgate=u.half())),
    ]
    for error, match, args, kwargs in cases:
        with pytest.raises(error, match="tk_ops.fftconv: " + match):
            m(*args, **kwargs)


# ---------------------------------------------------------------- the math

@pytest.mark.parametrize("n, max_len", [(1, 1), (1, 40), (17, 40), (40, 40), (100, 256)])
@pytest.mark.parametrize("gates", GATES, ids=GATES)
def test_matches_the_float64_composition(reference_conv, gates, n, max_len):
    m = module_with_visible_parameters(5, max_len, seed=n)
    x = inputs(3, n, 5, GATES[gates], seed=max_len)
    names = ("u",) + GATES[gates]
    leaves = {name: x[name].clone().requires_grad_() for name in names}
    y = m(leaves["u"], leaves.get("pregate"), leaves.get("postgate"))
    assert y.shape == (3, n, 5)

    # The same inputs and parameters in float64, through the composition.
    params = dict((name, p.detach().double().requires_grad_()) for name, p in m.named_parameters())
    leaves64 = {name: x[name].double().requires_grad_() for name in names}
    want = composition(leaves64["u"], params["k"], params["log_decay"], params["D"], leaves64.get("pregate"),
                       leaves64.get("postgate"), max_len)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-6)  # the float32 filter is the only rounding

    dy = torch.randn_like(want)
    got = torch.autograd.grad(y, [*m.parameters(), *leaves.values()], dy)
    ref = torch.autograd.grad(want, [*params.values(), *leaves64.values()], dy)
    for name, g, r in zip([*params, *names], got, ref):
        assert g.shape == r.shape and g.dtype == (torch.float32 if name in params else torch.bfloat16), name
        # The bf16 leaves' gradients are rounded once to bf16 (unit roundoff 2^-8).
        rtol = 1e-5 if name in params else 2 ** -8
        torch.testing.assert_close(g.double(), r, rtol=rtol, atol=1e-6, msg=lambda s: f"d{name}: {s}")


def test_hands_the_op_channels_first_views_and_n_taps(reference_conv):
    m = module_with_visible_parameters(8, 64)
    x = inputs(2, 20, 8, ("pregate", "postgate"))
    y = m(x["u"], x["pregate"], x["postgate"])
    (call,) = reference_conv
    assert call["u"].shape == call["pregate"].shape == call["postgate"].shape == (2, 8, 20)
    for name in ("u", "pregate", "postgate"):  # views of the caller's tensors, not copies
        assert call[name].data_ptr() == x[name].data_ptr() and torch.equal(call[name], x[name].transpose(1, 2))
    assert call["k"].shape == (8, 20) and call["k"].dtype == torch.float32
    assert y.shape == (2, 20, 8) and y.stride() == (160, 1, 20)  # a transposed view of the op's output


def test_output_takes_the_ops_dtype(monkeypatch):
    """With a stand-in that rounds as the op does, the module returns u's dtype in u's layout."""
    def rounded(u, k, pregate=None, postgate=None):
        return reference.fftconv(u, k, pregate, postgate).to(u.dtype)
    monkeypatch.setattr(longconv_module, "fftconv", rounded)
    m = LongConv(8, 32)
    for dtype in (torch.bfloat16, torch.float16):
        u = torch.randn(2, 32, 8).to(dtype)
        y = m(u, u, u)
        assert y.dtype == dtype and y.shape == u.shape


def test_meta_tensors_through_the_op():
    """The real op's Meta kernel (its rules and output shape) behind the module, on the meta device."""
    skip_unless_built("the FFT convolution op", "fftconv")
    m = LongConv(16, 4096, device="meta")
    u = torch.empty(3, 4096, 16, dtype=torch.float16, device="meta")
    with torch.no_grad():
        y = m(u, u, u)
    assert y.shape == u.shape and y.dtype == torch.float16 and y.device.type == "meta"


def test_a_subclass_setting_the_old_conv_attribute_is_refused():
    # It would otherwise be ignored, and a "PyTorch twin" built that way would run the tk_ops kernels.
    with pytest.raises(TypeError, match=r"override convolve\(\)"):
        class Twin(tk_ops.nn.LongConv):  # noqa: F841
            conv = staticmethod(lambda *args, **kwargs: None)
