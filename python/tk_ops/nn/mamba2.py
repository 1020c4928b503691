"""``tk_ops.nn.Mamba2``: the Mamba-2 mixer on the tk_ops scan and decoding step."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..errors import InputError
from ..mamba2 import mamba2_chunk_scan, mamba2_step
from .gemm import Linear


class Mamba2(torch.nn.Module):
    """The Mamba-2 mixer: ``u (B, L, d_model) -> (B, L, d_model)``, causal, with a cache for chunked prefill and
    decoding; mamba_ssm's ``Mamba2`` module (single process, ``d_ssm`` = the whole inner width), with its parameter
    names, shapes and defaults, so that its state_dict loads: ``in_proj.weight``, ``conv1d.weight`` / ``.bias``,
    ``dt_bias``, ``A_log``, ``D``, ``norm.weight``, ``out_proj.weight`` (and the projections' biases when ``bias``).

    With d_inner = expand * d_model, H = d_inner / headdim heads and G = ngroups::

        z, xBC, dt = in_proj(u).split([d_inner, d_inner + 2 G d_state, H])
        x, B, C    = silu(causal depthwise conv1d(xBC)).split([d_inner, G d_state, G d_state])
        y = tk_ops.mamba2_chunk_scan(x, dt, -exp(A_log), B, C, chunk_size, D=D, dt_bias=dt_bias, dt_softplus=True,
                                     dt_limit=dt_limit, z=None if rmsnorm else z)
        y = norm(y, z)     # gated RMSNorm over groups of d_inner / G: rms_norm(y * silu(z)) * weight
                           # (norm_before_gate: rms_norm(y) * weight * silu(z))
        out = out_proj(y)

    ``in_proj`` and ``out_proj`` are :class:`Linear` (tk_ops GEMMs, bfloat16 unless ``dtype`` says otherwise; their
    widths must be multiples of 8, so H must be when d_inner + 2 G d_state is); the convolution and the gated RMSNorm
    are PyTorch, in float32; ``conv1d``, ``dt_bias``, ``A_log``, ``D`` and ``norm.weight`` are float32 parameters
    whatever ``dtype`` is (mamba_ssm's checkpoints in other dtypes load into them). The scan's rules apply: headdim
    and d_state 64 or 128, chunk_size 64, 128 or 256 (checked at the first call).

    Every parameter trains: the scan's backward, the GEMMs' and PyTorch's for the rest.

    Decoding: ``cache = init_cache(batch)``; ``forward(u, cache)`` continues from the cache and leaves it at the
    prompt's end (a chunked prefill: call it again with the next piece); ``step(u_t, cache)`` then decodes one token per
    sequence, u_t (B, d_model) or (B, 1, d_model), with :func:`tk_ops.mamba2_step`. The cache is ``(conv_state,
    ssm_state)``, mamba_ssm's layout: conv_state (B, d_inner + 2 G d_state, d_conv) holds the last d_conv inputs of the
    convolution, ssm_state (B, H, headdim, d_state); both float32, updated in place. ``step`` runs without gradients.
    As in mamba_ssm, ``step`` applies no ``dt_limit`` clamp (equal to ``forward`` with the default limits, where the
    softplus already makes dt positive).

    Args:
        d_model: the model width.
        d_state: n, the state dimension per head: 64 or 128 for the scan.
        d_conv: the depthwise convolution's width.
        expand: d_inner = expand * d_model.
        headdim: p, the head dimension (64 or 128); d_inner must be a multiple of it.
        ngroups: G, the groups of B and C, dividing the heads.
        chunk_size: the scan's chunk, 64, 128 or 256 (speed only).
        A_init_range: ``(low, high)``, 0 < low <= high: A = -exp(A_log) starts uniform in -high .. -low.
        D_has_hdim: D per channel (d_inner,) instead of per head (H,).
        rmsnorm: apply the gated RMSNorm (True) or gate the scan's output with silu(z) directly.
        norm_before_gate: with rmsnorm, normalise before the gate instead of after it.
        dt_min: the lower end of the initial dt (log-uniform).
        dt_max: the upper end of the initial dt.
        dt_init_floor: the smallest initial dt.
        dt_limit: ``(low, high)`` clamp of dt in ``forward``.
        bias: give in_proj and out_proj a bias.
        conv_bias: give the convolution a bias.
        conv_init: None (torch's initialisation) or a bound b: the convolution weights start uniform in -b .. b.
        layer_idx: the layer's index, kept for callers' caches (mamba_ssm's argument); unused here.
        device: where the parameters are created (None: torch's default device).
        dtype: the projections' dtype (None: bfloat16); the other parameters are float32.

    ``forward(u)`` returns out (B, L, d_model) in the projections' dtype for u (B, L, d_model) (:meth:`forward`).

    Autograd:
        Every parameter trains, through the scan's backward, the GEMMs' and PyTorch's for the rest.

    Raises:
        InputError: at construction, a size is not a positive int, d_inner is not a multiple of headdim, ngroups does
            not divide the heads, A_init_range is not increasing and positive, or a flag is not a bool. The scan's own
            rules (headdim and d_state 64 or 128, chunk_size 64, 128 or 256) are checked at the first call.

    Example::

        mixer = tk_ops.nn.Mamba2(1024, device="cuda")         # d_state 128, headdim 64: 32 heads
        u = torch.randn(2, 4096, 1024, device="cuda", dtype=torch.bfloat16)
        y = mixer(u)                                           # (2, 4096, 1024) bfloat16
        y.float().square().mean().backward()
    """

    def __init_subclass__(cls, **kwargs):
        # The scan was once the class attribute `scan`: a subclass that still sets it would be ignored silently.
        super().__init_subclass__(**kwargs)
        if "scan" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: tk_ops.nn.Mamba2 has no `scan` hook; override _chunk_scan() instead")

    def __init__(self, d_model: int, d_state: int = 128, d_conv: int = 4, expand: int = 2, headdim: int = 64,
                 ngroups: int = 1, chunk_size: int = 256, A_init_range: tuple[float, float] = (1.0, 16.0),
                 D_has_hdim: bool = False, rmsnorm: bool = True, norm_before_gate: bool = False,
                 dt_min: float = 0.001, dt_max: float = 0.1, dt_init_floor: float = 1e-4,
                 dt_limit: tuple[float, float] = (0.0, float("inf")), bias: bool = False, conv_bias: bool = True,
                 conv_init: float | None = None, layer_idx: int | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        name = "tk_ops.nn.Mamba2"
        for arg, value in (("d_model", d_model), ("d_state", d_state), ("d_conv", d_conv), ("expand", expand),
                           ("headdim", headdim), ("ngroups", ngroups), ("chunk_size", chunk_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        d_inner = expand * d_model
        if d_inner % headdim:
            raise InputError(f"{name}: expand * d_model = {d_inner} must be a multiple of headdim = {headdim}")
        nheads = d_inner // headdim
        if nheads % ngroups:
            raise InputError(f"{name}: ngroups = {ngroups} must divide the number of heads expand * d_model / headdim "
                             f"= {nheads}")
        if not (0 < A_init_range[0] <= A_init_range[1]):
            raise InputError(f"{name}: A_init_range must be (low, high) with 0 < low <= high, got {A_init_range!r}")
        for flag, value in (("D_has_hdim", D_has_hdim), ("rmsnorm", rmsnorm), ("norm_before_gate", norm_before_gate),
                            ("bias", bias), ("conv_bias", conv_bias)):
            if not isinstance(value, bool):
                raise InputError(f"{name}: {flag} must be a bool, got {type(value).__name__}")
        dtype = torch.bfloat16 if dtype is None else dtype
        f32 = dict(device=device, dtype=torch.float32)
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.headdim, self.ngroups, self.chunk_size, self.layer_idx = headdim, ngroups, chunk_size, layer_idx
        self.d_inner, self.nheads = d_inner, nheads
        self.D_has_hdim, self.rmsnorm, self.norm_before_gate = D_has_hdim, rmsnorm, norm_before_gate
        self.dt_limit = (float(dt_limit[0]), float(dt_limit[1]))
        self.conv_dim = d_inner + 2 * ngroups * d_state

        self.in_proj = Linear(d_model, 2 * d_inner + 2 * ngroups * d_state + nheads, bias=bias, device=device,
                              dtype=dtype)
        self.conv1d = torch.nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim, padding=d_conv - 1,
                                      bias=conv_bias, **f32)
        if conv_init is not None:
            torch.nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        # mamba_ssm's initialisation: dt log-uniform in [dt_min, dt_max] (floored), stored as softplus^-1(dt); A
        # uniform in A_init_range, stored as its log; D one.
        dt = torch.exp(torch.rand(nheads, **f32) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        dt = dt.clamp(min=dt_init_floor)
        self.dt_bias = torch.nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = torch.nn.Parameter(torch.empty(nheads, **f32).uniform_(*A_init_range).log())
        self.D = torch.nn.Parameter(torch.ones(d_inner if D_has_hdim else nheads, **f32))
        for p in (self.dt_bias, self.A_log, self.D):
            p._no_weight_decay = True
        if rmsnorm:
            self.norm = _GatedRMSNorm(d_inner, eps=1e-5, norm_before_gate=norm_before_gate,
                                      group_size=d_inner // ngroups, device=device)
        self.out_proj = Linear(d_inner, d_model, bias=bias, device=device, dtype=dtype)

    # ------------------------------------------------------------------ pieces shared by forward and step

    def _split_projection(self, zxbcdt: torch.Tensor):
        return zxbcdt.split([self.d_inner, self.conv_dim, self.nheads], dim=-1)

    def _split_conv_output(self, xBC: torch.Tensor):
        """x (..., H, headdim), B and C (..., G, d_state): views."""
        g, n = self.ngroups, self.d_state
        x, B, C = xBC.split([self.d_inner, g * n, g * n], dim=-1)
        return x.unflatten(-1, (self.nheads, self.headdim)), B.unflatten(-1, (g, n)), C.unflatten(-1, (g, n))

    def _scan_parameters(self):
        A = -torch.exp(self.A_log.float())
        D = self.D.float()
        return A, (D.view(self.nheads, self.headdim) if self.D_has_hdim else D), self.dt_bias.float()

    def _chunk_scan(self, *args, **kwargs):
        """The chunked scan of forward: tk_ops.mamba2_chunk_scan (a subclass that computes the same scan otherwise,
        such as the PyTorch twin of examples/train_mamba2.py, overrides this)."""
        return mamba2_chunk_scan(*args, **kwargs)

    def _finish(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The gated norm (or nothing: without rmsnorm the scan already gated y) and the output projection; y and z
        (..., d_inner)."""
        if self.rmsnorm:
            y = self.norm(y, z)
        return self.out_proj(y.to(self.out_proj.weight.dtype))

    # ------------------------------------------------------------------ calls

    def forward(self, u: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The mixer over whole sequences: in_proj, the causal depthwise convolution, :func:`tk_ops.mamba2_chunk_scan`,
        the gated RMSNorm and out_proj (the class's formula).

        Args:
            u: (B, L, d_model) CUDA tensor in the projections' dtype (bfloat16), L >= 1.
            cache: None, or ``(conv_state, ssm_state)`` from :meth:`init_cache` (float32, batch B): the sequences
                continue from it, and it is left at their end, in place (chunked prefill before :meth:`step`).

        Returns:
            out (B, L, d_model) in the projections' dtype.

        Autograd:
            Differentiable in u and every parameter (the scan's backward kernels, the GEMMs', PyTorch's for the
            convolution and the norm). The cache is updated without gradients.

        Raises:
            InputError: u is not (B, L, d_model), the cache is not the pair :meth:`init_cache` makes for this batch,
                or the scan's rules fail (headdim or d_state not 64 or 128, chunk_size not 64, 128 or 256).
            DTypeError: u is not the projections' dtype.
            DeviceMismatchError: u is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                gemm or mamba2 family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            mixer = tk_ops.nn.Mamba2(1024, device="cuda")
            u = torch.randn(2, 4096, 1024, device="cuda", dtype=torch.bfloat16)
            cache = mixer.init_cache(2)
            with torch.no_grad():
                y1 = mixer(u[:, :2048], cache)                 # prefill in two pieces: the cache moves on
                y2 = mixer(u[:, 2048:], cache)                 # cat([y1, y2], 1) ~ mixer(u)
        """
        if u.dim() != 3 or u.shape[-1] != self.d_model:
            raise InputError(f"tk_ops.nn.Mamba2: input must be (batch, seq_len, {self.d_model}), got shape "
                             f"{tuple(u.shape)}")
        b, l, _ = u.shape
        conv_state, ssm_state = self._check_cache(cache, b) if cache is not None else (None, None)
        z, xBC, dt = self._split_projection(self.in_proj(u))
        # The causal depthwise convolution in float32: over the cache's last d_conv - 1 inputs and the new ones, or
        # over zeros (the padding) without a cache.
        xBC_t = xBC.transpose(1, 2).float()  # (B, conv_dim, L)
        if conv_state is not None:
            extended = torch.cat([conv_state[:, :, 1:], xBC_t], dim=-1)
            conv = F.conv1d(extended, self.conv1d.weight, self.conv1d.bias, groups=self.conv_dim)
            with torch.no_grad():
                conv_state.copy_(extended[:, :, -self.d_conv:])
        else:
            conv = self.conv1d(xBC_t)[..., :l]
        xBC = F.silu(conv).to(u.dtype if u.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16)
        x, B, C = self._split_conv_output(xBC.transpose(1, 2).contiguous())
        A, D, dt_bias = self._scan_parameters()
        gate = None if self.rmsnorm else z.unflatten(-1, (self.nheads, self.headdim))
        out = self._chunk_scan(x, dt.float(), A, B, C, self.chunk_size, D=D, z=gate, dt_bias=dt_bias,
                               initial_states=ssm_state, dt_softplus=True, dt_limit=self.dt_limit,
                               return_final_states=ssm_state is not None)
        if ssm_state is not None:
            y, final = out
            with torch.no_grad():
                ssm_state.copy_(final)
        else:
            y = out
        return self._finish(y.flatten(-2), z)

    @torch.no_grad()
    def step(self, u: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """One decoding step: one new token per sequence through in_proj, the convolution's sliding window,
        :func:`tk_ops.mamba2_step`, the gated RMSNorm and out_proj, updating ``cache`` in place.

        Args:
            u: (B, d_model) or (B, 1, d_model) CUDA tensor in the projections' dtype: one token per sequence.
            cache: ``(conv_state, ssm_state)`` from :meth:`init_cache`, after a prefill by ``forward(u, cache)`` or
                not; updated in place.

        Returns:
            out shaped like u, in the projections' dtype. With the default ``dt_limit``, prefill then steps give
            the outputs of one forward over the whole sequence.

        Autograd:
            None: the step runs under ``torch.no_grad()`` (it is for decoding).

        Raises:
            InputError: u is not one token per sequence of width d_model, or the cache is not the pair
                :meth:`init_cache` makes for this batch, or the step's rules fail (d_state not 16, 32, 64, 128 or
                256).
            DTypeError: u is not the projections' dtype.
            DeviceMismatchError: u is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                gemm or mamba2 family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            mixer = tk_ops.nn.Mamba2(1024, device="cuda")
            cache = mixer.init_cache(4)
            with torch.no_grad():
                mixer(torch.randn(4, 512, 1024, device="cuda", dtype=torch.bfloat16), cache)   # prefill
            y_t = mixer.step(torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16), cache)   # (4, 1024)
        """
        if u.dim() not in (2, 3) or u.shape[-1] != self.d_model or (u.dim() == 3 and u.shape[1] != 1):
            raise InputError(f"tk_ops.nn.Mamba2.step: input must be (batch, {self.d_model}) or (batch, 1, "
                             f"{self.d_model}), one token per sequence, got shape {tuple(u.shape)}")
        b = u.shape[0]
        conv_state, ssm_state = self._check_cache(cache, b)
        u2 = u.reshape(b, self.d_model)
        z, xBC, dt = self._split_projection(self.in_proj(u2))
        # The convolution's window moves by one token: the oldest input leaves, the new one enters at the end.
        conv_state.copy_(conv_state.roll(shifts=-1, dims=-1))
        conv_state[:, :, -1] = xBC
        conv = (conv_state * self.conv1d.weight[:, 0]).sum(-1)
        if self.conv1d.bias is not None:
            conv = conv + self.conv1d.bias
        x, B, C = self._split_conv_output(F.silu(conv).to(xBC.dtype))
        A, D, dt_bias = self._scan_parameters()
        gate = None if self.rmsnorm else z.unflatten(-1, (self.nheads, self.headdim))
        # dt stays a strided slice of the projection, in its dtype: the step reads it in place.
        y = mamba2_step(ssm_state, x, dt, A, B, C, D=D, z=gate, dt_bias=dt_bias, dt_softplus=True)
        return self._finish(y.flatten(-2), z).view(u.shape)

    def init_cache(self, batch: int, device: torch.device | str | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """An empty decoding cache for ``batch`` sequences, to start :meth:`forward` or :meth:`step` from.

        Args:
            batch: the number of sequences B.
            device: where to create it (None: the module's device).

        Returns:
            ``(conv_state, ssm_state)``: zeros conv_state (batch, d_inner + 2 G d_state, d_conv) and ssm_state
            (batch, H, headdim, d_state), float32; the state of an empty prefix, mamba_ssm's layout.

        Autograd:
            Plain zero tensors that do not require grad (forward and step update them in place).

        Raises:
            No tk_ops error (torch's own for a bad batch or device).

        Example::

            mixer = tk_ops.nn.Mamba2(1024, device="cuda")
            conv_state, ssm_state = mixer.init_cache(8)   # (8, 2304, 4), (8, 32, 64, 128) float32
        """
        device = self.out_proj.weight.device if device is None else device
        return (torch.zeros(batch, self.conv_dim, self.d_conv, device=device, dtype=torch.float32),
                torch.zeros(batch, self.nheads, self.headdim, self.d_state, device=device, dtype=torch.float32))

    def _check_cache(self, cache, batch: int):
        # The cache as a whole, before anything in it is updated in place: the ops would see only ssm_state, and only
        # after conv_state had moved on.
        shapes = ((batch, self.conv_dim, self.d_conv), (batch, self.nheads, self.headdim, self.d_state))
        if (not isinstance(cache, (tuple, list)) or len(cache) != 2
                or not all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and tuple(t.shape) == s
                           for t, s in zip(cache, shapes))):
            got = (", ".join(f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
                             for t in cache) if isinstance(cache, (tuple, list)) else type(cache).__name__)
            raise InputError(f"tk_ops.nn.Mamba2: the cache must be (conv_state {shapes[0]}, ssm_state {shapes[1]}), "
                             f"float32, as init_cache({batch}) makes it; got {got}")
        return cache[0], cache[1]

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, expand={self.expand}, "
                f"headdim={self.headdim}, ngroups={self.ngroups}, nheads={self.nheads}, chunk_size={self.chunk_size}, "
                f"rmsnorm={self.rmsnorm}")


class _GatedRMSNorm(torch.nn.Module):
    """mamba_ssm's gated RMSNorm (its parameter ``weight``, no bias), in float32: with the gate silu(z) applied before
    the norm (or after it when ``norm_before_gate``), each group of ``group_size`` channels is divided by its root mean
    square (plus eps) and scaled by ``weight``. Returns y's dtype."""

    def __init__(self, hidden: int, eps: float, norm_before_gate: bool, group_size: int, device=None):
        super().__init__()
        self.eps, self.norm_before_gate, self.group_size = eps, norm_before_gate, group_size
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=torch.float32))

    def forward(self, y: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        x = y.float()
        if z is not None and not self.norm_before_gate:
            x = x * F.silu(z.float())
        groups = x.unflatten(-1, (-1, self.group_size))
        x = (groups * torch.rsqrt(groups.square().mean(-1, keepdim=True) + self.eps)).flatten(-2) * self.weight
        if z is not None and self.norm_before_gate:
            x = x * F.silu(z.float())
        return x.to(y.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, group_size={self.group_size}"
