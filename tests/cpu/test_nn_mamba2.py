"""tk_ops.nn.Mamba2 without a GPU: construction and its checks, mamba_ssm's parameter names and shapes (so that its
state_dicts load), its initialisation, the cache's layout and checks, input-shape errors before any kernel runs, and the
gated RMSNorm against its formula."""
import math

import pytest
import torch
import torch.nn.functional as F

import tk_ops
from tk_ops.errors import InputError
from tk_ops.nn import Mamba2
from tk_ops.nn.mamba2 import _GatedRMSNorm


def mamba_ssm_shapes(d_model, d_state=128, d_conv=4, expand=2, headdim=64, ngroups=1, D_has_hdim=False,
                     rmsnorm=True, bias=False, conv_bias=True):
    """The parameter shapes of mamba_ssm's Mamba2 (single process, d_ssm = d_inner), from its constructor."""
    d_inner = expand * d_model
    nheads = d_inner // headdim
    conv_dim = d_inner + 2 * ngroups * d_state
    shapes = {"dt_bias": (nheads,), "A_log": (nheads,), "D": (d_inner if D_has_hdim else nheads,),
              "in_proj.weight": (2 * d_inner + 2 * ngroups * d_state + nheads, d_model),
              "conv1d.weight": (conv_dim, 1, d_conv), "out_proj.weight": (d_model, d_inner)}
    if conv_bias:
        shapes["conv1d.bias"] = (conv_dim,)
    if rmsnorm:
        shapes["norm.weight"] = (d_inner,)
    if bias:
        shapes["in_proj.bias"] = (2 * d_inner + 2 * ngroups * d_state + nheads,)
        shapes["out_proj.bias"] = (d_model,)
    return shapes


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(d_state=64, ngroups=2),
    dict(D_has_hdim=True, bias=True),
    dict(rmsnorm=False, conv_bias=False, d_conv=3),
    dict(headdim=128, expand=4),
], ids=["default", "groups", "D_hdim_bias", "no_norm", "headdim128"])
def test_parameter_names_and_shapes_are_mamba_ssms(kwargs):
    m = Mamba2(512, **kwargs)
    got = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert got == mamba_ssm_shapes(512, **kwargs)


def test_defaults_are_mamba_ssms():
    m = Mamba2(1024)
    assert (m.d_state, m.d_conv, m.expand, m.headdim, m.ngroups, m.chunk_size) == (128, 4, 2, 64, 1, 256)
    assert (m.d_inner, m.nheads, m.conv_dim) == (2048, 32, 2048 + 256)
    assert m.rmsnorm and not m.norm_before_gate and not m.D_has_hdim and m.dt_limit == (0.0, math.inf)
    assert m.norm.eps == 1e-5 and m.norm.group_size == 2048
    assert isinstance(m.in_proj, tk_ops.nn.Linear) and isinstance(m.out_proj, tk_ops.nn.Linear)
    assert m.in_proj.weight.dtype == torch.bfloat16 and m.out_proj.weight.dtype == torch.bfloat16
    for p in (m.conv1d.weight, m.conv1d.bias, m.dt_bias, m.A_log, m.D, m.norm.weight):
        assert p.dtype == torch.float32
    assert "Mamba2" in tk_ops.nn.__all__


def test_initialisation():
    torch.manual_seed(0)
    m = Mamba2(1024, dt_min=0.001, dt_max=0.1)
    A = torch.exp(m.A_log)
    assert (A >= 1).all() and (A <= 16).all()
    dt = F.softplus(m.dt_bias)  # dt_bias is softplus^-1 of the initial dt
    assert (dt >= 0.001 * 0.999).all() and (dt <= 0.1 * 1.001).all()
    assert torch.equal(m.D, torch.ones(32)) and torch.equal(m.norm.weight, torch.ones(2048))
    assert all(getattr(p, "_no_weight_decay", False) for p in (m.dt_bias, m.A_log, m.D))


