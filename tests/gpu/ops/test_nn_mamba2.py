"""tk_ops.nn.Mamba2 on the GPU: the forward against a float64 PyTorch composition of the same pieces (in_proj, causal
depthwise conv + SiLU, tk_ops.reference.mamba2_chunk_scan, gated RMSNorm, out_proj) that rounds where the module rounds
(the bf16 outputs of the projection, the convolution and the scan), for several configurations; decoding token by token
(step, with tk_ops.mamba2_step) and chunked prefill through the cache equal one forward; every parameter's gradient
against the composition's; a dt_limit that clamps dt at both ends, forward and gradients. Skipped unless the 'gemm' and
'mamba2' families are in the build."""
import math

import pytest
import torch
import torch.nn.functional as F

import tk_ops
from tk_ops.reference.mamba2 import mamba2_chunk_scan as scan_ref

from ...util import requires_families
from ..util import assert_close, rel_err

# Four bf16 roundings in a row (projection, convolution, scan, norm), each up to 2^-9 relative, and the scan's own
# bf16 / fp32 error (1e-3 .. 1e-2): the module's output lands within 2e-2 of the composition.
TOL = 2e-2
# The gradients pass the same roundings twice (forward, then the backward's 16-bit operands).
GRAD_TOL = 5e-2


pytestmark = requires_families("gemm", "mamba2")

CONFIGS = {
    "default": dict(d_state=128),
    "n64_chunk64": dict(d_state=64, chunk_size=64),
    "groups2": dict(d_state=64, ngroups=2),
    "D_per_channel": dict(d_state=64, D_has_hdim=True),
    "norm_before_gate": dict(d_state=64, norm_before_gate=True),
    "no_rmsnorm": dict(d_state=64, rmsnorm=False),
    "headdim128_bias": dict(d_model=512, d_state=128, headdim=128, bias=True),  # 8 heads: in_proj's width % 8
}


def make_module(seed=0, d_model=256, **config):
    torch.manual_seed(seed)
    m = tk_ops.nn.Mamba2(d_model, device="cuda", **config)
    with torch.no_grad():  # away from the initial values, so that every parameter shows in the output
        m.conv1d.weight.mul_(2.0)
        if m.conv1d.bias is not None:
            m.conv1d.bias.normal_(0.0, 0.1)
        m.D.normal_(1.0, 0.3)
        if m.rmsnorm:
            m.norm.weight.normal_(1.0, 0.2)
        for lin in (m.in_proj, m.out_proj):
            if lin.bias is not None:
                lin.bias.normal_(0.0, 0.05)
    return m.eval()


def reference(m, u):
    """The module's forward in float64, rounded to bf16 where the module's tensors are bf16."""
    f64 = torch.float64
    zxbcdt = F.linear(u.to(f64), m.in_proj.weight.to(f64),
                      None if m.in_proj.bias is None else m.in_proj.bias.to(f64)).bfloat16()
    z, xBC, dt = zxbcdt.split([m.d_inner, m.conv_dim, m.nheads], dim=-1)
    xBC_t = F.pad(xBC.transpose(1, 2).to(f64), (m.d_conv - 1, 0))
    conv = F.conv1d(xBC_t, m.conv1d.weight.to(f64), None if m.conv1d.bias is None else m.conv1d.bias.to(f64),
                    groups=m.conv_dim)
    xBC = F.silu(conv).transpose(1, 2).bfloat16()
    x, B, C = xBC.split([m.d_inner, m.ngroups * m.d_state, m.ngroups * m.d_state], dim=-1)
    x = x.unflatten(-1, (m.nheads, m.headdim))
    B, C = (t.unflatten(-1, (m.ngroups, m.d_state)) for t in (B, C))
    D = m.D.float().view(m.nheads, m.headdim) if m.D_has_hdim else m.D.float()
    gate = None if m.rmsnorm else z.unflatten(-1, (m.nheads, m.headdim))
    y = scan_ref(x, dt.float(), -torch.exp(m.A_log.float()), B, C, D=D, z=gate, dt_bias=m.dt_bias.float(),
                 dt_softplus=True, dt_limit=m.dt_limit).bfloat16().flatten(-2)
    if m.rmsnorm:
        y64, z64 = y.to(f64), z.to(f64)
        if not m.norm_before_gate:
            y64 = y64 * F.silu(z64)
        groups = y64.unflatten(-1, (m.ngroups, -1))
        y64 = (groups / torch.sqrt(groups.square().mean(-1, keepdim=True) + m.norm.eps)).flatten(-2)
        y64 = y64 * m.norm.weight.to(f64)
        if m.norm_before_gate:
            y64 = y64 * F.silu(z64)
        y = y64.bfloat16()
    return F.linear(y.to(f64), m.out_proj.weight.to(f64), None if m.out_proj.bias is None else m.out_proj.bias.to(f64))


