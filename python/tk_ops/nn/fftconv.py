"""``tk_ops.nn.LongConv``: a causal long convolution layer on the tk_ops FFT convolution."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import _ext
from ..errors import InputError
from ..fftconv import fftconv


class LongConv(torch.nn.Module):
    """A long causal convolution with one learned filter per channel, on :func:`tk_ops.fftconv`: the sequence mixer of
    H3- and Hyena-style models. ``forward(u, pregate=None, postgate=None)`` takes u and the optional gates as
    (B, N, d_model), bfloat16 or float16 (the gates in u's dtype), 1 <= N <= max_len, and returns (B, N, d_model) in
    u's dtype::

        v = u * pregate                                     # pregate None: v = u
        y = postgate * (causal_conv(v, k_eff) + D * v)      # postgate None: no gating
        causal_conv(v, k_eff)[b, n, h] = sum_{m <= n} k_eff[h, m] v[b, n - m, h]
        k_eff[h, m] = k[h, m] * exp(-exp(log_decay[h]) * m / max_len)       m = 0 .. N - 1

    Parameters, float32 whatever the input's dtype (the op takes a float32 filter, and its gradient comes out in
    float32):

    - ``k`` (d_model, max_len): the explicit filter taps, N(0, 1 / max_len) at first, so that a channel's output has
      about the variance of its input over the window.
    - ``log_decay`` (d_model,): the log of each channel's decay rate alpha_h. The exponential window makes distant
      taps start small (a smooth, mostly local filter is what these models learn first, and an explicit filter of
      thousands of noisy taps trains poorly without it); being a parameter, each channel can widen or narrow it.
      At first the rates are evenly spaced over the channels so that the windows fall to 1e-2 after between
      ``decay_span[0]`` and ``decay_span[1]`` of max_len (alpha = ln(100) / span): Hyena's exponential modulation,
      whose defaults (0.3, 1.5) these are.
    - ``D`` (d_model,): the skip term, ones at first.

    A sequence shorter than max_len uses the filter's first N taps (time is measured in taps, so a prefix of a
    sequence gives the prefix of the output); a longer one is refused, and max_len itself may not exceed the kernels'
    longest sequence (2^20; checked when the extension is built, else at the first call).

    The skip D * v enters as the filter's tap 0 (k_eff[:, 0] + D: conv(v, k) + D v = conv(v, k + D delta)), so one
    fftconv call computes everything, postgate included, and D's gradient is the filter gradient's tap 0. The op
    reads (B, d_model, N) rows: u and the gates are handed to it as transposed views (it makes each dense, one copy),
    and y is a transposed (B, N, d_model) view of its (B, d_model, N) output. Every parameter, u and the gates train
    through the op's backward.

    Args:
        d_model: the channels, one filter each.
        max_len: the filter's length, the longest sequence the module takes (at most 2^20, the kernels' longest;
            checked at construction where the extension is installed, else at the first call).
        decay_span: ``(fastest, slowest)``, 0 < fastest <= slowest: the fractions of max_len over which the channels'
            initial windows fall to 1e-2.
        device: where the parameters are created (None: torch's default device).

    ``forward(u)`` returns y (B, N, d_model) in u's dtype for u (B, N, d_model) (:meth:`forward`).

    Autograd:
        Every parameter, u and the gates train through the op's backward (D's gradient is the filter gradient's
        tap 0).

    Raises:
        InputError: at construction, d_model or max_len is not a positive int, max_len exceeds the kernels' longest
            sequence, or decay_span is not a valid pair.
        TypeError: a subclass sets the old ``conv`` class attribute (override :meth:`convolve` instead).

    Example::

        conv = tk_ops.nn.LongConv(768, 8192, device="cuda")          # float32 parameters
        u = torch.randn(4, 8192, 768, device="cuda", dtype=torch.bfloat16)
        gate = torch.sigmoid(torch.randn(4, 8192, 768, device="cuda")).bfloat16()
        y = conv(u, postgate=gate)                                    # (4, 8192, 768) bfloat16
        y.float().square().mean().backward()                          # conv.k.grad, conv.log_decay.grad, conv.D.grad

    The module checks what the op cannot see (u's (B, N, d_model) layout and N <= max_len); the op checks the rest
    (dtypes, the gates' shapes) and names the op's (B, d_model, N) layout. ``convolve`` is the one call of the op: a
    subclass may compute the convolution otherwise (examples/train_hyena.py's PyTorch twin does).
    """

    def __init_subclass__(cls, **kwargs):
        # The convolution was once the class attribute `conv`: a subclass that still sets it would be ignored silently.
        super().__init_subclass__(**kwargs)
        if "conv" in cls.__dict__:
            raise TypeError(f"{cls.__name__}: tk_ops.nn.LongConv has no `conv` hook; override convolve() instead")

    def __init__(self, d_model: int, max_len: int, decay_span: tuple[float, float] = (0.3, 1.5),
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        name = "tk_ops.nn.LongConv"
        for arg, value in (("d_model", d_model), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name}: {arg} must be a positive int, got {value!r}")
        longest = _ext.if_built(lambda: _ext.require("fftconv").fftconv_max_len())  # the kernels' longest sequence
        if longest is not None and max_len > longest:
            raise InputError(f"{name}: max_len = {max_len} is longer than the longest sequence tk_ops.fftconv's "
                             f"kernels take, {longest}")
        if (not isinstance(decay_span, (tuple, list)) or len(decay_span) != 2
                or not all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in decay_span)
                or not 0 < decay_span[0] <= decay_span[1] < math.inf):
            raise InputError(f"{name}: decay_span must be (fastest, slowest) with 0 < fastest <= slowest, the "
                             f"fractions of max_len over which the channels' windows fall to 1e-2; got {decay_span!r}")
        self.d_model, self.max_len = d_model, max_len
        self.decay_span = (float(decay_span[0]), float(decay_span[1]))
        f32 = dict(device=device, dtype=torch.float32)
        self.k = torch.nn.Parameter(torch.empty(d_model, max_len, **f32))
        self.log_decay = torch.nn.Parameter(torch.empty(d_model, **f32))
        self.D = torch.nn.Parameter(torch.empty(d_model, **f32))
        for p in (self.log_decay, self.D):
            p._no_weight_decay = True
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set the parameters to their initial values, in place: k ~ N(0, 1 / max_len) per tap, the decay rates
        alpha_h = ln(100) / span spread evenly (linearly in alpha) over the channels for span from
        ``decay_span[1]`` down to ``decay_span[0]`` (stored as ``log_decay = log(alpha)``), and D = 1.

        Returns:
            None; the module's parameters are overwritten without recording gradients (under ``torch.no_grad()``),
            so it may be called on a module that is training.

        Raises:
            No tk_ops error.

        Example::

            conv = tk_ops.nn.LongConv(768, 4096, device="cuda")
            conv.reset_parameters()                                   # re-draw k, reset the decays and D
        """
        fastest, slowest = self.decay_span
        with torch.no_grad():
            self.k.normal_(0.0, self.max_len ** -0.5)
            rates = torch.linspace(math.log(100) / slowest, math.log(100) / fastest, self.d_model,
                                   device=self.log_decay.device, dtype=torch.float32)
            self.log_decay.copy_(rates.log())
            self.D.fill_(1.0)

    def effective_filter(self, n: int) -> torch.Tensor:
        """The filter the module convolves sequences of length n with, the skip term included::

            k_eff[h, m] = k[h, m] * exp(-exp(log_decay[h]) * m / max_len) + (D[h] if m == 0 else 0),  m = 0 .. n - 1

        Args:
            n: the sequence length, 1 <= n <= max_len (a prefix of the filter's taps).

        Returns:
            k_eff (d_model, n) float32 on the parameters' device.

        Autograd:
            Differentiable in k, log_decay and D (plain PyTorch ops), which is how they train through
            :meth:`forward`.

        Raises:
            No tk_ops error (n past max_len is refused by :meth:`forward`, not here).

        Example::

            conv = tk_ops.nn.LongConv(768, 4096, device="cuda")
            k_eff = conv.effective_filter(1024)                       # (768, 1024) float32
        """
        t = torch.arange(n, device=self.k.device, dtype=torch.float32) * (1.0 / self.max_len)
        window = torch.exp(-self.log_decay.exp()[:, None] * t)
        return self.k[:, :n] * window + F.pad(self.D[:, None], (0, n - 1))

    def forward(self, u: torch.Tensor, pregate: torch.Tensor | None = None,
                postgate: torch.Tensor | None = None) -> torch.Tensor:
        """The gated long convolution of u along the sequence, per channel::

            v = u * pregate                                     # pregate None: v = u
            y = postgate * (causal_conv(v, k_eff) + D * v)      # postgate None: no gating

        with k_eff = :meth:`effective_filter` (N), one :func:`tk_ops.fftconv` call.

        Args:
            u: (B, N, d_model) bfloat16 or float16 CUDA tensor, 1 <= N <= max_len.
            pregate: None, or (B, N, d_model) in u's dtype, multiplied into u before the convolution.
            postgate: None, or (B, N, d_model) in u's dtype, multiplied into the result.

        Returns:
            y (B, N, d_model) in u's dtype (a transposed view of the op's (B, d_model, N) output).

        Autograd:
            Differentiable in u, the gates, k, log_decay and D, through the fftconv backward kernels.

        Raises:
            InputError: u is not (B, N, d_model) with 1 <= N <= max_len, or a gate's shape is not u's (the op then
                names its (B, d_model, N) layout).
            DTypeError: u is not bfloat16 or float16, or a gate is not in u's dtype.
            DeviceMismatchError: u or a gate is on the CPU or on another device than the parameters.
            ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError: the kernels are not built, lack the
                fftconv family, or the GPU is not sm_90 (tk_ops.errors).

        Example::

            conv = tk_ops.nn.LongConv(768, 4096, device="cuda")
            u = torch.randn(2, 1000, 768, device="cuda", dtype=torch.bfloat16)
            y = conv(u)                                                # (2, 1000, 768): the first 1000 taps
        """
        self._check(u)
        # The gates as the op reads them; anything else reaches the op as it is, which says what it takes.
        pre, post = (g.transpose(1, 2) if isinstance(g, torch.Tensor) and g.dim() == 3 else g
                     for g in (pregate, postgate))
        y = self.convolve(u.transpose(1, 2), self.effective_filter(u.shape[1]), pre, post)
        return y.transpose(1, 2)

    def convolve(self, u: torch.Tensor, k: torch.Tensor, pregate: torch.Tensor | None,
                 postgate: torch.Tensor | None) -> torch.Tensor:
        """The convolution step of :meth:`forward`, in the op's layout: ``postgate * causal_conv(u * pregate, k)``
        by :func:`tk_ops.fftconv`. A subclass may override it to compute the same thing otherwise (a PyTorch
        twin for comparison, say); forward passes the effective filter, skip term included.

        Args:
            u: (B, d_model, N) bfloat16 or float16 (forward passes a transposed view of its input).
            k: (d_model, N) float32, the effective filter.
            pregate: None, or (B, d_model, N) in u's dtype.
            postgate: None, or (B, d_model, N) in u's dtype.

        Returns:
            y (B, d_model, N) in u's dtype.

        Autograd:
            Differentiable in u, k and the gates (:func:`tk_ops.fftconv`'s backward).

        Raises:
            InputError, DTypeError, DeviceMismatchError: as :func:`tk_ops.fftconv` raises them for these tensors
                (shapes, dtypes, devices); ExtensionNotBuiltError, FamilyNotBuiltError, UnsupportedDeviceError for the
                build or the GPU.

        Example::

            conv = tk_ops.nn.LongConv(768, 4096, device="cuda")
            u = torch.randn(2, 768, 4096, device="cuda", dtype=torch.bfloat16)
            y = conv.convolve(u, conv.effective_filter(4096), None, None)   # (2, 768, 4096)
        """
        return fftconv(u, k, pregate, postgate)

    def _check(self, u) -> None:
        # What the op cannot know: the module's (B, N, d_model) layout and its filter's length.
        name = "tk_ops.nn.LongConv"
        if not isinstance(u, torch.Tensor) or u.dim() != 3 or u.shape[-1] != self.d_model:
            got = f"shape {tuple(u.shape)}" if isinstance(u, torch.Tensor) else type(u).__name__
            raise InputError(f"{name}: input must be (batch, seq_len, {self.d_model}), got {got}")
        if not 1 <= u.shape[1] <= self.max_len:
            raise InputError(f"{name}: seq_len = {u.shape[1]} must be between 1 and max_len = {self.max_len}, the "
                             f"filter's length; build the module with a larger max_len for longer sequences")

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, decay_span={self.decay_span}"