def test_loads_a_mamba_ssm_state_dict():
    """A checkpoint in mamba_ssm's names, all bfloat16 (its dtype=torch.bfloat16 models), loads strictly; the float32
    parameters take the values."""
    torch.manual_seed(1)
    shapes = mamba_ssm_shapes(256, d_state=64)
    sd = {k: torch.randn(s).bfloat16() for k, s in shapes.items()}
    m = Mamba2(256, d_state=64)
    m.load_state_dict(sd, strict=True)
    for k, v in m.state_dict().items():
        assert torch.equal(v.float(), sd[k].float()), k
    assert m.A_log.dtype == torch.float32 and m.in_proj.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=0), "d_model must be a positive int"),
    (dict(d_model=256, d_state=True), "d_state must be a positive int"),
    (dict(d_model=96, headdim=128), r"expand \* d_model = 192 must be a multiple of headdim = 128"),
    (dict(d_model=256, ngroups=3), r"ngroups = 3 must divide the number of heads .* = 8"),
    (dict(d_model=256, A_init_range=(0.0, 16.0)), "A_init_range must be"),
    (dict(d_model=256, rmsnorm=1), "rmsnorm must be a bool, got int"),
    (dict(d_model=256, headdim=128), "out_features=1284 must be a multiple of 8"),  # 4 heads: in_proj's width
])
def test_rejects_bad_configurations(kwargs, match):
    with pytest.raises(InputError, match=match):
        Mamba2(**kwargs)


def test_init_cache():
    m = Mamba2(256, d_state=64, ngroups=2, d_conv=3)
    conv_state, ssm_state = m.init_cache(5)
    assert conv_state.shape == (5, 512 + 2 * 2 * 64, 3) and ssm_state.shape == (5, 8, 64, 64)
    assert conv_state.dtype == ssm_state.dtype == torch.float32
    assert not conv_state.any() and not ssm_state.any()


def test_input_shapes_are_checked_before_any_kernel():
    m = Mamba2(256, d_state=64)
    with pytest.raises(InputError, match=r"input must be \(batch, seq_len, 256\), got shape \(2, 256\)"):
        m(torch.zeros(2, 256))
    with pytest.raises(InputError, match=r"step: input must be \(batch, 256\) or \(batch, 1, 256\)"):
        m.step(torch.zeros(2, 3, 256), m.init_cache(2))
    with pytest.raises(InputError, match=r"step: input must be"):
        m.step(torch.zeros(2, 128), m.init_cache(2))


@pytest.mark.parametrize("cache, got", [
    (lambda m: m.init_cache(3), r"\(3, 640, 4\) torch.float32"),
    (lambda m: (m.init_cache(2)[0], m.init_cache(2)[1].double()), "torch.float64"),
    (lambda m: m.init_cache(2)[1], "Tensor"),
    (lambda m: (m.init_cache(2)[0],), r"\(2, 640, 4\)"),
])
def test_cache_is_checked(cache, got):
    m = Mamba2(256, d_state=64)
    with pytest.raises(InputError, match=r"the cache must be \(conv_state \(2, 640, 4\), ssm_state \(2, 8, 64, 64\)\), "
                                         r"float32, as init_cache\(2\) makes it; got .*" + got):
        m.step(torch.zeros(2, 256), cache(m))
    with pytest.raises(InputError, match="the cache must be"):
        m(torch.zeros(2, 7, 256), cache(m))