def inputs(m, b=2, l=200, seed=1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(b, l, m.d_model, device="cuda", generator=g).bfloat16()


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_forward_matches_the_composition(config):
    m = make_module(**config)
    u = inputs(m)
    with torch.no_grad():
        out, ref = m(u), reference(m, u)
    assert out.shape == u.shape and out.dtype == torch.bfloat16
    assert_close(out, ref, TOL, "forward")


@pytest.mark.parametrize("config", ["default", "groups2", "D_per_channel", "no_rmsnorm", "headdim128_bias"])
def test_decoding_steps_equal_the_forward(config):
    """A prefill through the cache, then one token at a time with step: the outputs of one forward over it all."""
    m = make_module(**CONFIGS[config])
    u = inputs(m, l=160)
    prefill = 130
    with torch.no_grad():
        full = m(u)
        cache = m.init_cache(u.shape[0])
        head = m(u[:, :prefill], cache)
        steps = [m.step(u[:, t], cache) for t in range(prefill, u.shape[1])]
        step3d = m.step(u[:, :1], m.init_cache(u.shape[0]))  # (B, 1, d_model) in, same shape out
    assert step3d.shape == (u.shape[0], 1, m.d_model)
    assert_close(head, full[:, :prefill], TOL / 2, "prefill through the cache")
    assert_close(torch.stack(steps, dim=1), full[:, prefill:], TOL, "decoded tokens")


def test_decoding_from_an_empty_cache():
    m = make_module(**CONFIGS["n64_chunk64"])
    u = inputs(m, l=24)
    with torch.no_grad():
        full = m(u)
        cache = m.init_cache(u.shape[0])
        steps = torch.stack([m.step(u[:, t], cache) for t in range(u.shape[1])], dim=1)
    assert_close(steps, full, TOL, "decoded tokens")


def test_chunked_prefill_equals_one_pass():
    """Two forwards chained through the cache (conv window and ssm state) equal one forward, and leave the same
    cache behind."""
    m = make_module(**CONFIGS["default"])
    u = inputs(m, l=300)
    with torch.no_grad():
        cache_one, cache_two = m.init_cache(2), m.init_cache(2)
        full = m(u, cache_one)
        first, second = m(u[:, :97], cache_two), m(u[:, 97:], cache_two)
    assert_close(torch.cat([first, second], dim=1), full, TOL / 2, "two forwards through the cache")
    # The last d_conv inputs, copied (the projection's rounding may differ by an ulp between the two GEMM sizes).
    assert_close(cache_two[0], cache_one[0], 1e-2, "conv_state")
    assert_close(cache_two[1], cache_one[1], TOL / 2, "ssm_state")
    # A fresh cache changes nothing: forward with it equals forward without one (up to the convolution's fp32
    # summation order, which may flip a bf16 rounding).
    with torch.no_grad():
        assert_close(full, m(u), 5e-3, "forward without a cache")


@pytest.mark.parametrize("config", ["default", "groups2", "D_per_channel", "no_rmsnorm"])
def test_gradients_match_the_composition(config):
    m = make_module(**CONFIGS[config]).train()
    u = inputs(m, l=150)
    weights = torch.randn(u.shape, device="cuda", dtype=torch.float64)
    names, params = zip(*m.named_parameters())
    got = torch.autograd.grad((m(u).double() * weights).sum(), params)
    ref = torch.autograd.grad((reference(m, u) * weights).sum(), params)
    for name, g, r in zip(names, got, ref):
        assert_close(g, r, GRAD_TOL, name)


# A dt_limit that binds: make_dt_limited spreads dt_bias over the heads so that softplus(dt + dt_bias) spans about
# 1e-3 .. 0.1 (Mamba2's init range, log-spaced rather than drawn), and these limits clamp a quarter or more of the
# steps at each end. Slowly decaying heads (A_init_range 0.01 .. 0.1) and a small D leave the scan, and so dt, most
# of the output: on the CPU, lifting the limits moves the composition's output by 0.45 relative (0.77 in the worst
# row).
DT_LIMIT = (0.003, 0.03)


def make_dt_limited():
    m = make_module(d_state=64, dt_limit=DT_LIMIT, A_init_range=(0.01, 0.1))
    with torch.no_grad():
        dt = torch.logspace(-3, -1, m.nheads, device="cuda", dtype=torch.float64)
        m.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # the inverse of softplus
        m.D.mul_(0.1)
    return m


def test_dt_limit_clamps_and_matches_the_composition():
    """nn.Mamba2(dt_limit=...) with limits that clamp dt at both ends: the forward and every parameter's gradient
    (none through a clamped dt) against the composition, which clamps as mamba_chunk_scan_combined does. The premise
    first: the limits clamp a fair share of the steps at each end, and lifting them moves the composition's output by
    more than 5 times the bound."""
    m = make_dt_limited().train()
    u = inputs(m)
    with torch.no_grad():
        raw_dt = F.linear(u.double(), m.in_proj.weight.double()).bfloat16()[..., -m.nheads:]
        dt = F.softplus(raw_dt.double() + m.dt_bias.double())
        below, above = (dt < DT_LIMIT[0]).double().mean().item(), (dt > DT_LIMIT[1]).double().mean().item()
        ref = reference(m, u)
        m.dt_limit = (0.0, math.inf)
        unlimited = reference(m, u)
        m.dt_limit = DT_LIMIT
        out = m(u)
    assert 0.1 < below < 0.6 and 0.1 < above < 0.6, f"clamped: {below:.2f} below, {above:.2f} above"
    assert rel_err(unlimited, ref) > 5 * TOL, "lifting the limits hardly changes the output"
    assert_close(out, ref, TOL, "forward")
    weights = torch.randn(u.shape, device="cuda", dtype=torch.float64)
    names, params = zip(*m.named_parameters())
    got = torch.autograd.grad((m(u).double() * weights).sum(), params)
    want = torch.autograd.grad((reference(m, u) * weights).sum(), params)
    for name, g, r in zip(names, got, want):
        assert_close(g, r, GRAD_TOL, f"{name} under dt_limit")


def test_step_under_grad_mode_needs_no_gradient():
    m = make_module(**CONFIGS["n64_chunk64"])
    cache = m.init_cache(2)
    y = m.step(inputs(m, l=1)[:, 0], cache)  # grad mode on: step itself runs without gradients
    assert not y.requires_grad and not cache[0].requires_grad and not cache[1].requires_grad