@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("gated", [False, True])
def test_gated_rmsnorm(norm_before_gate, groups, gated):
    torch.manual_seed(2)
    hidden = 64
    norm = _GatedRMSNorm(hidden, eps=1e-5, norm_before_gate=norm_before_gate, group_size=hidden // groups)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.3)
    y, z = torch.randn(3, 5, hidden), torch.randn(3, 5, hidden)
    out = norm(y, z if gated else None)
    y64, z64, w = y.double(), z.double(), norm.weight.double()
    if gated and not norm_before_gate:
        y64 = y64 * z64 * torch.sigmoid(z64)
    parts = y64.unflatten(-1, (groups, -1))
    expect = (parts / torch.sqrt((parts ** 2).mean(-1, keepdim=True) + 1e-5)).flatten(-2) * w
    if gated and norm_before_gate:
        expect = expect * z64 * torch.sigmoid(z64)
    torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=1e-5)
    assert norm(y.bfloat16(), z.bfloat16()).dtype == torch.bfloat16


# ---------------------------------------------------------------- the module's wiring, with PyTorch stand-ins

@pytest.fixture
def standins(monkeypatch):
    """The GEMM, the scan and the step replaced by PyTorch (the float64 references, rounded like the ops' outputs), so
    that the module's own code (splits, convolution and its cache, norm, decoding) runs on the CPU."""
    from tk_ops.reference import mamba2 as ref

    def scan(x, dt, A, B, C, chunk_size=256, **kw):
        out = ref.mamba2_chunk_scan(x, dt, A, B, C, chunk_size, **kw)
        if kw.get("return_final_states"):
            return out[0].to(x.dtype), out[1].float()
        return out.to(x.dtype)

    def step(state, x, dt, A, B, C, **kw):
        return ref.mamba2_step(state, x, dt, A, B, C, **kw).to(x.dtype)

    monkeypatch.setattr(tk_ops.nn.gemm, "_linear", lambda x, w, b: F.linear(x.float(), w.float(),
                                                                    None if b is None else b.float()).to(x.dtype))
    monkeypatch.setattr(tk_ops.nn.mamba2, "mamba2_chunk_scan", scan)
    monkeypatch.setattr(tk_ops.nn.mamba2, "mamba2_step", step)


@pytest.mark.parametrize("kwargs", [dict(d_state=64), dict(d_state=16, ngroups=2, D_has_hdim=True),
                                    dict(d_state=32, rmsnorm=False, bias=True)], ids=["default", "groups", "no_norm"])
def test_decoding_and_chunked_prefill_match_the_forward(kwargs, standins):
    torch.manual_seed(3)
    m = Mamba2(128, headdim=32, **kwargs)
    with torch.no_grad():
        m.conv1d.bias.normal_(0.0, 0.1)
        m.D.normal_(1.0, 0.3)
    u = torch.randn(2, 21, 128).bfloat16()
    with torch.no_grad():
        full = m(u)
        cache = m.init_cache(2)
        head = m(u[:, :9], cache)
        steps = [m.step(u[:, t], cache) for t in range(9, 21)]
        cache2 = m.init_cache(2)
        pieces = torch.cat([m(u[:, :5], cache2), m(u[:, 5:], cache2)], dim=1)
    assert full.shape == u.shape and full.dtype == torch.bfloat16
    for what, got, expect in (("prefill", head, full[:, :9]), ("steps", torch.stack(steps, 1), full[:, 9:]),
                              ("two pieces", pieces, full)):
        err = ((got.double() - expect.double()).norm() / expect.double().norm()).item()
        assert err < 2e-2, f"{what}: relative error {err:.3e}"
    # Prefill + steps, two pieces and one pass through a cache all leave the cache at the same point.
    with torch.no_grad():
        cache3 = m.init_cache(2)
        m(u, cache3)
    for c in (cache, cache2):
        for got, expect in zip(c, cache3):
            err = ((got.double() - expect.double()).norm() / expect.double().norm()).item()
            assert err < 2e-2, f"cache: relative error {err:.3e}"


def test_a_subclass_setting_the_old_scan_attribute_is_refused():
    # It would otherwise be ignored, and a "PyTorch twin" built that way would run the tk_ops kernels.
    with pytest.raises(TypeError, match=r"override _chunk_scan\(\)"):
        class Twin(Mamba2):  # noqa: F841
            scan = staticmethod(lambda *args, **kwargs: None)
